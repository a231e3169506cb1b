package nodeagent

import (
	"context"
	"maps"
	"slices"

	"github.com/pinfold/pinfold/docker"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// statusOf is what the host observes of in: its container (the running one
// when a replace left two), the resources it has, and what the agent
// remembers of earlier passes. It is pure.
func statusOf(h Host, in model.Instance, cs []Observed, scheme Scheme, shared cpuset.CPUs, r record) model.Status {
	st := model.Status{State: "pending", Error: r.err}
	if r.refused == in.Generation || r.failed == in.Generation {
		st.Refused = in.Generation
	}
	if st.Error == "" && r.failed == in.Generation {
		st.Error = r.failMsg
	}
	if len(st.Error) > model.MaxStatusErrorLen {
		st.Error = st.Error[:model.MaxStatusErrorLen-len("…")] + "…"
	}
	var c *Observed
	for i := range cs {
		if c == nil || cs[i].Running && !c.Running {
			c = &cs[i]
		}
	}
	if c == nil {
		return st
	}
	st.ContainerID, st.PID = c.ID, c.PID
	switch {
	case c.OOMKilled:
		st.State = "oom_killed"
	case c.Running && !c.Paused:
		st.State = "running"
	case c.Paused:
		st.State = "paused"
	default:
		st.State = "exited"
	}
	// The container runs the desired generation when nothing differs that a
	// pass would change: the resources, and the image, command and network
	// (a container from the same image with another command is the old one
	// of a replace in flight), and its generation is not older than the
	// instance's last replace (SpecGeneration: a restart).
	st.Generation = c.Generation
	if want := Map(h, in, scheme, shared); sameResources(c.Applied, want.Resources) && !specChanged(*c, &in) && c.Generation >= in.SpecGeneration {
		st.Generation = in.Generation
	}
	st.MemoryCurrent = c.MemoryCurrent
	if c.Running {
		st.CPUGot = r.cpuGot
	}
	st.Applied = &model.Applied{CPUs: c.Applied.CPUs.String(), Mems: c.Applied.Mems.String(), CPUQuota: c.Applied.CPUQuota * docker.Period / c.Applied.PeriodUsec(),
		CPUWeight: c.CPUWeight, MemoryBytes: c.Applied.MemoryBytes}
	return st
}

// worthSending reports whether st differs from what was last sent: in
// anything but memory and CPU use, or in those by enough (memoryMoved,
// cpuMoved).
func worthSending(sent *model.Status, st model.Status, shareBase int) bool {
	if sent == nil {
		return true
	}
	a, b := *sent, st
	a.MemoryCurrent, b.MemoryCurrent = 0, 0
	a.CPUGot, b.CPUGot = 0, 0
	a.Applied, b.Applied = nil, nil
	sameApplied := sent.Applied == nil && st.Applied == nil || sent.Applied != nil && st.Applied != nil && *sent.Applied == *st.Applied
	return a != b || !sameApplied || memoryMoved(sent.MemoryCurrent, st.MemoryCurrent) || cpuMoved(sent.CPUGot, st.CPUGot, shareBase)
}

// report tells the planner what changed for each desired instance, and
// forgets the records of instances no longer desired.
func (a *Agent) report(ctx context.Context, h Host, desired []model.Instance, obs []Observed, shared cpuset.CPUs) {
	byInst := map[string][]Observed{}
	for _, o := range obs {
		byInst[o.Instance] = append(byInst[o.Instance], o)
	}
	keep := map[string]bool{}
	for _, in := range desired {
		keep[in.ID] = true
		a.mu.Lock()
		r := a.recordLocked(in.ID)
		st := statusOf(h, in, byInst[in.ID], a.cfg.Scheme, shared, *r)
		send := worthSending(r.sent, st, h.ShareBase)
		a.mu.Unlock()
		if !send {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, a.cfg.ReportTimeout)
		_, err := a.planner.ReportStatus(rctx, connect.NewRequest(pinfoldv1.NewReportStatusRequest(a.cfg.Host, in.ID, st)))
		cancel()
		if err != nil {
			a.log.Warn("status report failed", "instance", in.ID, "err", err)
			continue
		}
		a.mu.Lock()
		r.sent = &st
		a.mu.Unlock()
	}
	a.mu.Lock()
	for _, id := range slices.Collect(maps.Keys(a.records)) {
		if !keep[id] {
			delete(a.records, id)
		}
	}
	a.mu.Unlock()
}
