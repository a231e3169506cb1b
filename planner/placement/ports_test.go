package placement

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
)

// holding is a host that holds the given host ports.
func holding(name string, ports ...int) *Host {
	h := host(name, "", "")
	if len(ports) > 0 {
		h.Resources.Ports = map[int]int{}
		for _, p := range ports {
			h.Resources.Ports[p]++
		}
	}
	return h
}

// TestPortsStrategies: under every strategy and with domains, a static
// port never lands twice on one host (nor on a host holding it), and
// dynamic ports are the lowest free of the range on each host, distinct
// per host.
func TestPortsStrategies(t *testing.T) {
	t.Parallel()
	static := []model.Port{{Name: "http", Host: 8080}}
	dynamic := []model.Port{{Name: "http"}, {Name: "admin", Container: 9000}}
	for _, st := range alloc.Strategies {
		for _, tc := range []struct {
			name    string
			ports   []model.Port
			count   int
			hosts   func() []*Host
			spread  Spread
			wantErr string // "" = placed
		}{
			{"static one each", static, 2, func() []*Host { return []*Host{holding("a"), holding("b"), holding("c", 8080)} }, "", ""},
			{"static more than hosts", static, 3, func() []*Host { return []*Host{holding("a"), holding("b"), holding("c", 8080)} }, "", "static port"},
			{"static held everywhere", static, 1, func() []*Host { return []*Host{holding("a", 8080), holding("b", 8080)} }, "", "no host has port 8080 free"},
			{"static with domains", static, 2, func() []*Host {
				return []*Host{host("a", "fd:/1", "u1"), host("b", "fd:/1", "u2"), host("c", "fd:/2", "u1")}
			}, MaxDifference, ""},
			{"dynamic packs", dynamic, 3, func() []*Host { return []*Host{holding("a", 20000, 20002), holding("b")} }, "", ""},
		} {
			t.Run(fmt.Sprintf("%s/%s", st, tc.name), func(t *testing.T) {
				hosts := tc.hosts()
				r := req("web", tc.count)
				r.Strategy, r.Ports, r.DomainSpread = st, tc.ports, tc.spread
				if st == alloc.Each || st == alloc.Fill {
					r.Count = 1 // Count per host
				}
				out, err := Plan(params, Settings{}, hosts, r)
				if tc.wantErr != "" {
					if err == nil {
						if st == alloc.Each || st == alloc.Fill {
							return // one per host is within the cap
						}
						t.Fatalf("placed %v, want an error containing %q", perHost(out), tc.wantErr)
					}
					if (st == alloc.Each || st == alloc.Fill) && !strings.Contains(err.Error(), "no host has port") {
						return
					}
					if !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("err = %v, want %q", err, tc.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				held := map[string]map[int]bool{}
				for _, h := range hosts {
					held[h.Name] = map[int]bool{}
					for p := range h.Resources.Ports {
						held[h.Name][p] = true
					}
				}
				for _, p := range out.Placements {
					if len(p.HostPorts) != len(tc.ports) {
						t.Fatalf("placement on %s has ports %v, want %d", p.Host, p.HostPorts, len(tc.ports))
					}
					for i, hp := range p.HostPorts {
						if hp.Name != tc.ports[i].Name || held[p.Host][hp.Host] {
							t.Fatalf("placement on %s: port %v given twice or misnamed (held %v)", p.Host, hp, held[p.Host])
						}
						if w := tc.ports[i].Host; w != 0 && hp.Host != w {
							t.Errorf("static port %s got host port %d", hp.Name, hp.Host)
						}
						if w := tc.ports[i].Container; w != 0 && hp.Container != w || w == 0 && hp.Container != hp.Host {
							t.Errorf("port %v: container port wrong", hp)
						}
						held[p.Host][hp.Host] = true
					}
				}
				if tc.name == "dynamic packs" {
					// Each host's ports are the lowest free ones of the range.
					free := map[string][]int{"a": {20001, 20003, 20004, 20005, 20006, 20007}, "b": {20000, 20001, 20002, 20003, 20004, 20005}}
					got := map[string][]int{}
					for _, p := range out.Placements {
						got[p.Host] = append(got[p.Host], p.HostPorts[0].Host, p.HostPorts[1].Host)
					}
					for h, ports := range got {
						if !slices.Equal(ports, free[h][:len(ports)]) {
							t.Errorf("host %s got ports %v, want the lowest free %v", h, ports, free[h][:len(ports)])
						}
					}
				}
			})
		}
	}
}

// TestPortsRefusalNamesRule: two hosts hold static port 8080; a third
// instance asking for it is refused by the Ports rule, which the report
// lists with both hosts and the port.
func TestPortsRefusalNamesRule(t *testing.T) {
	t.Parallel()
	r := req("web", 1)
	r.Ports = []model.Port{{Name: "http", Host: 8080}}
	hosts := []*Host{holding("a", 8080), holding("b", 8080)}
	_, err := Plan(params, Settings{}, hosts, r)
	var pe *Error
	if !errors.As(err, &pe) || pe.Invalid {
		t.Fatalf("err = %v, want a placement refusal", err)
	}
	if !strings.Contains(pe.Message, "no host has port 8080 free") {
		t.Errorf("message %q does not name the port", pe.Message)
	}
	last := pe.Eliminations[len(pe.Eliminations)-1]
	if last.Rule != RulePorts || !slices.Equal(last.Hosts, []string{"a", "b"}) {
		t.Errorf("last elimination %+v, want Ports [a b]", last)
	}
	if rep := Report(pe.Eliminations); !strings.Contains(rep, "Ports                2 eliminated: a b") {
		t.Errorf("report:\n%s", rep)
	}
	// The same request without the port places: the rule is what binds.
	r.Ports = nil
	if _, err := Plan(params, Settings{}, hosts, r); err != nil {
		t.Errorf("without ports: %v", err)
	}
	// Capacity (the dry run) says the same per host.
	r.Ports = []model.Port{{Name: "http", Host: 8080}}
	c, err := Capacity(params, Settings{}, append(hosts, holding("c")), r)
	if err != nil || c["a"].Limit != RulePorts || c["c"].Count != 1 {
		t.Errorf("capacity = %v, %v; want a limited by Ports, c taking 1", c, err)
	}
}

// TestPortsDynamicExhausted: a host whose dynamic range is all held is
// eliminated by the Ports rule.
func TestPortsDynamicExhausted(t *testing.T) {
	t.Parallel()
	full := holding("full")
	full.Resources.Ports = map[int]int{}
	for p := model.DynamicPortMin; p <= model.DynamicPortMax; p++ {
		full.Resources.Ports[p] = 1
	}
	r := req("web", 1)
	r.Ports = []model.Port{{Name: "http"}}
	out, err := Plan(params, Settings{}, []*Host{full, holding("free", 20000)}, r)
	if err != nil {
		t.Fatal(err)
	}
	if p := out.Placements[0]; p.Host != "free" || p.HostPorts[0].Host != 20001 {
		t.Errorf("placed %+v, want free with port 20001", p)
	}
	_, err = Plan(params, Settings{}, []*Host{full}, r)
	if err == nil || !strings.Contains(err.Error(), "1 free port in 20000-32000") {
		t.Errorf("err = %v, want the dynamic range named", err)
	}
}

// TestPortsValidate: bad ports are invalid requests naming the port.
func TestPortsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ports []model.Port
		want  string
	}{
		{[]model.Port{{Name: "http", Host: 70000}}, `port "http=70000": port 70000 is outside 1-65535`},
		{[]model.Port{{Name: "Http"}}, `name "Http"`},
		{[]model.Port{{Name: "http"}, {Name: "http", Host: 80}}, `name "http" is given twice`},
		{[]model.Port{{Name: "a", Host: 80}, {Name: "b", Host: 80}}, `host port 80 is also asked by port "a"`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			r := req("web", 1)
			r.Ports = tc.ports
			_, err := Plan(params, Settings{}, []*Host{holding("a")}, r)
			var pe *Error
			if !errors.As(err, &pe) || !pe.Invalid || !strings.Contains(pe.Message, tc.want) {
				t.Errorf("err = %v, want invalid containing %q", err, tc.want)
			}
		})
	}
}
