package service_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

func strp(s string) *string { return &s }

// TestPlacementRulesInTheService: properties and domains set on hosts,
// constraint and affinity on deploys, disabled and maintenance hosts in the
// elimination report, settings stored in etcd, and health warnings.
func TestPlacementRulesInTheService(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	for i, name := range []string{"h1", "h2", "h3", "h4"} {
		register(t, s, name, topologytest.Laptop().Topology())
		props := map[string]placement.Value{"HasSSD": placement.BoolVal(i%2 == 0), "Rack": placement.IntVal(int64(i))}
		if _, err := s.SetHost(ctx, service.SetHostRequest{Name: name, SetProperties: props,
			FaultDomain: strp([]string{"fd:/dc1", "fd:/dc1", "fd:/dc2", "fd:/dc2"}[i]), UpgradeDomain: strp([]string{"UD1", "UD2", "UD1", "UD2"}[i])}); err != nil {
			t.Fatal(err)
		}
	}
	// Bad host input names the field and changes nothing.
	if _, err := s.SetHost(ctx, service.SetHostRequest{Name: "h1", FaultDomain: strp("rack1")}); service.CodeOf(err) != service.Invalid || !strings.Contains(err.Error(), "rack1") {
		t.Errorf("bad fault domain = %v", err)
	}
	if _, err := s.SetHost(ctx, service.SetHostRequest{Name: "h1", SetProperties: map[string]placement.Value{"HostName": placement.Str("x")}}); service.CodeOf(err) != service.Invalid {
		t.Errorf("setting the built-in HostName = %v", err)
	}
	// Constraint: only the SSD hosts (h1, h3), one per data center.
	res, err := s.DeployWithRules(ctx, service.DeployRequest{Service: "db", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Rules: model.Rules{Constraint: "HasSSD == true"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}}})
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{res.Instances[0].Host, res.Instances[1].Host}
	slices.Sort(hosts)
	if !slices.Equal(hosts, []string{"h1", "h3"}) || res.DomainSpread == "" {
		t.Errorf("db on %v (spread %q), want h1 and h3", hosts, res.DomainSpread)
	}
	// Hard anti-affinity to db: only h2 and h4.
	res, err = s.DeployWithRules(ctx, service.DeployRequest{Service: "batch", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Rules: model.Rules{AntiAffinity: model.Affinity{Hard: []string{"db"}}}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range res.Instances {
		if in.Host == "h1" || in.Host == "h3" {
			t.Errorf("batch placed on %s next to db", in.Host)
		}
	}
	// Disable h2, put h4 in maintenance: a deploy needing no SSD finds
	// only h1 and h3, which the constraint "Rack >= 1 && HasSSD == false"
	// removes; the report names every rule.
	if _, err := s.SetEnabled(ctx, "h2", false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetMaintenance(ctx, "h4", 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(s.Store().Schedulable()) == 2 }, "h2 and h4 out of the index")
	_, err = s.DeployWithRules(ctx, service.DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Rules: model.Rules{Constraint: "Rack >= 1 && HasSSD == false"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}}})
	var se *service.Error
	if !errorsAs(err, &se) || se.Code != service.Exhausted {
		t.Fatalf("err = %v", err)
	}
	if pe := (*placement.Error)(nil); !errors.As(err, &pe) || len(pe.Eliminations) == 0 {
		t.Errorf("the placement error is not reachable through the service error: %v", err)
	}
	got := map[string][]string{}
	for _, e := range se.Eliminations {
		got[e.Rule] = e.Hosts
	}
	if !slices.Equal(got["Disabled"], []string{"h2"}) || !slices.Equal(got["Maintenance"], []string{"h4"}) || !slices.Equal(got["PlacementConstraint"], []string{"h1", "h3"}) {
		t.Errorf("eliminations = %v", se.Eliminations)
	}
	if !strings.Contains(err.Error(), "Elimination sequence") || !strings.Contains(err.Error(), "PlacementConstraint  2 eliminated: h1 h3") {
		t.Errorf("message:\n%s", err)
	}
	// Bad rules are invalid input.
	for _, r := range []model.Rules{{Constraint: "Rack >"}, {Policy: "random"}, {DomainSpread: "wide"}, {Affinity: model.Affinity{Hard: []string{"web"}}}} {
		if _, err := s.DeployWithRules(ctx, service.DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Rules: r, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}}}); service.CodeOf(err) != service.Invalid {
			t.Errorf("rules %+v: %v, want invalid", r, err)
		}
	}
	// Settings live in etcd; a 50% CPU buffer leaves h1 and h3 (4 of 8
	// CPUs, 1 used each) room for 3 more 1-CPU instances each.
	if _, err := s.SetPlacementSettings(ctx, placement.Settings{Buffer: map[string]float64{"cpu": 0.5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetPlacementSettings(ctx, placement.Settings{Buffer: map[string]float64{"cpu": 0.5}, Overbooking: map[string]float64{"cpu": 0.1}}); service.CodeOf(err) != service.Invalid {
		t.Errorf("buffer and overbooking on cpu accepted: %v", err)
	}
	waitFor(t, func() bool { return s.Store().PlacementSettings().Buffer["cpu"] == 0.5 }, "settings seen")
	if _, err := s.DeployWithRules(ctx, service.DeployRequest{Service: "fill", Count: 7, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB / 8}}}); service.CodeOf(err) != service.Exhausted {
		t.Errorf("7 instances with a 50%% buffer (room for 6) = %v", err)
	}
	if _, err := s.DeployWithRules(ctx, service.DeployRequest{Service: "fill", Count: 7, UseBuffer: true, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB / 8}}}); err != nil {
		t.Errorf("7 instances using the buffer = %v", err)
	}
	verify(t, s)

	// Health: h3 loses its SSD → db's instance there violates its
	// constraint; h4 in maintenance is not a warning while its grace runs.
	if _, err := s.SetHost(ctx, service.SetHostRequest{Name: "h3", SetProperties: map[string]placement.Value{"HasSSD": placement.BoolVal(false)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		v, _ := s.Store().Host("h3")
		return v.Host.Properties["HasSSD"] == placement.BoolVal(false)
	}, "h3 changed")
	ws := s.Health(time.Now())
	found := false
	for _, w := range ws {
		if w.Kind == "PlacementConstraint" && w.Subject == "db" && strings.Contains(w.Detail, "h3") {
			found = true
		}
		if w.Subject == "h4" {
			t.Errorf("h4 within its grace reported: %+v", w)
		}
	}
	if !found {
		t.Errorf("health = %+v, want db's constraint violation on h3", ws)
	}
	// Ending maintenance makes h4 schedulable again.
	if _, err := s.SetMaintenance(ctx, "h4", -1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { v, _ := s.Store().Host("h4"); return state.HostState(v.Host, v.Live) == "up" }, "h4 back")
	if _, err := s.SetMaintenance(ctx, "h4", 0); service.CodeOf(err) != service.Invalid {
		t.Errorf("grace 0 = %v", err)
	}
}

func errorsAs(err error, target **service.Error) bool {
	e, ok := err.(*service.Error)
	if ok {
		*target = e
	}
	return ok
}

// TestHealthDomainPacking: a service placed before its hosts got fault
// domains ends up packed into one; health says so.
func TestHealthDomainPacking(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	for _, name := range []string{"h1", "h2", "h3"} {
		register(t, s, name, topologytest.Laptop().Topology())
	}
	if _, err := s.DeployWithRules(ctx, service.DeployRequest{Service: "web", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Rules: model.Rules{Policy: "nodes_order", HostsOrder: []string{"h1", "h2"}}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}}}); err != nil {
		t.Fatal(err)
	}
	if ws := s.Health(time.Now()); len(ws) != 0 {
		t.Fatalf("health before domains: %+v", ws)
	}
	for name, fd := range map[string]string{"h1": "fd:/dc1", "h2": "fd:/dc1", "h3": "fd:/dc2"} {
		if _, err := s.SetHost(ctx, service.SetHostRequest{Name: name, FaultDomain: strp(fd)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { v, _ := s.Store().Host("h3"); return v.Host.FaultDomain == "fd:/dc2" }, "domains set")
	ws := s.Health(time.Now())
	if len(ws) != 1 || ws[0].Kind != "FaultDomain" || ws[0].Subject != "web" || !strings.Contains(ws[0].Detail, "dc1 2, dc2 0") {
		t.Errorf("health = %+v, want web packed into dc1", ws)
	}
}

// TestHealthDomainPackingEveryLevel: health compares sibling domains at
// every level of the fault domain tree, a host without a fault domain
// being a top-level domain of its own, as placement's max-difference rule
// does; a spread that is even at the top can be packed one level down.
func TestHealthDomainPackingEveryLevel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		domains map[string]string // host → fault domain ("" none)
		placed  map[string]int    // host → instances of web
		full    string            // a host filled by another service first
		want    []string          // the FaultDomain warnings' details
		each    bool              // web is deployed with the each strategy
	}{
		{"packed one level down", map[string]string{"h1": "fd:/dc1/r1", "h2": "fd:/dc1/r2", "h3": "fd:/dc2", "h4": "fd:/dc2"},
			map[string]int{"h1": 2, "h3": 1, "h4": 1},
			"", []string{"instances packed into too few fault domains under dc1: dc1/r1 2, dc1/r2 0"}, false},
		{"a host without a fault domain is a domain of its own", map[string]string{"h1": "fd:/dc1", "h2": "fd:/dc1", "h3": ""},
			map[string]int{"h1": 1, "h2": 1},
			"", []string{"instances packed into too few fault domains: dc1 2, h3 (no fault domain) 0"}, false},
		{"even at every level", map[string]string{"h1": "fd:/dc1/r1", "h2": "fd:/dc1/r2", "h3": "fd:/dc2", "h4": "fd:/dc2"},
			map[string]int{"h1": 1, "h2": 1, "h3": 2},
			"", nil, false},
		{"the light domain has no room", map[string]string{"h1": "fd:/dc1", "h2": "fd:/dc2"},
			map[string]int{"h1": 2}, "h2", nil, false},
		{"each: the counts follow the hosts", map[string]string{"h1": "fd:/dc1", "h2": "fd:/dc1", "h3": "fd:/dc2"},
			map[string]int{"h1": 1, "h2": 1}, "", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newMemService(t)
			ctx := context.Background()
			for _, name := range slices.Sorted(maps.Keys(tc.domains)) {
				register(t, s, name, topologytest.Laptop().Topology())
			}
			// Each host's instances are deployed with every other host
			// disabled, so that the service's record has no constraint:
			// every host may take more of it.
			enable := func(only string) {
				t.Helper()
				for name := range tc.domains {
					if _, err := s.SetEnabled(ctx, name, only == "" || name == only); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.full != "" {
				enable(tc.full)
				waitFor(t, func() bool { v, _ := s.Store().Host(tc.full); return !v.Host.Disabled }, "only "+tc.full+" enabled")
				filler := service.DeployRequest{Service: "filler", Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Size: model.Size{Pieces: 100, Bind: true, Memory: 64 << 20}}}
				rooms, err := s.Capacity(filler)
				if err != nil {
					t.Fatal(err)
				}
				filler.Count = rooms[tc.full].Count
				if _, err := s.DeployWithRules(ctx, filler); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range slices.Sorted(maps.Keys(tc.placed)) {
				enable(name)
				waitFor(t, func() bool { v, _ := s.Store().Host(name); return !v.Host.Disabled }, "only "+name+" enabled")
				r := service.DeployRequest{Service: "web", Count: tc.placed[name], Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}}}
				if tc.each {
					r.Strategy = string(alloc.Each)
				}
				if _, err := s.DeployWithRules(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			enable("")
			for _, name := range slices.Sorted(maps.Keys(tc.domains)) {
				if fd := tc.domains[name]; fd != "" {
					if _, err := s.SetHost(ctx, service.SetHostRequest{Name: name, FaultDomain: strp(fd)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			waitFor(t, func() bool {
				for name, fd := range tc.domains {
					if v, _ := s.Store().Host(name); v.Host.FaultDomain != fd || v.Host.Disabled {
						return false
					}
				}
				return true
			}, "domains set")
			var got []string
			for _, w := range s.Health(time.Now()) {
				if w.Kind == "FaultDomain" && w.Subject == "web" {
					got = append(got, w.Detail)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("fault domain warnings = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMemoryFirstPoolExplained: a memory-first quota must fit the host's
// shared pool (the CPUs no instance holds pieces of); a refusal names both
// sizes, and the host's usage carries the quotas committed against the
// pool, which may exceed it (CPU oversold by memory-first work).
func TestMemoryFirstPoolExplained(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	register(t, s, "m1", topologytest.Laptop().Topology()) // 8 CPUs
	spec := model.Spec{Image: "busybox"}
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "bound", Count: 1, Deploy: model.Deploy{Spec: spec, Size: model.Size{Pieces: 300, Bind: true, Memory: GiB}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		pieces int
		count  int
		want   string // "" = placed
	}{
		{"quota larger than the pool", 600, 1, "m1 takes 0 (quota 6 CPUs > shared pool 5 CPUs)"},
		{"fractional quota larger than the pool", 550, 1, "quota 5.5 CPUs > shared pool 5 CPUs"},
		{"quota the size of the pool", 500, 1, ""},
		{"quotas oversell the pool together", 200, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Deploy(ctx, service.DeployRequest{Service: "mf", Count: tc.count, Deploy: model.Deploy{Spec: spec, Size: model.Size{Pieces: tc.pieces, Memory: GiB}}})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
	v, _ := s.Host("m1")
	if pool, quota := state.SharedPool(v.Host, v.Alloc).Len()*100, v.Alloc.MemoryFirstQuota; pool != 500 || quota != 900 {
		t.Errorf("pool %d, quota committed %d pieces; want 500 and 900 (5 + 2 × 2 CPUs)", pool, quota)
	}
	verify(t, s)
}
