package model

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Container is the rest of what an instance's container is created with:
// volumes, restart policy, labels, user, working directory, a read-only
// root, capabilities and logging. Like the rest of Spec, none of it can
// change on a live container: a change is a replace (blue-green).
type Container struct {
	// Volumes are Docker's "SOURCE:TARGET[:ro|rw]": a bind mount when
	// SOURCE is an absolute host path, a named volume otherwise. Both live
	// on one host (HostLocal).
	Volumes []string `json:"volumes,omitempty"`
	// Restart is Docker's restart policy: "" or no, on-failure[:N],
	// always, unless-stopped.
	Restart   string            `json:"restart,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	User      string            `json:"user,omitempty"`
	Workdir   string            `json:"workdir,omitempty"`
	ReadOnly  bool              `json:"read_only,omitempty"`
	CapAdd    []string          `json:"cap_add,omitempty"`
	CapDrop   []string          `json:"cap_drop,omitempty"`
	LogDriver string            `json:"log_driver,omitempty"`
	LogOpts   map[string]string `json:"log_opts,omitempty"`
}

// IsZero reports whether c sets nothing (every field the engine's default).
func (c Container) IsZero() bool {
	return len(c.Volumes) == 0 && c.Restart == "" && len(c.Labels) == 0 && c.User == "" && c.Workdir == "" && !c.ReadOnly &&
		len(c.CapAdd) == 0 && len(c.CapDrop) == 0 && c.LogDriver == "" && len(c.LogOpts) == 0
}

// Volume is one parsed volume: a bind mount (Source an absolute host
// path) or a named volume.
type Volume struct {
	Source, Target string
	ReadOnly       bool
}

// Bind reports whether v is a bind mount (not a named volume).
func (v Volume) Bind() bool { return strings.HasPrefix(v.Source, "/") }

// String is v in Docker's form, the form Container.Volumes holds.
func (v Volume) String() string {
	s := v.Source + ":" + v.Target
	if v.ReadOnly {
		s += ":ro"
	}
	return s
}

// Kind is "bind" or "volume".
func (v Volume) Kind() string {
	if v.Bind() {
		return "bind"
	}
	return "volume"
}

// volumeName is Docker's rule for a named volume.
var volumeName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// ParseVolume reads "SOURCE:TARGET[:ro|rw]" with Docker's rules: TARGET is
// absolute, a bind's SOURCE is absolute, a named volume's name is letters,
// digits and _ . - (a letter or digit first).
func ParseVolume(s string) (Volume, error) {
	bad := func(format string, args ...any) (Volume, error) {
		return Volume{}, fmt.Errorf("volume %q: %s", s, fmt.Sprintf(format, args...))
	}
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return bad("want SOURCE:TARGET[:ro], e.g. /srv/data:/data or cache:/cache:ro")
	}
	for i, p := range parts {
		if p == "" {
			return bad("part %d is empty: want SOURCE:TARGET[:ro]", i+1)
		}
		if strings.ContainsAny(p, " \t\r\n\x00,") {
			return bad("part %q: no blanks, commas, newlines or NULs", p)
		}
	}
	v := Volume{Source: parts[0], Target: parts[1]}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
			v.ReadOnly = true
		case "rw":
		default:
			return bad("option %q: want ro or rw", parts[2])
		}
	}
	if !strings.HasPrefix(v.Target, "/") {
		return bad("container path %q is not absolute", v.Target)
	}
	if v.Target == "/" {
		return bad("container path %q: not the container's root", v.Target)
	}
	if !v.Bind() {
		if strings.ContainsAny(v.Source, "/~") || strings.HasPrefix(v.Source, ".") {
			return bad("bind source %q is not absolute", v.Source)
		}
		if !volumeName.MatchString(v.Source) {
			return bad("volume name %q: want letters, digits and _ . - (a letter or digit first), or an absolute host path", v.Source)
		}
	}
	return v, nil
}

// ParsedVolumes are c's volumes parsed (the first error stops).
func (c Container) ParsedVolumes() ([]Volume, error) {
	out := make([]Volume, 0, len(c.Volumes))
	for _, s := range c.Volumes {
		v, err := ParseVolume(s)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// HostLocal describes c's first host-local volume (a bind mount or a named
// volume: both live on one host), e.g. "bind /srv/data"; "" when it has
// none. A volume that does not parse counts too: it names a host's path.
func (c Container) HostLocal() string {
	for _, s := range c.Volumes {
		v, err := ParseVolume(s)
		if err != nil {
			return "volume " + s
		}
		return v.Kind() + " " + v.Source
	}
	return ""
}

// Restart policies.
const (
	RestartNo            = "no"
	RestartOnFailure     = "on-failure"
	RestartAlways        = "always"
	RestartUnlessStopped = "unless-stopped"
)

// ParseRestart reads a restart policy: its name and, for on-failure, the
// most retries (0: no limit). "" is no.
func ParseRestart(s string) (name string, retries int, err error) {
	name, n, hasN := strings.Cut(s, ":")
	switch name {
	case "", RestartNo, RestartAlways, RestartUnlessStopped:
		if hasN {
			return "", 0, fmt.Errorf("restart %q: only on-failure takes a count (on-failure:N)", s)
		}
		if name == "" {
			name = RestartNo
		}
		return name, 0, nil
	case RestartOnFailure:
		if !hasN {
			return name, 0, nil
		}
		r, err := strconv.Atoi(n)
		if err != nil || r < 0 || r > 1000000 {
			return "", 0, fmt.Errorf("restart %q: retries %q: want a whole number 0..1000000", s, n)
		}
		return name, r, nil
	}
	return "", 0, fmt.Errorf("restart %q: want no, on-failure[:N], always or unless-stopped", s)
}

// capName is a Linux capability's name without its CAP_ prefix.
var capName = regexp.MustCompile(`^[A-Z0-9_]+$`)

// Capability is a capability's canonical name: CAP_ prefixed, or ALL.
// ok is false for a name that is not uppercase letters, digits and _.
func Capability(s string) (string, bool) {
	if s == "ALL" {
		return s, true
	}
	bare := strings.TrimPrefix(s, "CAP_")
	if bare == "" || bare == "ALL" || !capName.MatchString(bare) {
		return "", false
	}
	return "CAP_" + bare, true
}

// LabelReserved is the prefix of the labels pinfold sets on its containers
// itself; a user's label may not use it.
const LabelReserved = "io.pinfold."

// Limits on a container's fields.
const (
	MaxVolumes    = 64
	MaxLabels     = 128
	MaxLabelBytes = 64 << 10 // keys and values together
	MaxCaps       = 64
	MaxLogOpts    = 32
	MaxFieldLen   = 4096 // a path, a volume, a log option
)

// logDriver is the form of a Docker log driver's name.
var logDriver = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.:/-]{0,127}$`)

// Validate checks every field of c; the error names the field and value.
func (c Container) Validate() error {
	if len(c.Volumes) > MaxVolumes {
		return fmt.Errorf("volumes: %d: want at most %d", len(c.Volumes), MaxVolumes)
	}
	targets := map[string]string{}
	for _, s := range c.Volumes {
		if len(s) > MaxFieldLen {
			return fmt.Errorf("volume %.100q…: %d bytes, want at most %d", s, len(s), MaxFieldLen)
		}
		v, err := ParseVolume(s)
		if err != nil {
			return err
		}
		if prev, ok := targets[v.Target]; ok {
			return fmt.Errorf("volume %q: container path %q is already mounted by %q", s, v.Target, prev)
		}
		targets[v.Target] = s
	}
	if _, _, err := ParseRestart(c.Restart); err != nil {
		return err
	}
	if len(c.Labels) > MaxLabels {
		return fmt.Errorf("labels: %d: want at most %d", len(c.Labels), MaxLabels)
	}
	n := 0
	for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
		v := c.Labels[k]
		n += len(k) + len(v)
		switch {
		case k == "":
			return fmt.Errorf("label %q: empty key: want KEY=VALUE", "="+v)
		case strings.ContainsAny(k, "= \t\r\n\x00"):
			return fmt.Errorf("label key %q: no '=', blanks, newlines or NULs", k)
		case strings.HasPrefix(k, LabelReserved):
			return fmt.Errorf("label key %q: the prefix %s is pinfold's own", k, LabelReserved)
		case strings.ContainsAny(v, "\x00"):
			return fmt.Errorf("label %q: no NULs in the value", k)
		}
	}
	if n > MaxLabelBytes {
		return fmt.Errorf("labels: %d bytes: want at most %d", n, MaxLabelBytes)
	}
	switch {
	case len(c.User) > 256 || strings.ContainsAny(c.User, " \t\r\n\x00"):
		return fmt.Errorf("user %q: want NAME, UID, NAME:GROUP or UID:GID (no blanks)", c.User)
	case c.User != "" && (strings.HasPrefix(c.User, ":") || strings.HasSuffix(c.User, ":") || strings.Count(c.User, ":") > 1):
		return fmt.Errorf("user %q: want NAME, UID, NAME:GROUP or UID:GID", c.User)
	case c.Workdir != "" && !strings.HasPrefix(c.Workdir, "/"):
		return fmt.Errorf("workdir %q: not absolute", c.Workdir)
	case len(c.Workdir) > MaxFieldLen || strings.ContainsAny(c.Workdir, "\r\n\x00"):
		return fmt.Errorf("workdir %q: no newlines or NULs, at most %d bytes", c.Workdir, MaxFieldLen)
	}
	for field, list := range map[string][]string{"cap_add": c.CapAdd, "cap_drop": c.CapDrop} {
		if len(list) > MaxCaps {
			return fmt.Errorf("%s: %d capabilities: want at most %d", field, len(list), MaxCaps)
		}
		for _, s := range list {
			if _, ok := Capability(s); !ok {
				return fmt.Errorf("%s %q: want a capability's name (uppercase letters, digits, _; CAP_ optional, e.g. NET_ADMIN) or ALL", field, s)
			}
		}
	}
	if c.LogDriver != "" && !logDriver.MatchString(c.LogDriver) {
		return fmt.Errorf("log_driver %q: want a driver's name, e.g. json-file, local, journald, none", c.LogDriver)
	}
	if len(c.LogOpts) > MaxLogOpts {
		return fmt.Errorf("log_opts: %d: want at most %d", len(c.LogOpts), MaxLogOpts)
	}
	for _, k := range slices.Sorted(maps.Keys(c.LogOpts)) {
		v := c.LogOpts[k]
		switch {
		case k == "" || strings.ContainsAny(k, "= \t\r\n\x00"):
			return fmt.Errorf("log_opt key %q: want KEY=VALUE, the key without '=', blanks or newlines", k)
		case len(k)+len(v) > MaxFieldLen || strings.ContainsAny(v, "\r\n\x00"):
			return fmt.Errorf("log_opt %q: no newlines or NULs in the value, at most %d bytes", k, MaxFieldLen)
		}
	}
	return nil
}
