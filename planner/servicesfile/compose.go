package servicesfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// A docker compose file is read by a subset parser of its own, not by
// github.com/compose-spec/compose-go: that module brings 13 more modules
// (a JSON schema validator, logrus, a yaml v4 release candidate) and reads
// env files and paths from disk, for the handful of keys mapped here.
// Variables ($VAR, ${VAR}) are not filled in: a value holding one is
// refused.

// isCompose tells a docker compose file from a pinfold services file: it
// has compose's top-level keys (an x- key is either's) or compose keys in
// its services, and no service has a key only a pinfold file has (a file
// with both is read as pinfold's, whose strict decoding names the compose
// key).
func isCompose(top map[string]json.RawMessage, services map[string]json.RawMessage) bool {
	signal := false
	for k := range top {
		if k != "services" && k != projectKey && !isExtension(k) {
			signal = true
		}
	}
	for _, raw := range services {
		var keys map[string]json.RawMessage
		if json.Unmarshal(raw, &keys) != nil {
			continue
		}
		for k := range keys {
			switch {
			case slices.Contains(sharedKeys, k):
			case slices.Contains(fileKeys, k):
				return false
			default:
				signal = true
			}
		}
	}
	return signal
}

// sharedKeys are written the same in both kinds of file: they tell
// neither.
var sharedKeys = []string{"image", "command", "ports", "volumes", "restart", "labels", "user", "read_only", "cap_add", "cap_drop"}

// composeService is the part of a compose service pinfold maps.
type composeService struct {
	Image          string          `json:"image"`
	Command        *commandList    `json:"command"`
	Entrypoint     *commandList    `json:"entrypoint"`
	Environment    *envList        `json:"environment"`
	NetworkMode    string          `json:"network_mode"`
	PullPolicy     string          `json:"pull_policy"`
	CPUs           *flexString     `json:"cpus"`
	MemLimit       *flexString     `json:"mem_limit"`
	MemReservation *flexString     `json:"mem_reservation"`
	Healthcheck    *composeHealth  `json:"healthcheck"`
	Deploy         *composeDeploy  `json:"deploy"`
	Ports          json.RawMessage `json:"ports"`
	Volumes        json.RawMessage `json:"volumes"`
	Restart        json.RawMessage `json:"restart"`
	Scale          *int64          `json:"scale"`
	// EnvFile is refused when set: pinfold reads no files on the hosts.
	EnvFile json.RawMessage `json:"env_file"`
	composeHardening
	composeIsolation
}

type composeHealth struct {
	Test    *commandList `json:"test"`
	Timeout string       `json:"timeout"`
	Disable bool         `json:"disable"`
}

type composeDeploy struct {
	Mode          string           `json:"mode"`
	Replicas      *int64           `json:"replicas"`
	Resources     composeResources `json:"resources"`
	RestartPolicy json.RawMessage  `json:"restart_policy"`
	Placement     composePlacement `json:"placement"`
}

// composeResources is deploy.resources: the limits are the size pinfold
// plans, reservations.memory its soft memory. Reserved devices and
// generic resources (GPUs) are refused (composeRefuseResources); the
// keys pinfold does not map (limits.pids, as the service's pids_limit;
// reservations.cpus, a hint pinfold plans no CPUs from; any unknown
// key) are listed as ignored.
type composeResources struct {
	Limits struct {
		CPUs   *flexString `json:"cpus"`
		Memory *flexString `json:"memory"`
	} `json:"limits"`
	Reservations struct {
		Memory           *flexString       `json:"memory"`
		Devices          []json.RawMessage `json:"devices"`
		GenericResources []json.RawMessage `json:"generic_resources"`
	} `json:"reservations"`
}

// composeResourcesMapped are deploy.resources' keys, and its limits' and
// reservations', mapped or refused when set; others are ignored.
var composeResourcesMapped = map[string][]string{
	"":             {"limits", "reservations"},
	"limits":       {"cpus", "memory"},
	"reservations": {"memory", "devices", "generic_resources"},
}

// composeMapped are the service keys decodeCompose maps (or, for ports,
// volumes and restart, names as not supported yet; or, for the isolation
// keys, refuses when set); every other key is listed as ignored.
var composeMapped = jsonKeys(composeService{})

// composeDeployMapped are the deploy keys mapped; others are ignored.
var composeDeployMapped = []string{"mode", "placement", "replicas", "resources", "restart_policy"}

// composePlacementMapped are the deploy.placement keys mapped.
var composePlacementMapped = jsonKeys(composePlacement{})

// decodeCompose maps a compose file's services. Keys it cannot map are
// named in notes, per service; a value it cannot read is an error naming
// its path, and no service is returned when any is invalid. Top-level x-
// keys are compose's extension fields (they hold YAML anchors): not noted.
func decodeCompose(top map[string]json.RawMessage, services map[string]json.RawMessage) ([]Service, []string, error) {
	var (
		want  []Service
		notes []string
		errs  []error
	)
	if extra := slices.DeleteFunc(slices.Sorted(maps.Keys(top)), func(k string) bool { return k == "services" || k == "name" || isExtension(k) }); len(extra) > 0 {
		// name is the project's (Project): apply records it; it is not ignored.
		notes = append(notes, fmt.Sprintf("compose: ignored top-level keys: %s", strings.Join(extra, ", ")))
	}
	for _, name := range slices.Sorted(maps.Keys(services)) {
		w, n, err := decodeComposeService(name, services[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		want = append(want, w)
		notes = append(notes, n...)
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return want, notes, nil
}

// composeVariable is a compose variable, $VAR or ${...}, once $$ (a
// dollar sign written out) is taken away.
var composeVariable = regexp.MustCompile(`\$[{A-Za-z_]`)

// unescapeDollars is raw (a JSON value) with $$ in each string value
// made $, as compose reads it; keys are left as written (compose
// interpolates values only).
func unescapeDollars(raw json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			return strings.ReplaceAll(x, "$$", "$")
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		}
		return v
	}
	return json.Marshal(walk(v))
}

// isExtension tells an extension key (x-anything): compose ignores them.
func isExtension(k string) bool { return strings.HasPrefix(k, "x-") }

// decodeComposeService maps one compose service: its spec, size, health
// check, container settings, ports, then its scheduling (x-pinfold- keys
// and deploy's mode and placement), checked as a deploy is.
func decodeComposeService(name string, raw json.RawMessage) (Service, []string, error) {
	path := "services." + name
	keys, c, err := readComposeService(path, name, raw)
	if err != nil {
		return Service{}, nil, err
	}
	ignored := composeIgnored(keys)
	want, pull, notes := composeSpec(name, c)
	if pull == "" && c.PullPolicy != "" && c.PullPolicy != "missing" && c.PullPolicy != "if_not_present" {
		ignored = append(ignored, "pull_policy: "+c.PullPolicy)
	}
	named := map[string]string{"health": path + ".healthcheck", "env": path + ".environment",
		"count": path + ".deploy.replicas", "network": path + ".network_mode", "pull": path + ".pull_policy"}
	cpuText, n, err := composeSize(path, name, c, &want, named)
	if err != nil {
		return Service{}, nil, err
	}
	notes = append(notes, n...)
	if h := c.Healthcheck; h != nil && !h.Disable && h.Test != nil {
		if want.Health, err = composeHealthCheck(path+".healthcheck", h); err != nil {
			return Service{}, nil, err
		}
	}
	ctr, skipped, err := composeContainer(path, c)
	if err != nil {
		return Service{}, nil, err
	}
	ignored = append(ignored, skipped...)
	ports, skipped := composePorts(c.Ports)
	ignored = append(ignored, skipped...)
	want.Container = ctr
	if want.Ports, err = filePorts(path, ports, want.Network); err != nil {
		return Service{}, nil, err
	}
	if err := decodeComposeScheduling(path, keys, &want.Scheduling, named); err != nil {
		return Service{}, nil, err
	}
	count, err := composeDeployRules(path, c.Deploy, c.Scale, &want, named)
	if err != nil {
		return Service{}, nil, err
	}
	d := pinfoldv1.NewDeployRequest(name, count, want, cpuText)
	key := func(f string) string {
		if k, ok := named[f]; ok {
			return k
		}
		return path + "." + f
	}
	if err := checkWant(key, d, pull); err != nil {
		return Service{}, nil, err
	}
	if len(ignored) > 0 {
		notes = append(notes, fmt.Sprintf("compose: %s: ignored keys: %s", name, strings.Join(ignored, ", ")))
	}
	return Service{Deploy: d, Pull: pull, Keys: named}, notes, nil
}

// readComposeService reads a compose service's keys and the part of it
// pinfold maps, refusing a name pinfold cannot take, a compose variable
// and a set isolation key (composeRefuse).
func readComposeService(path, name string, raw json.RawMessage) (map[string]json.RawMessage, composeService, error) {
	var c composeService
	if err := model.ValidateNewServiceName(name); err != nil {
		return nil, c, fmt.Errorf("%s: %v (pinfold's service names: lower-case letters, digits and -)", path, err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, c, fmt.Errorf("%s: want a map of compose keys", path)
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, c, fieldError(path, err)
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if v := string(keys[k]); composeVariable.MatchString(strings.ReplaceAll(v, "$$", "")) {
			return nil, c, fmt.Errorf("%s.%s: %s: pinfold does not fill in compose variables ($VAR, ${...}): write the value", path, k, cutText(v, 80))
		}
	}
	// $$ is compose's escape of a dollar sign: the value holds one $.
	raw, err := unescapeDollars(raw)
	if err != nil {
		return nil, c, fmt.Errorf("%s: want a map of compose keys", path)
	}
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, c, fmt.Errorf("%s: want a map of compose keys", path)
	}
	c = composeService{}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, c, fieldError(path, err)
	}
	if len(c.EnvFile) > 0 && string(c.EnvFile) != "null" {
		return nil, c, fmt.Errorf("%s.env_file: %s: pinfold reads no env files (it has no project directory on the hosts): move the variables under environment:", path, cutText(string(c.EnvFile), 80))
	}
	if c.Image == "" {
		return nil, c, fmt.Errorf("%s.image: missing: pinfold runs images, it does not build them", path)
	}
	if err := composeRefuse(path, c.composeIsolation, c.composeHardening); err != nil {
		return nil, c, err
	}
	if err := composeRefuseResources(path, c.Deploy); err != nil {
		return nil, c, err
	}
	return keys, c, nil
}

// composeIgnored are the service's keys, and deploy's, its placement's
// and healthcheck's, that pinfold does not map; x- keys are extensions (an
// x-pinfold- one is pinfold's, read by decodeComposeScheduling).
func composeIgnored(keys map[string]json.RawMessage) []string {
	var ignored []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if !slices.Contains(composeMapped, k) && !isExtension(k) {
			ignored = append(ignored, k)
		}
	}
	var dk, pk map[string]json.RawMessage
	_ = json.Unmarshal(keys["deploy"], &dk)
	for _, k := range slices.Sorted(maps.Keys(dk)) {
		if !slices.Contains(composeDeployMapped, k) {
			ignored = append(ignored, "deploy."+k)
		}
	}
	var rk map[string]json.RawMessage
	_ = json.Unmarshal(dk["resources"], &rk)
	for _, k := range slices.Sorted(maps.Keys(rk)) {
		if !slices.Contains(composeResourcesMapped[""], k) {
			ignored = append(ignored, "deploy.resources."+k)
			continue
		}
		var sub map[string]json.RawMessage
		_ = json.Unmarshal(rk[k], &sub)
		for _, s := range slices.Sorted(maps.Keys(sub)) {
			if !slices.Contains(composeResourcesMapped[k], s) {
				ignored = append(ignored, "deploy.resources."+k+"."+s)
			}
		}
	}
	_ = json.Unmarshal(dk["placement"], &pk)
	for _, k := range slices.Sorted(maps.Keys(pk)) {
		if !slices.Contains(composePlacementMapped, k) {
			ignored = append(ignored, "deploy.placement."+k)
		}
	}
	var hk map[string]json.RawMessage
	_ = json.Unmarshal(keys["healthcheck"], &hk)
	for _, k := range slices.Sorted(maps.Keys(hk)) {
		if !slices.Contains(composeHealthMapped, k) {
			ignored = append(ignored, "healthcheck."+k)
		}
	}
	return ignored
}

// composeHealthMapped are the healthcheck keys mapped: pinfold's agent
// probes on its own schedule (interval, retries, start_period are its).
var composeHealthMapped = jsonKeys(composeHealth{})

// composeSpec is the deploy's image, network, command and environment,
// its pull policy ("" or always) and the notes on them.
func composeSpec(name string, c composeService) (want model.Deploy, pull string, notes []string) {
	// The deploy as wanted (model.Deploy), converted to the wire once at
	// the end; the CPU amount stays text until the planner's share base
	// is known.
	want = model.Deploy{Spec: model.Spec{Image: c.Image, Network: c.NetworkMode}}
	if c.Command != nil {
		want.Command = *c.Command
	}
	if c.Entrypoint != nil && len(*c.Entrypoint) > 0 {
		want.Command = append(slices.Clone(*c.Entrypoint), want.Command...)
		notes = append(notes, fmt.Sprintf("compose: %s: entrypoint runs as the start of the command (an image's own ENTRYPOINT still comes first)", name))
	}
	if c.Environment != nil {
		want.Env = *c.Environment
	}
	if c.PullPolicy == "always" {
		pull = "always"
	}
	return want, pull, notes
}

// composeSize reads the service's CPUs, memory and soft memory into want,
// each named by the key that gave it (cpus, or the deploy limit that
// overrides it) in named; it returns the CPU amount as text.
func composeSize(path, name string, c composeService, want *model.Deploy, named map[string]string) (string, []string, error) {
	cpu, mem, soft := c.CPUs, c.MemLimit, c.MemReservation
	cpuKey, memKey, softKey := path+".cpus", path+".mem_limit", path+".mem_reservation"
	if err := composeSameSize(path, c); err != nil {
		return "", nil, err
	}
	if dp := c.Deploy; dp != nil {
		if l := dp.Resources.Limits; l.CPUs != nil {
			cpu, cpuKey = l.CPUs, path+".deploy.resources.limits.cpus"
		}
		if l := dp.Resources.Limits; l.Memory != nil {
			mem, memKey = l.Memory, path+".deploy.resources.limits.memory"
		}
		if r := dp.Resources.Reservations; r.Memory != nil {
			soft, softKey = r.Memory, path+".deploy.resources.reservations.memory"
		}
	}
	named["cpu"], named["memory"], named["memory_soft"] = cpuKey, memKey, softKey
	var (
		notes   []string
		err     error
		cpuText = "1"
	)
	if cpu != nil {
		if cpuText, err = checkCPU(cpuKey, string(*cpu)); err != nil {
			return "", nil, err
		}
	} else {
		notes = append(notes, fmt.Sprintf("compose: %s: no CPU limit: 1 CPU (a memory-first quota)", name))
	}
	if mem == nil {
		return "", nil, fmt.Errorf("%s.deploy.resources.limits.memory: missing: pinfold plans memory per instance, e.g. deploy: {resources: {limits: {memory: 256M}}}", path)
	}
	if want.Memory, err = checkComposeSize(memKey, string(*mem)); err != nil {
		return "", nil, err
	}
	if soft != nil {
		if want.MemorySoft, err = checkComposeSize(softKey, string(*soft)); err != nil {
			return "", nil, err
		}
	}
	return cpuText, notes, nil
}

// composeSameSize refuses a size given twice with two values: cpus,
// mem_limit or mem_reservation and the deploy.resources key for the same
// (compose refuses them too; the deploy key was used without a word). The
// same value under both is taken. Each value is read first, so that a bad
// one is named by its own key.
func composeSameSize(path string, c composeService) error {
	if c.Deploy == nil {
		return nil
	}
	l, r := c.Deploy.Resources.Limits, c.Deploy.Resources.Reservations
	cpus := func(key, s string) (float64, error) {
		t, err := checkCPU(key, s)
		if err != nil {
			return 0, err
		}
		return strconv.ParseFloat(t, 64)
	}
	bytes := func(key, s string) (float64, error) {
		n, err := checkComposeSize(key, s)
		return float64(n), err
	}
	for _, p := range []struct {
		short, long string
		a, b        *flexString
		read        func(key, s string) (float64, error)
	}{
		{"cpus", "deploy.resources.limits.cpus", c.CPUs, l.CPUs, cpus},
		{"mem_limit", "deploy.resources.limits.memory", c.MemLimit, l.Memory, bytes},
		{"mem_reservation", "deploy.resources.reservations.memory", c.MemReservation, r.Memory, bytes},
	} {
		if p.a == nil || p.b == nil {
			continue
		}
		a, err := p.read(path+"."+p.short, string(*p.a))
		if err != nil {
			return err
		}
		b, err := p.read(path+"."+p.long, string(*p.b))
		if err != nil {
			return err
		}
		if a != b {
			return fmt.Errorf("%s.%s: %q: %s says %q: compose refuses two values of one limit, give one of them", path, p.short, string(*p.a), p.long, string(*p.b))
		}
	}
	return nil
}

// checkComposeSize reads a compose byte size: compose's units (b, k, m,
// g with or without b, powers of 1024) or pinfold's (MiB, GiB, ...).
func checkComposeSize(path, s string) (int64, error) {
	t := strings.TrimSpace(s)
	lower := strings.ToLower(t)
	for _, u := range []struct{ compose, pinfold string }{{"kb", "KiB"}, {"mb", "MiB"}, {"gb", "GiB"}, {"k", "KiB"}, {"m", "MiB"}, {"g", "GiB"}, {"b", ""}} {
		if num, ok := strings.CutSuffix(lower, u.compose); ok && num != "" && strings.Trim(num, "0123456789.") == "" {
			t = num + u.pinfold
			break
		}
	}
	return checkSize(path, t)
}

// composeHealthCheck maps a compose healthcheck's test: ["CMD", args…],
// ["CMD-SHELL", "command"] or a string (run by a shell).
func composeHealthCheck(path string, h *composeHealth) (*model.HealthCheck, error) {
	t := []string(*h.Test)
	m := &model.HealthCheck{Timeout: h.Timeout}
	switch {
	case len(t) == 0 || t[0] == "NONE":
		return nil, nil
	case t[0] == "CMD" && len(t) > 1:
		m.Exec = t[1:]
	case t[0] == "CMD-SHELL" && len(t) == 2:
		m.Exec = []string{"sh", "-c", t[1]}
	default:
		// A string test was split into words: run it by a shell as written.
		m.Exec = []string{"sh", "-c", strings.Join(t, " ")}
	}
	return m, nil
}

// The compose keys below are not supported yet: each is named here, in
// one function per key, so that when the service spec gains ports,
// volumes and a restart policy each is mapped in one place. They return
// the words listed as ignored for the service.

// composePorts maps a service's ports to pinfold's (deploy's --port
// syntax), each named p<container port>: "80" is a dynamic host port,
// "8080:80" the static 8080. It skips (and lists) what pinfold has no
// form for: a host address, UDP, port ranges.
func composePorts(raw json.RawMessage) (ports, skipped []string) {
	if len(raw) == 0 {
		return nil, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, []string{"ports (want a list)"}
	}
	used := map[string]int{}
	for _, e := range list {
		host, ctr, proto, ok := "", "", "tcp", false
		var short string
		var long struct {
			Target    json.Number `json:"target"`
			Published json.Number `json:"published"`
			Protocol  string      `json:"protocol"`
			HostIP    string      `json:"host_ip"`
		}
		switch {
		case json.Unmarshal(e, &short) == nil:
			spec := short
			if p, q, cut := strings.Cut(spec, "/"); cut {
				spec, proto = p, q
			}
			parts := strings.Split(spec, ":")
			switch len(parts) {
			case 1:
				ctr, ok = parts[0], true
			case 2:
				host, ctr, ok = parts[0], parts[1], true
			}
		case json.Unmarshal(e, &long) == nil && long.HostIP == "":
			host, ctr, ok = long.Published.String(), long.Target.String(), long.Target != ""
			if long.Protocol != "" {
				proto = long.Protocol
			}
		}
		what := strings.Trim(string(e), `"`)
		if n, err := strconv.Atoi(ctr); !ok || proto != "tcp" || err != nil || n < 1 || n > 65535 || host != "" && !isPort(host) {
			skipped = append(skipped, "ports: "+what+" (pinfold publishes TCP ports: HOST:CONTAINER or CONTAINER, no host address or range)")
			continue
		}
		name := "p" + ctr
		if used[name]++; used[name] > 1 {
			name = fmt.Sprintf("%s-%d", name, used[name])
		}
		if host == "" {
			ports = append(ports, name+":"+ctr)
		} else {
			ports = append(ports, name+"="+host+":"+ctr)
		}
	}
	return ports, skipped
}

func isPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535
}

// composeVolumes maps a service's volumes (path: services.web.volumes):
// SOURCE:TARGET[:ro|rw] with an absolute host path (a bind mount) or a
// volume's name, in the short or the long syntax. A path relative to the
// compose file is refused: pinfold has no project directory on the hosts,
// and the container would run without its data. It skips (and lists)
// anonymous volumes and other types, which pinfold cannot place.
func composeVolumes(path string, raw json.RawMessage) (volumes, skipped []string, err error) {
	if len(raw) == 0 {
		return nil, nil, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, []string{"volumes (want a list)"}, nil
	}
	for i, e := range list {
		var short string
		var long struct {
			Type     string `json:"type"`
			Source   string `json:"source"`
			Target   string `json:"target"`
			ReadOnly bool   `json:"read_only"`
		}
		v := ""
		switch {
		case json.Unmarshal(e, &short) == nil:
			v = short
		case json.Unmarshal(e, &long) == nil && (long.Type == "bind" || long.Type == "volume"):
			v = long.Source + ":" + long.Target
			if long.ReadOnly {
				v += ":ro"
			}
		}
		src, _, two := strings.Cut(v, ":")
		if two && (strings.HasPrefix(src, ".") || strings.HasPrefix(src, "~")) {
			return nil, nil, fmt.Errorf("%s[%d]: %s: a host path relative to the compose file: pinfold has no project directory on the hosts (the container would start without its data): give an absolute host path or a named volume", path, i, cutText(string(e), 80))
		}
		if !two || src == "" {
			skipped = append(skipped, "volumes: "+strings.Trim(string(e), `"`)+" (an absolute host path or a volume's name is needed)")
			continue
		}
		volumes = append(volumes, v)
	}
	return volumes, skipped, nil
}

// composeRestart maps restart: no, always, on-failure[:N], unless-stopped.
func composeRestart(raw json.RawMessage) (string, []string) {
	if len(raw) == 0 {
		return "", nil
	}
	var r string
	if json.Unmarshal(raw, &r) != nil {
		return "", []string{"restart (want a string)"}
	}
	if r == "no" {
		return "", nil
	}
	return r, nil
}

// composeRestartPolicy maps deploy.restart_policy's condition (none,
// on-failure with max_attempts, any) to a restart policy.
func composeRestartPolicy(raw json.RawMessage) (string, []string) {
	if len(raw) == 0 {
		return "", nil
	}
	var p struct {
		Condition   string `json:"condition"`
		MaxAttempts int    `json:"max_attempts"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return "", []string{"deploy.restart_policy (want a map)"}
	}
	switch p.Condition {
	case "none":
		return "", nil
	case "", "any":
		return "always", nil
	case "on-failure":
		if p.MaxAttempts > 0 {
			return fmt.Sprintf("on-failure:%d", p.MaxAttempts), nil
		}
		return "on-failure", nil
	}
	return "", []string{"deploy.restart_policy.condition: " + p.Condition}
}

// cutText is s cut to n bytes, marked when cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
