package placement

import (
	"errors"
	"fmt"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
)

func invalid(field string, value any, format string, args ...any) *alloc.Error {
	v := fmt.Sprint(value)
	if s, ok := value.(string); ok {
		v = fmt.Sprintf("%q", s)
	}
	return &alloc.Error{Code: alloc.CodeInvalid, Field: field, Value: v, Message: fmt.Sprintf("%s = %s: %s", field, v, fmt.Sprintf(format, args...))}
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
	if err := model.ValidatePorts(r.Ports, ""); err != nil {
		return &alloc.Error{Code: alloc.CodeInvalid, Field: "request.ports", Value: fmt.Sprint(r.Ports), Message: err.Error()}
	}
	return nil
}

func (e *SyntaxError) msgAt() string { return fmt.Sprintf("column %d: %s", e.Column, e.Msg) }

// AllocError is a placement error as the engine's error type (its code,
// and the field and hosts when the engine ran); the elimination report
// stays with e.
func (e *Error) AllocError() *alloc.Error {
	out := &alloc.Error{Code: alloc.CodeNoHost, Message: e.Message}
	if e.Invalid {
		out.Code = alloc.CodeInvalid
	}
	if e.Alloc != nil {
		out.Code, out.Field, out.Value, out.Hosts = e.Alloc.Code, e.Alloc.Field, e.Alloc.Value, e.Alloc.Hosts
	}
	return out
}
