package service

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
)

// maxAttempts bounds re-planning after conflicts.
const maxAttempts = 50

// Service is the planner's behaviour over a store.
type Service struct {
	st     Store
	params alloc.Params
	log    *slog.Logger
	pipe   *pipeline // deploys, resizes, replaces, removes and roll-backs commit through it
	// leading: this planner is the elected one running the background loops.
	leading atomic.Bool
	ev      *events
	// panics counts the panics recovered (recover.go).
	panics atomic.Int64
	// checkIndex plans in full as well wherever the room index answered,
	// and fails the deploy when the two differ (the simulation and the
	// service's tests run with it).
	checkIndex bool
	// indexed counts the deploys the room index placed.
	indexed atomic.Int64
	// indexedMoves counts the moves and heals it placed (placeLike).
	indexedMoves atomic.Int64
	// versions: when each host's record was last rewritten for an agent's
	// new version or protocol (AgentRecordEvery).
	versions hostTimes
	// statusBytes bounds each host's status writes (ReportStatus).
	statusBytes hostBuckets
	// live bounds each host's live-key writes for metrics (Heartbeat).
	live liveWrites
	// now is the clock (nil: time.Now); tests set it.
	now func() time.Time
}

func (s *Service) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// IndexAnswers is how many deploys the room index placed since New.
func (s *Service) IndexAnswers() int64 { return s.indexed.Load() }

// IndexMoves is how many moves and heals (a drain's, a rebalance's, a
// heal's new instances) the room index placed since New.
func (s *Service) IndexMoves() int64 { return s.indexedMoves.Load() }

// CheckIndex makes every deploy, move and heal the room index answers also
// be planned in full, and fail with an internal error naming both
// placements when they differ. For tests and the simulation: it costs the full plan again.
func (s *Service) CheckIndex() { s.checkIndex = true }

// New returns a Service over st.
func New(st Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{st: st, params: st.Config().Params(), log: log, pipe: &pipeline{st: st}, ev: newEvents()}
	s.pipe.panicked = s.Panicked
	s.pipe.stamp = s.stamp
	return s
}

// Params are the allocation parameters.
func (s *Service) Params() alloc.Params { return s.params }

// retry runs attempt until it does not return state.ErrConflict.
func retry[T any](ctx context.Context, attempt func() (T, error)) (T, error) {
	var zero T
	for i := 0; i < maxAttempts; i++ {
		v, err := attempt()
		if !errors.Is(err, state.ErrConflict) {
			return v, err
		}
		if ctx.Err() != nil {
			return zero, ctx.Err()
		}
	}
	return zero, errf(Conflicted, "gave up after %d conflicting attempts; the hosts are changing too fast", maxAttempts)
}

// Hosts returns every host's view, sorted by name.
func (s *Service) Hosts() []state.HostView { return s.st.Hosts() }

// Host returns one host's view.
func (s *Service) Host(name string) (state.HostView, bool) { return s.st.Host(name) }

// Instances returns the instances on host ("": every host) of service
// ("": every service), sorted by host then ID.
func (s *Service) Instances(host, service string) []state.InstanceView {
	out := s.st.Instances(host)
	if service != "" {
		out = slices.DeleteFunc(out, func(v state.InstanceView) bool { return v.Instance.Service != service })
	}
	return out
}

// PlacementSettings are the cluster's placement settings.
func (s *Service) PlacementSettings() placement.Settings { return s.st.PlacementSettings() }

// WatchInstances sends host's view and desired instances, then again after
// each change to them or to the host's registration (its capacity), until
// ctx ends or send fails.
func (s *Service) WatchInstances(ctx context.Context, host string, send func(rev int64, h state.HostView, ins []state.InstanceView) error) error {
	if _, ok := s.st.Host(host); !ok {
		return errf(NotFound, "host %q is not registered", host)
	}
	return s.st.WatchHost(ctx, host, func(rev int64) error {
		h, ok := s.st.Host(host)
		if !ok {
			return errf(NotFound, "host %q was removed", host)
		}
		return send(rev, h, s.st.Instances(host))
	})
}

// InstanceState is what an instance is doing: its host's last report, or
// pending before one, and updating while the host runs an older generation.
func InstanceState(in model.Instance, st *model.Status) string {
	switch {
	case st == nil:
		return "pending"
	case st.Generation < in.Generation && st.State == "running":
		return "updating"
	}
	return st.State
}

// Rev is the revision the planner's cache has reached.
func (s *Service) Rev() int64 { return s.st.Rev() }

// WaitRev waits until the cache has reached rev, or ctx ends.
func (s *Service) WaitRev(ctx context.Context, rev int64) error { return s.st.WaitRev(ctx, rev) }

// Healthy reports whether the planner's cache still follows etcd.
func (s *Service) Healthy() bool { return s.st.Healthy() }

// Priority is service's priority (production when it has no record).
func (s *Service) Priority(service string) model.Priority {
	d, _ := s.st.Service(service)
	return d.Value.Priority
}

// NeverPreempted is whether service's instances are never preempted
// (false when it has no record).
func (s *Service) NeverPreempted(service string) bool {
	d, _ := s.st.Service(service)
	return d.Value.NeverPreempted
}

// ServiceRecord returns a deployed service's record and its count of
// instances (an instance and the one replacing it in a move count once);
// false when no service of that name is deployed.
func (s *Service) ServiceRecord(name string) (state.Service, int, bool) {
	d, ok := s.st.Service(name)
	if !ok {
		return state.Service{}, 0, false
	}
	return d.Value, countInstances(s.st.ServiceInstances(name)), true
}
