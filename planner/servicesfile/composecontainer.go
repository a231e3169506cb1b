package servicesfile

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pinfold/pinfold/planner/model"
)

// composeHardening are the compose keys that set what the container may
// do on its host, mapped onto model.Container (deploy's --user,
// --read-only, --cap-add, --cap-drop, --workdir, --label, --log-driver
// and --log-opt): dropped, a hardened service would run as root with a
// writable root and the default capabilities.
type composeHardening struct {
	User       *flexString     `json:"user"`
	ReadOnly   bool            `json:"read_only"`
	CapAdd     []string        `json:"cap_add"`
	CapDrop    []string        `json:"cap_drop"`
	WorkingDir string          `json:"working_dir"`
	Labels     *envList        `json:"labels"`
	Logging    *composeLogging `json:"logging"`
}

type composeLogging struct {
	Driver  string   `json:"driver"`
	Options *envList `json:"options"`
}

// composeIsolation are the compose keys that widen the container's reach
// into its host (devices, the host's namespaces, its confinement). pinfold
// runs none of them, and a container run without one is not the file's
// container: a set value is refused (composeRefuse). Their unset values
// (false, "", an empty list) are what pinfold runs, and are no note.
type composeIsolation struct {
	Privileged  bool              `json:"privileged"`
	Devices     []json.RawMessage `json:"devices"`
	Pid         string            `json:"pid"`
	Ipc         string            `json:"ipc"`
	UsernsMode  string            `json:"userns_mode"`
	SecurityOpt []string          `json:"security_opt"`
}

// composeRefuse is the refusal of the first isolation key c sets, by its
// path (services.web.privileged) and value, or nil.
func composeRefuse(path string, c composeIsolation, h composeHardening) error {
	switch {
	case c.Privileged:
		return fmt.Errorf("%s.privileged: true: pinfold does not run privileged containers (every device and capability of the host): name the capabilities the service needs in cap_add, or remove the key", path)
	case len(c.Devices) > 0:
		return fmt.Errorf("%s.devices: %s: pinfold passes no host devices into a container", path, cutText(rawList(c.Devices), 80))
	case c.Pid != "":
		return fmt.Errorf("%s.pid: %q: pinfold runs each container in a PID namespace of its own", path, c.Pid)
	case c.Ipc != "" && c.Ipc != "private" && c.Ipc != "shareable":
		return fmt.Errorf("%s.ipc: %q: pinfold runs each container in an IPC namespace of its own (private or shareable)", path, c.Ipc)
	case c.UsernsMode != "":
		return fmt.Errorf("%s.userns_mode: %q: pinfold runs containers in the engine's user namespace setting", path, c.UsernsMode)
	case len(c.SecurityOpt) > 0:
		return fmt.Errorf("%s.security_opt: %q: pinfold sets no security options (seccomp, AppArmor, SELinux, no-new-privileges): without them the container would be confined otherwise than the file says", path, c.SecurityOpt)
	}
	for _, s := range h.CapAdd {
		if strings.TrimPrefix(strings.ToUpper(s), "CAP_") == "ALL" {
			return fmt.Errorf("%s.cap_add: %q: every capability is privileged in all but name: name the capabilities the service needs", path, s)
		}
	}
	return nil
}

// rawList is a list of JSON values as text: [a, b].
func rawList(list []json.RawMessage) string {
	words := make([]string, len(list))
	for i, e := range list {
		words[i] = strings.Trim(string(e), `"`)
	}
	return "[" + strings.Join(words, ", ") + "]"
}

// composeContainer maps a compose service's container settings onto
// model.Container; skipped are the values pinfold has no form for (a
// relative volume path, a UDP port), listed as ignored. A bad value is an
// error naming its compose key: services.web.working_dir.
func composeContainer(path string, c composeService) (model.Container, []string, error) {
	var ctr model.Container
	var skipped, s []string
	var err error
	if ctr.Volumes, s, err = composeVolumes(path+".volumes", c.Volumes); err != nil {
		return model.Container{}, nil, err
	}
	skipped = append(skipped, s...)
	ctr.Restart, s = composeRestart(c.Restart)
	skipped = append(skipped, s...)
	if ctr.Restart == "" && c.Deploy != nil {
		ctr.Restart, s = composeRestartPolicy(c.Deploy.RestartPolicy)
		skipped = append(skipped, s...)
	}
	h := c.composeHardening
	if h.User != nil {
		ctr.User = string(*h.User)
	}
	ctr.ReadOnly, ctr.CapAdd, ctr.CapDrop, ctr.Workdir = h.ReadOnly, h.CapAdd, h.CapDrop, h.WorkingDir
	ctr.Labels = pairs(h.Labels)
	if h.Logging != nil {
		ctr.LogDriver, ctr.LogOpts = h.Logging.Driver, pairs(h.Logging.Options)
	}
	// Each setting checked alone, so that the error names the compose key
	// that gave it (working_dir, not the model's workdir).
	for _, f := range []struct {
		key string
		c   model.Container
	}{
		{"user", model.Container{User: ctr.User}},
		{"working_dir", model.Container{Workdir: ctr.Workdir}},
		{"cap_add", model.Container{CapAdd: ctr.CapAdd}},
		{"cap_drop", model.Container{CapDrop: ctr.CapDrop}},
		{"labels", model.Container{Labels: ctr.Labels}},
		{"logging.driver", model.Container{LogDriver: ctr.LogDriver}},
		{"logging.options", model.Container{LogOpts: ctr.LogOpts}},
	} {
		if err := f.c.Validate(); err != nil {
			return model.Container{}, nil, fmt.Errorf("%s.%s: %w", path, f.key, err)
		}
	}
	if err := ctr.Validate(); err != nil {
		return model.Container{}, nil, fmt.Errorf("%s: %w", path, err)
	}
	return ctr, skipped, nil
}

// pairs is a compose list of K=V (a K alone is K with an empty value) or
// map of K: V as a map; nil when there are none.
func pairs(l *envList) map[string]string {
	if l == nil || len(*l) == 0 {
		return nil
	}
	m := make(map[string]string, len(*l))
	for _, e := range *l {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	return m
}
