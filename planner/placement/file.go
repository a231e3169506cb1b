package placement

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"

	"github.com/pinfold/pinfold/planner/alloc"
)

// File is the `pinfold plan` input with the placement rules: the
// allocation engine's file (docs/PLAN.md) plus host properties and domains,
// request rules and cluster settings.
type File struct {
	alloc.File
	Hosts                []FileHost         `json:"hosts"`
	Request              *FileReq           `json:"request"`
	BufferPercent        map[string]float64 `json:"buffer_percent"`
	OverbookingPercent   map[string]float64 `json:"overbooking_percent"`
	ConstraintPriorities map[string]int     `json:"constraint_priorities"`
}

// FileHost is a plan-file host with its placement fields.
type FileHost struct {
	alloc.FileHost
	Properties    map[string]any `json:"properties"`
	HostType      string         `json:"host_type"`
	FaultDomain   string         `json:"fault_domain"`
	UpgradeDomain string         `json:"upgrade_domain"`
	Disabled      bool           `json:"disabled"`
	Maintenance   bool           `json:"maintenance"`
	LoadAvg       *float64       `json:"load_avg"`
}

// FileReq is a plan-file request with its placement rules.
type FileReq struct {
	alloc.FileReq
	Constraint      string   `json:"constraint"`
	Affinity        Affinity `json:"affinity"`
	AntiAffinity    Affinity `json:"anti_affinity"`
	PlacementPolicy string   `json:"placement_policy"`
	HostsOrder      []string `json:"hosts_order"`
	DomainSpread    string   `json:"domain_spread"`
	UseBuffer       bool     `json:"use_buffer"`
}

// Input is a decoded and validated plan file.
type Input struct {
	*alloc.Input
	Hosts    []*Host
	Request  *Request
	Settings Settings
}

func invalid(field string, value any, format string, args ...any) *alloc.Error {
	v := fmt.Sprint(value)
	if s, ok := value.(string); ok {
		v = fmt.Sprintf("%q", s)
	}
	return &alloc.Error{Code: alloc.CodeInvalid, Field: field, Value: v, Message: fmt.Sprintf("%s = %s: %s", field, v, fmt.Sprintf(format, args...))}
}

// DecodeFile reads and validates a plan file; errors are *alloc.Error with
// CodeInvalid naming the field.
func DecodeFile(r io.Reader) (*Input, error) {
	var f File
	if err := alloc.DecodeJSON(r, &f); err != nil {
		return nil, err
	}
	af := f.File
	af.Hosts = make([]alloc.FileHost, len(f.Hosts))
	for i, h := range f.Hosts {
		af.Hosts[i] = h.FileHost
	}
	if f.Request != nil {
		af.Request = &f.Request.FileReq
	}
	ain, err := af.Validate()
	if err != nil {
		return nil, err
	}
	in := &Input{Input: ain}
	for i, fh := range f.Hosts {
		h := &Host{Name: fh.Name, Type: fh.HostType, FaultDomain: fh.FaultDomain, UpgradeDomain: fh.UpgradeDomain,
			Disabled: fh.Disabled, Maintenance: fh.Maintenance, Resources: ain.Hosts[i], Properties: map[string]Value{}}
		at := fmt.Sprintf("hosts[%q]", fh.Name)
		if err := ValidateFaultDomain(fh.FaultDomain); err != nil {
			return nil, invalid(at+".fault_domain", fh.FaultDomain, "%v", err)
		}
		if fh.LoadAvg != nil {
			if *fh.LoadAvg < 0 || math.IsInf(*fh.LoadAvg, 0) {
				return nil, invalid(at+".load_avg", *fh.LoadAvg, "want 0 or more")
			}
			h.LoadAvg = *fh.LoadAvg
		}
		for _, k := range slices.Sorted(maps.Keys(fh.Properties)) {
			field := fmt.Sprintf("%s.properties[%q]", at, k)
			if err := ValidatePropertyName(k); err != nil {
				return nil, invalid(field, k, "%v", err)
			}
			switch v := fh.Properties[k].(type) {
			case string:
				h.Properties[k] = Str(v)
			case bool:
				h.Properties[k] = BoolVal(v)
			case float64:
				if v != math.Trunc(v) || math.Abs(v) > 1<<53 {
					return nil, invalid(field, v, "want a string, a boolean or a signed integer")
				}
				h.Properties[k] = IntVal(int64(v))
			default:
				return nil, invalid(field, fmt.Sprint(v), "want a string, a boolean or a signed integer")
			}
		}
		in.Hosts = append(in.Hosts, h)
	}
	in.Settings = Settings{Buffer: f.BufferPercent, Overbooking: f.OverbookingPercent}
	if len(f.ConstraintPriorities) > 0 {
		in.Settings.Priorities = map[Rule]Priority{}
		for k, v := range f.ConstraintPriorities {
			in.Settings.Priorities[k] = Priority(v)
		}
	}
	if err := in.Settings.Validate(); err != nil {
		return nil, &alloc.Error{Code: alloc.CodeInvalid, Message: err.Error()}
	}
	if fr := f.Request; fr != nil && ain.Request != nil {
		r := &Request{Request: *ain.Request, Constraint: fr.Constraint, Affinity: fr.Affinity, AntiAffinity: fr.AntiAffinity,
			Policy: Policy(fr.PlacementPolicy), HostsOrder: fr.HostsOrder, DomainSpread: Spread(fr.DomainSpread), UseBuffer: fr.UseBuffer}
		if err := r.Validate(); err != nil {
			return nil, err
		}
		in.Request = r
	}
	return in, nil
}

// ValidatePropertyName checks a property name: a word the constraint
// language can refer to, and not a built-in.
func ValidatePropertyName(k string) error {
	if k == "" || len(k) > 128 {
		return fmt.Errorf("want 1..128 characters")
	}
	for _, r := range k {
		if !isWordRune(r) {
			return fmt.Errorf("character %q cannot appear in a property name (letters, digits, _-.:/+@)", r)
		}
	}
	switch canonical(k) {
	case "HostName", "HostType":
		return fmt.Errorf("%s is built in", k)
	}
	if k == "in" {
		return fmt.Errorf("in is a keyword")
	}
	return nil
}

// Validate checks the request's placement fields, naming the field.
func (r *Request) Validate() *alloc.Error {
	if _, err := Parse(r.Constraint); err != nil {
		msg := err.Error()
		var se *SyntaxError
		if errors.As(err, &se) {
			msg = se.msgAt()
		}
		return invalid("request.constraint", r.Constraint, "%s", msg)
	}
	switch r.Policy {
	case "", NodesOrder, LoadAvg, SpreadRank:
	default:
		return invalid("request.placement_policy", string(r.Policy), "want nodes_order, load_avg or spread")
	}
	if len(r.HostsOrder) > 0 && r.Policy != NodesOrder {
		return invalid("request.hosts_order", fmt.Sprint(r.HostsOrder), "only with placement_policy nodes_order")
	}
	if _, err := ParseSpread(string(r.DomainSpread)); err != nil {
		return invalid("request.domain_spread", string(r.DomainSpread), "want adaptive, max_difference, quorum_safe or off")
	}
	for _, l := range []struct {
		field string
		svcs  []string
	}{{"request.affinity.hard", r.Affinity.Hard}, {"request.affinity.soft", r.Affinity.Soft},
		{"request.anti_affinity.hard", r.AntiAffinity.Hard}, {"request.anti_affinity.soft", r.AntiAffinity.Soft}} {
		for _, s := range l.svcs {
			if s == "" || s == r.Service {
				return invalid(l.field, s, "want other services' names")
			}
		}
	}
	return nil
}

func (e *SyntaxError) msgAt() string { return fmt.Sprintf("column %d: %s", e.Column, e.Msg) }

// AllocError turns a placement error into the engine's error type (for
// output and API mapping), with the elimination report.
func (e *Error) AllocError() *alloc.Error {
	out := &alloc.Error{Code: alloc.CodeNoHost, Message: e.Message, Eliminations: e.Eliminations}
	if e.Invalid {
		out.Code = alloc.CodeInvalid
	}
	if e.Alloc != nil {
		out.Code, out.Field, out.Value, out.Hosts = e.Alloc.Code, e.Alloc.Field, e.Alloc.Value, e.Alloc.Hosts
	}
	return out
}
