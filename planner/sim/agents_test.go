package sim

import (
	"fmt"
	"maps"
	"slices"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// --- agents ---

// addHost registers a new host: by its agent (it heartbeats at once) or
// by hand (its agent joins a few steps later).
func (w *world) addHost(byAgent bool) (string, error) {
	w.nextHost++
	name := fmt.Sprintf("h%02d", w.nextHost)
	sh := topologytest.Shape{Name: name, Packages: 1 + w.rng.IntN(2), DiesPerPackage: 1, CoresPerDie: 2 + w.rng.IntN(3),
		ThreadsPerCore: 1 + w.rng.IntN(2), MemoryPerNode: int64(4+4*w.rng.IntN(3)) * GiB, RemoteDistance: 21}
	r := service.RegisterHostRequest{Name: name, Topology: sh.Topology(), Settings: state.CapacitySettings{MemoryShare: 1}}
	if byAgent {
		r.Agent, r.AgentVersion, r.Protocol = true, "sim", model.Protocol
	}
	if _, err := w.svc.RegisterHost(w.ctx, r); err != nil {
		return name, err
	}
	a := &agent{host: name, alive: true, joinAt: w.step + 1 + w.rng.IntN(10)}
	w.agents[name] = a
	if byAgent {
		w.beat(a)
	}
	return name, nil
}

func (w *world) beat(a *agent) {
	if err := w.svc.Heartbeat(w.ctx, a.host, "sim", model.Protocol, heartbeatTTL, nil); err != nil {
		w.fail("heartbeat of %s: %v", a.host, err)
	}
	a.joined = true
	a.beatAt = w.step + 20 + w.rng.IntN(40)
}

// kill makes host's agent vanish: its live key goes, as when its lease
// expires.
func (w *world) kill(a *agent) {
	if err := w.st.ExpireLive(w.ctx, a.host); err != nil {
		w.fail("%v", err)
	}
	a.alive, a.diedAt = false, w.step
	// Some come back before the down grace, some long after.
	a.returnAt = w.step + 1 + w.rng.IntN(120)
}

// agentsStep: dead agents return when due, live ones heartbeat and report
// their instances' state a few steps after a new generation appears.
func (w *world) agentsStep() {
	for _, name := range slices.Sorted(maps.Keys(w.agents)) {
		a := w.agents[name]
		if !a.alive {
			if w.step < a.returnAt {
				continue
			}
			a.alive = true
			w.note("agent of " + name + " returns")
			w.beat(a)
		}
		if !a.joined {
			if w.step < a.joinAt {
				continue
			}
			w.note("agent of " + name + " joins")
		}
		if !a.joined || w.step >= a.beatAt {
			w.beat(a)
		}
		for _, iv := range w.st.Instances(name) {
			w.reportOn(name, iv)
		}
	}
}

// reportOn reports an instance's state once its generation has waited its
// seeded delay: running, failed (its health gate), exited, or, for a
// resize, refused by the host.
func (w *world) reportOn(host string, iv state.InstanceView) {
	in := iv.Instance
	if st := iv.Status; st != nil && (st.Generation >= in.Generation || st.Refused == in.Generation) {
		delete(w.reports, in.ID)
		return
	}
	p, ok := w.reports[in.ID]
	if !ok || p.gen != in.Generation {
		w.reports[in.ID] = report{gen: in.Generation, at: w.step + w.rng.IntN(reportDelay)}
		return
	}
	if w.step < p.at {
		return
	}
	st := model.Status{State: "running", Generation: in.Generation}
	switch r := w.rng.IntN(100); {
	case r < 8:
		st.State, st.Error = "error", "health check failed"
	case r < 11:
		st.State, st.Error = "exited", "exit status 1"
	case r < 16 && in.Previous != nil && in.Previous.Generation == in.Generation:
		st = model.Status{State: "running", Generation: in.Generation - 1, Refused: in.Generation, Error: "memory shrink gave up under pressure"}
	}
	if err := w.svc.ReportStatus(w.ctx, host, in.ID, st); err != nil {
		w.fail("status report of %s on %s: %v", in.ID, host, err)
	}
	delete(w.reports, in.ID)
}
