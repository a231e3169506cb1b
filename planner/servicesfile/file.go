package servicesfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// A services file (pinfold apply/diff -f) is YAML or JSON:
//
//	services:
//	  web:
//	    image: nginx:1.27
//	    cpu: 1.5
//	    ...
//
// or a docker compose file (compose.go). Service is one service as
// the file wants it, in the form a deploy takes.

// Service is a service the file describes.
type Service struct {
	Deploy *pinfoldv1.DeployRequest
	Pull   string // "" (missing) or "always"
	// File and Keys name a value for a refusal made once the planner's
	// share base is known (Refused): the file (- for standard input; the
	// caller sets it), and the keys a compose file spells its own way, by the
	// pinfold file's key (cpu: services.web.cpus or
	// ….deploy.resources.limits.cpus; health: services.web.healthcheck).
	File string
	Keys map[string]string
}

// Key is field (a pinfold services file's key: cpu, health.http) as the
// file spells it: services.web.cpu, or a compose file's own key.
func (w Service) Key(field string) string {
	if k, ok := w.Keys[field]; ok {
		return k
	}
	first, _, _ := strings.Cut(field, ".")
	if k, ok := w.Keys[first]; ok {
		return k
	}
	if field == "" {
		return "services." + w.Deploy.Service
	}
	return "services." + w.Deploy.Service + "." + field
}

// fileService is one entry of a pinfold services file; every key is
// optional but image and memory. Unknown keys are errors.
type fileService struct {
	Image      string       `json:"image"`
	Command    *commandList `json:"command"`
	Env        *envList     `json:"env"`
	Network    string       `json:"network"`
	Health     *fileHealth  `json:"health"`
	Pull       string       `json:"pull"`
	CPU        *flexString  `json:"cpu"`
	Bind       bool         `json:"bind"`
	WholeCores bool         `json:"whole_cores"`
	Memory     *flexString  `json:"memory"`
	MemorySoft *flexString  `json:"memory_soft"`
	Count      *int64       `json:"count"`

	// How the instances are scheduled: strategy, max_per_host, … (the
	// stored record's keys).
	model.Scheduling
	Constraint       string   `json:"constraint"`
	Affinity         []string `json:"affinity"`
	SoftAffinity     []string `json:"soft_affinity"`
	AntiAffinity     []string `json:"anti_affinity"`
	SoftAntiAffinity []string `json:"soft_anti_affinity"`
	PlacementPolicy  string   `json:"placement_policy"`
	HostsOrder       []string `json:"hosts_order"`
	DomainSpread     string   `json:"domain_spread"`
	UseBuffer        bool     `json:"use_buffer"`

	// Ports as deploy's --port writes them: NAME=PORT[:CONTAINER]
	// (static) or NAME[:CONTAINER] (dynamic).
	Ports []string `json:"ports"`
	// The container settings, as deploy's flags of the same names.
	Volumes   []string          `json:"volumes"`
	Restart   string            `json:"restart"`
	Labels    map[string]string `json:"labels"`
	User      string            `json:"user"`
	Workdir   string            `json:"workdir"`
	ReadOnly  bool              `json:"read_only"`
	CapAdd    []string          `json:"cap_add"`
	CapDrop   []string          `json:"cap_drop"`
	LogDriver string            `json:"log_driver"`
	LogOpts   map[string]string `json:"log_opts"`
}

// fileHealth is a service's health check: one of cmd, tcp or http.
type fileHealth struct {
	Cmd     string `json:"cmd"`
	TCP     int64  `json:"tcp"`
	HTTP    string `json:"http"`
	Timeout string `json:"timeout"`
}

// fileKeys are the keys a pinfold services file's service may have.
var fileKeys = jsonKeys(fileService{})

func jsonKeys(v any) []string {
	// From the tags, not an encoding of v: an omitempty key is a key too.
	var keys []string
	for _, f := range reflect.VisibleFields(reflect.TypeOf(v)) {
		if name, ok := jsonKey(f); ok {
			keys = append(keys, name)
		}
	}
	slices.Sort(keys)
	return keys
}

// unknownKey finds the first key of raw, at any depth, that t (a struct
// of the file) does not have, as written (encoding/json would take Image
// for image, and names no map an unknown key is in): the error names the
// map the key is in (services.web.health) and that map's keys.
func unknownKey(path string, raw json.RawMessage, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return nil
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(raw, &keys) != nil {
		return nil // not a map: the decoder says what is wanted
	}
	fields := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		if name, ok := jsonKey(f); ok {
			fields[name] = f.Type
		}
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		ft, ok := fields[k]
		if !ok {
			return fmt.Errorf("%s: unknown key %q (known: %s)", path, k, strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
		}
		if err := unknownKey(path+"."+k, keys[k], ft); err != nil {
			return err
		}
	}
	return nil
}

// MaxBytes bounds a services file.
const MaxBytes = 16 << 20

// Decode reads a services file (pinfold's or a docker compose file): every service is checked before any is returned, so that
// nothing is applied when one is invalid. notes are what the caller
// should print (a compose file's ignored keys). Errors name the field
// path: services.web.cpu.
func Decode(data []byte) (want []Service, notes []string, err error) {
	if len(data) > MaxBytes {
		return nil, nil, fmt.Errorf("the file has more than %d bytes (16 MiB), the most a services file may have", MaxBytes)
	}
	if n := secondDocument(data); n > 0 {
		return nil, nil, fmt.Errorf("line %d: a second YAML document (---): a services file is one document, and the rest would be dropped unread", n)
	}
	if path, key, line := boolKey(data); key != "" {
		return nil, nil, fmt.Errorf("line %d: %s: the key %s is read as the bool %t by YAML 1.1, as services files are read (a service would be named %q): quote it, \"%s\"",
			line, path, key, yaml11True[key], strconv.FormatBool(yaml11True[key]), key)
	}
	// A key given twice (two services of one name) is an error, not the
	// last one silently; a key overriding a merged one (<<: *anchor) is
	// not, which a strict reading would refuse.
	if at, key, line := duplicateKey(data); key != "" {
		if at == "" {
			at = "the top"
		}
		return nil, nil, fmt.Errorf("line %d: key %q already set in map (%s): YAML would keep only the last", line, key, at)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, nil, fmt.Errorf("not YAML or JSON: %v", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		return nil, nil, fmt.Errorf("want a map with a services key at the top, e.g. services: {web: {image: nginx, memory: 256MiB}}")
	}
	rawServices, ok := top["services"]
	if !ok {
		return nil, nil, fmt.Errorf("no services key at the top (keys: %s)", strings.Join(slices.Sorted(maps.Keys(top)), ", "))
	}
	var services map[string]json.RawMessage
	if err := json.Unmarshal(rawServices, &services); err != nil {
		return nil, nil, fmt.Errorf("services: want a map of service names to services")
	}
	if isCompose(top, services) {
		return decodeCompose(top, services)
	}
	// x- keys are extension fields, as in a compose file: they hold YAML
	// anchors the services use, and are not read.
	if extra := slices.DeleteFunc(slices.Sorted(maps.Keys(top)), func(k string) bool { return k == "services" || k == projectKey || isExtension(k) }); len(extra) > 0 {
		return nil, nil, fmt.Errorf("unknown top-level key %q: a pinfold services file has services, project and x- extension keys (for YAML anchors)", extra[0])
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(services)) {
		w, err := decodeFileService(name, services[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		want = append(want, w)
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return want, nil, nil
}

// decodeFileService decodes and checks one service of a pinfold file.
func decodeFileService(name string, raw json.RawMessage) (Service, error) {
	path := "services." + name
	if err := model.ValidateNewServiceName(name); err != nil {
		return Service{}, fmt.Errorf("%s: %v", path, err)
	}
	if err := unknownKey(path, raw, reflect.TypeFor[fileService]()); err != nil {
		return Service{}, err
	}
	var f fileService
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Service{}, fieldError(path, err)
	}
	if f.Count == nil {
		one := int64(1)
		f.Count = &one
	}
	// The deploy as wanted (model.Deploy), converted to the wire once at
	// the end; the CPU amount stays text until the planner's share base
	// is known.
	want := model.Deploy{Spec: model.Spec{Image: f.Image, Network: f.Network, Pull: f.Pull}, Size: model.Size{Bind: f.Bind, WholeCores: f.WholeCores}, Rules: model.Rules{Constraint: f.Constraint, Affinity: model.Affinity{Hard: f.Affinity, Soft: f.SoftAffinity},
		AntiAffinity: model.Affinity{Hard: f.AntiAffinity, Soft: f.SoftAntiAffinity}, Policy: f.PlacementPolicy,
		HostsOrder: f.HostsOrder, DomainSpread: f.DomainSpread}, Scheduling: f.Scheduling}
	if f.Command != nil {
		want.Command = *f.Command
	}
	if f.Env != nil {
		want.Env = *f.Env
	}
	cpu := flexString("1")
	if f.CPU != nil {
		cpu = *f.CPU
	}
	cpuText, err := checkCPU(path+".cpu", string(cpu))
	if err != nil {
		return Service{}, err
	}
	if f.Memory == nil {
		return Service{}, fmt.Errorf("%s.memory: missing: the memory per instance, e.g. memory: 512MiB", path)
	}
	if want.Memory, err = checkSize(path+".memory", string(*f.Memory)); err != nil {
		return Service{}, err
	}
	if f.MemorySoft != nil {
		if want.MemorySoft, err = checkSize(path+".memory_soft", string(*f.MemorySoft)); err != nil {
			return Service{}, err
		}
	}
	if f.Health != nil {
		if want.Health, err = f.Health.check(path + ".health"); err != nil {
			return Service{}, err
		}
	}
	if f.Count == nil || *f.Count < 0 || *f.Count > model.MaxDeployCount {
		return Service{}, fmt.Errorf("%s.count: %d: want 0 to %d", path, *f.Count, model.MaxDeployCount)
	}
	if err := f.Scheduling.Validate(); err != nil {
		return Service{}, pathError(under(path), path, err)
	}
	want.Container = model.Container{Volumes: f.Volumes, Restart: f.Restart, Labels: f.Labels, User: f.User, Workdir: f.Workdir, ReadOnly: f.ReadOnly,
		CapAdd: f.CapAdd, CapDrop: f.CapDrop, LogDriver: f.LogDriver, LogOpts: f.LogOpts}
	if err := want.Container.Validate(); err != nil {
		return Service{}, fmt.Errorf("%s: %v", path, err)
	}
	if want.Ports, err = filePorts(path, f.Ports, want.Network); err != nil {
		return Service{}, err
	}
	d := pinfoldv1.NewDeployRequest(name, int(*f.Count), want, cpuText)
	d.UseBuffer = f.UseBuffer
	if err := checkWant(under(path), d, f.Pull); err != nil {
		return Service{}, err
	}
	return Service{Deploy: d, Pull: f.Pull}, nil
}

// checkWant checks what both file kinds share, as deploy checks its flags;
// key is a field's key as the file spells it (services.web.strategy, or a
// compose file's services.web.x-pinfold-strategy).
func checkWant(key func(field string) string, d *pinfoldv1.DeployRequest, pull string) error {
	if strings.TrimSpace(d.Image) == "" {
		return fmt.Errorf("%s: missing: the container image the instances run, e.g. image: debian:12", key("image"))
	}
	if f, _ := strconv.ParseFloat(d.Cpu, 64); d.Bind && f == 0 {
		return fmt.Errorf("%s: %q: a CPU-bound instance (bind: true) needs more than 0 CPUs", key("cpu"), d.Cpu)
	}
	if d.MemoryBytes < model.MinInstanceMemory {
		return fmt.Errorf("%s: %s: want at least %s (the Docker engine's smallest memory limit)", key("memory"), alloc.FormatBytes(d.MemoryBytes), alloc.FormatBytes(model.MinInstanceMemory))
	}
	if d.MemorySoftBytes > d.MemoryBytes {
		return fmt.Errorf("%s: %s: want at most memory (%s)", key("memory_soft"), alloc.FormatBytes(d.MemorySoftBytes), alloc.FormatBytes(d.MemoryBytes))
	}
	if d.WholeCores && !d.Bind {
		return fmt.Errorf("%s: true needs bind: true", key("whole_cores"))
	}
	switch d.Strategy {
	case "", "auto", "each", "fill", "global", "drained":
	default:
		return fmt.Errorf("%s: %q: want auto, each, fill, global or drained", key("strategy"), d.Strategy)
	}
	if pull != "" && pull != "missing" && pull != "always" {
		return fmt.Errorf("%s: %q: want missing or always", key("pull"), pull)
	}
	for _, e := range d.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("%s: %q: want K=V", key("env"), e)
		}
	}
	if err := model.ValidateNetwork(d.Network); err != nil {
		return fmt.Errorf("%s: %v", key("network"), err)
	}
	// The placement rules, checked as the planner checks a deploy's, so a
	// bad one is refused before any service of the file is changed.
	req := placement.NewRequest(d.Service, 0, d.Model(0))
	if err := req.Validate(); err != nil {
		field, ok := map[string]string{"request.constraint": "constraint", "request.placement_policy": "placement_policy", "request.hosts_order": "hosts_order",
			"request.domain_spread": "domain_spread", "request.affinity.hard": "affinity", "request.affinity.soft": "soft_affinity",
			"request.anti_affinity.hard": "anti_affinity", "request.anti_affinity.soft": "soft_anti_affinity"}[err.Field]
		if !ok {
			field = strings.TrimPrefix(err.Field, "request.")
		}
		msg := err.Message // "request.FIELD = VALUE: why"
		if _, why, ok := strings.Cut(msg, err.Value+": "); ok {
			msg = why
		}
		return fmt.Errorf("%s: %s: %s", key(field), err.Value, msg)
	}
	return nil
}

func checkCPU(path, s string) (string, error) {
	t := strings.TrimSpace(s)
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || !alloc.IsDecimal(t) {
		return "", fmt.Errorf("%s: %q is not a number (CPUs, e.g. 1.5)", path, s)
	}
	if f < 0 || f > alloc.MaxCPUs {
		return "", fmt.Errorf("%s: %q: want a number of CPUs from 0 to %d", path, s, int(alloc.MaxCPUs))
	}
	return t, nil
}

func checkSize(path, s string) (int64, error) {
	n, err := alloc.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a size such as 512MiB, 1.5GiB or 1G", path, s)
	}
	return n, nil
}

func (h *fileHealth) check(path string) (*model.HealthCheck, error) {
	n := 0
	for _, set := range []bool{h.Cmd != "", h.TCP != 0, h.HTTP != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("%s: want exactly one of cmd, tcp or http", path)
	}
	if h.TCP < 0 || h.TCP > 65535 {
		return nil, fmt.Errorf("%s.tcp: %d: want a port from 1 to 65535", path, h.TCP)
	}
	if h.Timeout != "" {
		if d, err := time.ParseDuration(h.Timeout); err != nil || d <= 0 {
			return nil, fmt.Errorf("%s.timeout: %q: want a duration such as 30s", path, h.Timeout)
		}
	}
	m := &model.HealthCheck{TCP: int(h.TCP), HTTP: h.HTTP, Timeout: h.Timeout}
	if h.Cmd != "" {
		m.Exec = []string{"sh", "-c", h.Cmd}
	}
	return m, nil
}

// jsonKey is a struct field's key in a file (its json tag's name), and
// whether it has one of its own (an embedded struct's fields do).
func jsonKey(f reflect.StructField) (string, bool) {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name, name != "" && name != "-" && !f.Anonymous && f.IsExported()
}

// under is the keys of a file's fields under path: services.web.KEY.
func under(path string) func(field string) string {
	return func(field string) string { return path + "." + field }
}

// keyError is a model value's refusal (a *model.FieldError) named by the
// file's key for its field (services.web.max_per_host: -1: why), and
// whether err was one.
func keyError(key func(field string) string, err error) (error, bool) {
	fe, ok := errors.AsType[*model.FieldError](err)
	if !ok {
		return err, false
	}
	return fmt.Errorf("%s: %s: %s", key(fe.Key), fe.Value, fe.Why), true
}

// pathError is keyError, or err under path when it names no field.
func pathError(key func(field string) string, path string, err error) error {
	if e, ok := keyError(key, err); ok {
		return e
	}
	return fmt.Errorf("%s: %v", path, err)
}

// fieldError turns a JSON decoding error of the service at path into one
// naming the key.
func fieldError(path string, err error) error {
	if e, ok := keyError(under(path), err); ok { // a model type's own reader (a priority's name)
		return e
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		want, custom := customWant[te.Type]
		if !custom {
			want = goTypeWord(te.Type.Kind().String())
		}
		hint := ""
		if !custom && te.Type.Kind() == reflect.String && (te.Value == "bool" || te.Value == "number") {
			// YAML reads y, yes, no, on, off and unquoted numbers as such.
			hint = fmt.Sprintf(" (YAML read the value as a %s: quote it)", te.Value)
		}
		article := "a"
		if te.Value == "array" || te.Value == "object" {
			article = "an"
		}
		return fmt.Errorf("%s: %s %s where %s is wanted%s", joinPath(path, jsonPath(te.Field)), article, te.Value, want, hint)
	}
	msg := err.Error()
	if k, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fmt.Errorf("%s: unknown key %s (known: %s)", path, k, strings.Join(fileKeys, ", "))
	}
	// A custom decoder's error: "json: cannot unmarshal ... into Go struct
	// field fileService.cpu of type ...: reason".
	if i := strings.Index(msg, "Go struct field "); i >= 0 {
		rest := msg[i+len("Go struct field "):]
		field, reason, _ := strings.Cut(rest, ": ")
		field, _, _ = strings.Cut(field, " of type")
		if _, f, ok := strings.Cut(field, "."); ok {
			field = f
		}
		return fmt.Errorf("%s: %s", joinPath(path, jsonPath(field)), reason)
	}
	return fmt.Errorf("%s: %v", path, err)
}

// joinPath is path.field, or path when field is "" (the value at path
// itself is of the wrong type: a key indented as a service).
func joinPath(path, field string) string {
	if field == "" {
		return path
	}
	return path + "." + field
}

// jsonPath is a decoder's field path as the file spells it: the Go names
// of embedded structs (Scheduling.max_per_host,
// composeIsolation.privileged) dropped, told by an upper-case letter no
// key of a file's structs has.
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	keep := parts[:0]
	for _, p := range parts {
		if p != "" && strings.ToLower(p) == p {
			keep = append(keep, p)
		}
	}
	if len(keep) == 0 {
		return field
	}
	return strings.Join(keep, ".")
}

func goTypeWord(kind string) string {
	switch kind {
	case "int", "int32", "int64":
		return "a whole number"
	case "bool":
		return "true or false"
	case "slice":
		return "a list"
	case "struct", "map":
		return "a map"
	}
	return "a " + kind
}

// filePorts reads a service's ports, written as deploy's --port.
func filePorts(path string, list []string, network string) ([]model.Port, error) {
	var ports []model.Port
	for _, f := range list {
		p, err := model.ParsePort(f)
		if err != nil {
			return nil, fmt.Errorf("%s.ports: %v", path, err)
		}
		ports = append(ports, p)
	}
	if err := model.ValidatePorts(ports, network); err != nil {
		return nil, fmt.Errorf("%s.ports: %v", path, err)
	}
	return ports, nil
}
