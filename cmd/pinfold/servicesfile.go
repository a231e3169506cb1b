package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	yamlv3 "go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
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
// or a docker compose file (compose.go). wantService is one service as
// the file wants it, in the form a deploy takes.

// wantService is a service the file describes.
type wantService struct {
	Deploy *pinfoldv1.DeployRequest
	Pull   string // "" (missing) or "always"
	// File and Keys name a value for a refusal made once the planner's
	// share base is known (checkWithPlanner): the file (- for standard
	// input), and the keys a compose file spells its own way, by the
	// pinfold file's key (cpu: services.web.cpus or
	// ….deploy.resources.limits.cpus; health: services.web.healthcheck).
	File string
	Keys map[string]string
}

// key is field (a pinfold services file's key: cpu, health.http) as the
// file spells it: services.web.cpu, or a compose file's own key.
func (w wantService) key(field string) string {
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

	Strategy         string   `json:"strategy"`
	MaxPerHost       int64    `json:"max_per_host"`
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

// flexString is a value written as a number or a string (cpu: 1.5 or
// cpu: "1.5"; memory: 1GiB or memory: 1073741824).
type flexString string

func (f *flexString) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*f = flexString(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return typeError(b, f)
	}
	*f = flexString(n.String())
	return nil
}

// typeError is a custom decoder's refusal of the JSON value b for *into:
// encoding/json adds the field, and fieldError says what is wanted
// (customWant).
func typeError(b []byte, into any) error {
	kind := "number"
	if t := bytes.TrimSpace(b); len(t) > 0 {
		switch t[0] {
		case 't', 'f':
			kind = "bool"
		case '[':
			kind = "array"
		case '{':
			kind = "object"
		case '"':
			kind = "string"
		case 'n':
			kind = "null"
		}
	}
	return &json.UnmarshalTypeError{Value: kind, Type: reflect.TypeOf(into).Elem()}
}

// customWant is what each custom decoder takes, for fieldError.
var customWant = map[reflect.Type]string{
	reflect.TypeFor[flexString]():  "a number or a string",
	reflect.TypeFor[commandList](): "a list of words or a string",
	reflect.TypeFor[envList]():     "a list of K=V or a map of K: V",
}

// commandList is a command: a list of words, or one string split like a
// shell would (quotes, backslashes; no variables or globs).
type commandList []string

func (c *commandList) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*c = list
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return typeError(b, c)
	}
	words, err := splitWords(s)
	if err != nil {
		return err
	}
	*c = words
	return nil
}

// envList is an environment: a list of K=V, or a map of K: V.
type envList []string

func (e *envList) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*e = list
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return typeError(b, e)
	}
	out := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch v := m[k].(type) {
		case nil:
			out = append(out, k+"=")
		case string:
			out = append(out, k+"="+v)
		case float64, bool:
			out = append(out, k+"="+fmt.Sprint(v))
		default:
			return fmt.Errorf("%s: want a string, number or boolean", k)
		}
	}
	*e = out
	return nil
}

// splitWords splits s into words like a POSIX shell: blanks separate,
// single quotes keep everything, double quotes and backslashes escape.
func splitWords(s string) ([]string, error) {
	var (
		words      []string
		cur        strings.Builder
		in         bool // inside a word
		quote      rune
		escapeNext bool
	)
	for _, r := range s {
		switch {
		case escapeNext:
			cur.WriteRune(r)
			escapeNext = false
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch r {
			case '"':
				quote = 0
			case '\\':
				escapeNext = true
			default:
				cur.WriteRune(r)
			}
		case r == '\\':
			escapeNext, in = true, true
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 || escapeNext {
		return nil, fmt.Errorf("%q: an unclosed quote or a trailing backslash", s)
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// fileKeys are the keys a pinfold services file's service may have.
var fileKeys = jsonKeys(fileService{})

func jsonKeys(v any) []string {
	b, _ := json.Marshal(v)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	return slices.Sorted(maps.Keys(m))
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
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
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

// maxServicesFile bounds a services file.
const maxServicesFile = 16 << 20

// decodeServicesFile reads a services file (pinfold's or a docker
// compose file): every service is checked before any is returned, so that
// nothing is applied when one is invalid. notes are what the caller
// should print (a compose file's ignored keys). Errors name the field
// path: services.web.cpu.
func decodeServicesFile(data []byte) (want []wantService, notes []string, err error) {
	if len(data) > maxServicesFile {
		return nil, nil, badInput("the file has more than %d bytes (16 MiB), the most a services file may have", maxServicesFile)
	}
	if n := secondDocument(data); n > 0 {
		return nil, nil, badInput("line %d: a second YAML document (---): a services file is one document, and the rest would be dropped unread", n)
	}
	if path, key, line := boolKey(data); key != "" {
		return nil, nil, badInput("line %d: %s: the key %s is read as the bool %t by YAML 1.1, as services files are read (a service would be named %q): quote it, \"%s\"",
			line, path, key, yaml11True[key], strconv.FormatBool(yaml11True[key]), key)
	}
	// Strict: a key given twice (two services of one name) is an error,
	// not the last one silently.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, nil, badInput("not YAML or JSON: %v", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		return nil, nil, badInput("want a map with a services key at the top, e.g. services: {web: {image: nginx, memory: 256MiB}}")
	}
	rawServices, ok := top["services"]
	if !ok {
		return nil, nil, badInput("no services key at the top (keys: %s)", strings.Join(slices.Sorted(maps.Keys(top)), ", "))
	}
	var services map[string]json.RawMessage
	if err := json.Unmarshal(rawServices, &services); err != nil {
		return nil, nil, badInput("services: want a map of service names to services")
	}
	if isCompose(top, services) {
		return decodeCompose(top, services)
	}
	if extra := slices.DeleteFunc(slices.Sorted(maps.Keys(top)), func(k string) bool { return k == "services" }); len(extra) > 0 {
		return nil, nil, badInput("unknown top-level key %q: a pinfold services file has only services", extra[0])
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
		return nil, nil, &exitError{code: exitBadInput, err: errors.Join(errs...)}
	}
	return want, nil, nil
}

// decodeFileService decodes and checks one service of a pinfold file.
func decodeFileService(name string, raw json.RawMessage) (wantService, error) {
	path := "services." + name
	if err := state.ValidateNewServiceName(name); err != nil {
		return wantService{}, fmt.Errorf("%s: %v", path, err)
	}
	if err := unknownKey(path, raw, reflect.TypeFor[fileService]()); err != nil {
		return wantService{}, err
	}
	var f fileService
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return wantService{}, fieldError(path, err)
	}
	if f.Count == nil {
		one := int64(1)
		f.Count = &one
	}
	d := &pinfoldv1.DeployRequest{Service: name, Image: f.Image, Network: f.Network, Bind: f.Bind, WholeCores: f.WholeCores,
		Strategy: f.Strategy, Constraint: f.Constraint, AffinityHard: f.Affinity, AffinitySoft: f.SoftAffinity,
		AntiAffinityHard: f.AntiAffinity, AntiAffinitySoft: f.SoftAntiAffinity, PlacementPolicy: f.PlacementPolicy,
		HostsOrder: f.HostsOrder, DomainSpread: f.DomainSpread, UseBuffer: f.UseBuffer}
	if f.Command != nil {
		d.Command = *f.Command
	}
	if f.Env != nil {
		d.Env = *f.Env
	}
	cpu := flexString("1")
	if f.CPU != nil {
		cpu = *f.CPU
	}
	var err error
	if d.Cpu, err = checkCPU(path+".cpu", string(cpu)); err != nil {
		return wantService{}, err
	}
	if f.Memory == nil {
		return wantService{}, fmt.Errorf("%s.memory: missing: the memory per instance, e.g. memory: 512MiB", path)
	}
	if d.MemoryBytes, err = checkSize(path+".memory", string(*f.Memory)); err != nil {
		return wantService{}, err
	}
	if f.MemorySoft != nil {
		if d.MemorySoftBytes, err = checkSize(path+".memory_soft", string(*f.MemorySoft)); err != nil {
			return wantService{}, err
		}
	}
	if f.Health != nil {
		if d.Health, err = f.Health.check(path + ".health"); err != nil {
			return wantService{}, err
		}
	}
	if f.Count == nil || *f.Count < 0 || *f.Count > service.MaxDeployCount {
		return wantService{}, fmt.Errorf("%s.count: %d: want 0 to %d", path, *f.Count, service.MaxDeployCount)
	}
	d.Count = int32(*f.Count)
	if f.MaxPerHost < 0 || f.MaxPerHost > math.MaxInt32 {
		return wantService{}, fmt.Errorf("%s.max_per_host: %d: want 0 (no cap) or more", path, f.MaxPerHost)
	}
	d.MaxPerHost = int32(f.MaxPerHost)
	ctr := model.Container{Volumes: f.Volumes, Restart: f.Restart, Labels: f.Labels, User: f.User, Workdir: f.Workdir, ReadOnly: f.ReadOnly,
		CapAdd: f.CapAdd, CapDrop: f.CapDrop, LogDriver: f.LogDriver, LogOpts: f.LogOpts}
	if err := ctr.Validate(); err != nil {
		return wantService{}, fmt.Errorf("%s: %v", path, err)
	}
	d.Container = pinfoldv1.NewContainerSpec(ctr)
	if d.Ports, err = filePorts(path, f.Ports, d.Network); err != nil {
		return wantService{}, err
	}
	if err := checkWant(path, d, f.Pull); err != nil {
		return wantService{}, err
	}
	return wantService{Deploy: d, Pull: f.Pull}, nil
}

// checkWant checks what both file kinds share, as deploy checks its flags.
func checkWant(path string, d *pinfoldv1.DeployRequest, pull string) error {
	if strings.TrimSpace(d.Image) == "" {
		return fmt.Errorf("%s.image: missing: the container image the instances run, e.g. image: debian:12", path)
	}
	if f, _ := strconv.ParseFloat(d.Cpu, 64); d.Bind && f == 0 {
		return fmt.Errorf("%s.cpu: %q: a CPU-bound instance (bind: true) needs more than 0 CPUs", path, d.Cpu)
	}
	if d.MemoryBytes < service.MinInstanceMemory {
		return fmt.Errorf("%s.memory: %s: want at least %s (the Docker engine's smallest memory limit)", path, alloc.FormatBytes(d.MemoryBytes), alloc.FormatBytes(service.MinInstanceMemory))
	}
	if d.MemorySoftBytes > d.MemoryBytes {
		return fmt.Errorf("%s.memory_soft: %s: want at most memory (%s)", path, alloc.FormatBytes(d.MemorySoftBytes), alloc.FormatBytes(d.MemoryBytes))
	}
	if d.WholeCores && !d.Bind {
		return fmt.Errorf("%s.whole_cores: true needs bind: true", path)
	}
	switch d.Strategy {
	case "", "auto", "each", "fill", "global", "drained":
	default:
		return fmt.Errorf("%s.strategy: %q: want auto, each, fill, global or drained", path, d.Strategy)
	}
	if pull != "" && pull != "missing" && pull != "always" {
		return fmt.Errorf("%s.pull: %q: want missing or always", path, pull)
	}
	for _, e := range d.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("%s.env: %q: want K=V", path, e)
		}
	}
	if err := service.ValidateNetwork(d.Network); err != nil {
		return fmt.Errorf("%s.network: %v", path, err)
	}
	// The placement rules, checked as the planner checks a deploy's, so a
	// bad one is refused before any service of the file is changed.
	req := placement.Request{Request: alloc.Request{Service: d.Service}, Constraint: d.Constraint, Policy: placement.Policy(d.PlacementPolicy),
		HostsOrder: d.HostsOrder, DomainSpread: placement.Spread(d.DomainSpread),
		Affinity: placement.Affinity{Hard: d.AffinityHard, Soft: d.AffinitySoft}, AntiAffinity: placement.Affinity{Hard: d.AntiAffinityHard, Soft: d.AntiAffinitySoft}}
	if err := req.Validate(); err != nil {
		key, ok := map[string]string{"request.constraint": "constraint", "request.placement_policy": "placement_policy", "request.hosts_order": "hosts_order",
			"request.domain_spread": "domain_spread", "request.affinity.hard": "affinity", "request.affinity.soft": "soft_affinity",
			"request.anti_affinity.hard": "anti_affinity", "request.anti_affinity.soft": "soft_anti_affinity"}[err.Field]
		if !ok {
			key = strings.TrimPrefix(err.Field, "request.")
		}
		msg := err.Message // "request.FIELD = VALUE: why"
		if _, why, ok := strings.Cut(msg, err.Value+": "); ok {
			msg = why
		}
		return fmt.Errorf("%s.%s: %s: %s", path, key, err.Value, msg)
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
	n, err := parseSize(path, s, false)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a size such as 512MiB, 1.5GiB or 1G", path, s)
	}
	return n, nil
}

func (h *fileHealth) check(path string) (*pinfoldv1.HealthCheck, error) {
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
	m := &pinfoldv1.HealthCheck{Tcp: int32(h.TCP), Http: h.HTTP, Timeout: h.Timeout}
	if h.Cmd != "" {
		m.Exec = []string{"sh", "-c", h.Cmd}
	}
	return m, nil
}

// fieldError turns a JSON decoding error of the service at path into one
// naming the key.
func fieldError(path string, err error) error {
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
		return fmt.Errorf("%s.%s: %s %s where %s is wanted%s", path, te.Field, article, te.Value, want, hint)
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
		return fmt.Errorf("%s.%s: %s", path, field, reason)
	}
	return fmt.Errorf("%s: %v", path, err)
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

// secondDocument is the line of a "---" that starts a second YAML document
// (one after content), or 0.
// yaml11True maps the plain words YAML 1.1 reads as bools, besides true
// and false themselves, to the bool it reads.
var yaml11True = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range []string{"y", "yes", "on"} {
		m[w], m[strings.ToUpper(w[:1])+w[1:]], m[strings.ToUpper(w)] = true, true, true
	}
	for _, w := range []string{"n", "no", "off"} {
		m[w], m[strings.ToUpper(w[:1])+w[1:]], m[strings.ToUpper(w)] = false, false, false
	}
	return m
}()

// boolKey finds the first map key written as a plain (unquoted) word that
// YAML 1.1 reads as a bool: services files are read as YAML 1.1, where a
// service named y or no becomes "true" or "false", silently. It returns
// the key's path (services.y), the key and its line; "" when there is none
// or the file is not YAML (the decoder says why).
func boolKey(data []byte) (path, key string, line int) {
	var doc yamlv3.Node
	if yamlv3.Unmarshal(data, &doc) != nil {
		return "", "", 0
	}
	var walk func(n *yamlv3.Node, at string) bool
	walk = func(n *yamlv3.Node, at string) bool {
		switch n.Kind {
		case yamlv3.DocumentNode:
			for _, c := range n.Content {
				if walk(c, at) {
					return true
				}
			}
		case yamlv3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				p := k.Value
				if at != "" {
					p = at + "." + k.Value
				}
				if _, ok := yaml11True[k.Value]; ok && k.Kind == yamlv3.ScalarNode && k.Style == 0 && k.Tag == "!!str" {
					path, key, line = p, k.Value, k.Line
					return true
				}
				if walk(n.Content[i+1], p) {
					return true
				}
			}
		case yamlv3.SequenceNode:
			for i, c := range n.Content {
				if walk(c, fmt.Sprintf("%s[%d]", at, i)) {
					return true
				}
			}
		}
		return false
	}
	walk(&doc, "")
	return path, key, line
}

func secondDocument(data []byte) int {
	content := false
	for i, l := range strings.Split(string(data), "\n") {
		t := strings.TrimRight(l, " \t\r")
		switch {
		case t == "---" || strings.HasPrefix(t, "--- "):
			if content {
				return i + 1
			}
		case t != "" && !strings.HasPrefix(strings.TrimSpace(t), "#"):
			content = true
		}
	}
	return 0
}

// filePorts reads a service's ports, written as deploy's --port.
func filePorts(path string, list []string, network string) ([]*pinfoldv1.Port, error) {
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
	return pinfoldv1.NewPorts(ports), nil
}

// checkWithPlanner checks every service of the file as the planner checks
// a deploy of it (api.DeployRequestOf, service.CheckDeploy: health, ports,
// sizes, names, rules), at the planner's share base sb, before any step is
// made: a value the planner refused halfway through the file left the
// steps before it made (issue 37). Every service is checked, and each
// refusal names the file's key and the value. sb 0 (no host to read it
// from): the largest share base, so that no amount a planner may take is
// refused here.
func checkWithPlanner(want []wantService, sb int) error {
	p := alloc.DefaultParams()
	p.ShareBase = sb
	if sb <= 0 {
		p.ShareBase = alloc.MaxShareBase
	}
	var errs []error
	for _, w := range want {
		m := proto.CloneOf(w.Deploy)
		if m.Count == 0 {
			// Held at count 0: a scale, or nothing to deploy; the rest of
			// the service is still the planner's to check.
			m.Count = 1
		}
		r, err := api.DeployRequestOf(m, p.ShareBase)
		if err == nil {
			err = service.CheckDeploy(p, r)
		}
		if err != nil {
			errs = append(errs, w.fileError(err))
		}
	}
	if len(errs) > 0 {
		return &exitError{code: exitBadInput, err: fmt.Errorf("%w (nothing was changed)", errors.Join(errs...))}
	}
	return nil
}

// plannerKeys are the planner's names of a deploy's fields, as its
// refusals start ("health http = ...", "request.max_per_host = ..."), and
// the key a pinfold services file gives each ("": the service itself).
var plannerKeys = map[string]string{
	"service": "", "request.service": "",
	"image": "image", "command entry": "command", "command and env": "command", "env entry": "env", "network": "network",
	"health check": "health", "health http": "health.http", "health tcp": "health.tcp", "health timeout": "health.timeout", "health port": "health",
	"cpu": "cpu", "request.cpu": "cpu", "memory": "memory", "request.memory_bytes": "memory", "memory soft limit": "memory_soft",
	"count": "count", "request.count": "count", "strategy": "strategy", "request.strategy": "strategy",
	"request.whole_cores": "whole_cores", "request.max_per_host": "max_per_host", "request.domain_spread": "domain_spread",
	"constraint": "constraint", "request.constraint": "constraint", "affinity": "affinity", "anti_affinity": "anti_affinity",
	"request.affinity.hard": "affinity", "request.affinity.soft": "soft_affinity",
	"request.anti_affinity.hard": "anti_affinity", "request.anti_affinity.soft": "soft_anti_affinity",
	"request.placement_policy": "placement_policy", "hosts_order": "hosts_order", "request.hosts_order": "hosts_order",
	"ports": "ports", "port": "ports", "volumes": "volumes", "volume": "volumes", "labels": "labels", "label": "labels", "label key": "labels",
	"user": "user", "workdir": "workdir",
}

// fileError is the planner's refusal err of w's deploy as the file names
// it: the file, the key as the file spells it and the value
// (services.hz.health.http: "abc": want PORT[/PATH], ...).
func (w wantService) fileError(err error) error {
	msg := err.Error()
	if ce := (*connect.Error)(nil); errors.As(err, &ce) {
		msg = ce.Message()
	}
	field, rest := "", msg
	for f := range plannerKeys {
		if r, ok := strings.CutPrefix(msg, f); ok && len(f) > len(field) && (r == "" || r[0] == ' ' || r[0] == ':') {
			field, rest = f, r
		}
	}
	if field == "" {
		rest = msg
	} else {
		rest = strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(rest, " = "), ":"), " ")
	}
	key := w.key(plannerKeys[field])
	if w.File != "" {
		key = w.File + ": " + key
	}
	return fmt.Errorf("%s: %s", key, rest)
}
