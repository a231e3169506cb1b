package service

import (
	"context"
	"time"
)

// HealEvery is how often the leader looks for dead hosts, moves to settle
// and draining hosts.
const HealEvery = time.Second

// RunBackground campaigns for leadership among the planners sharing the
// store (session TTL ttl) and, while leading, heals every HealEvery (dead
// hosts' instances placed again, moves settled, drains carried on: see
// tick.go) and audits the store every interval: Verify's violations are
// logged as errors. onLead, if set, is
// called with true when this planner becomes leader and false when it stops
// leading. It returns when ctx ends.
//
// The loops' context carries the leadership (state.LeaderOf): a commit made
// with it is fenced (state.Commit), so a planner that lost the election
// while it could not reach etcd (paused past its session's TTL) commits no
// leader work, and the first fenced commit that finds the leadership gone
// ends the loops. Changes the commit pipeline merges with other requests'
// are fenced per job (Change.GuardLeader(state.LeaderOf(job's context))).
func (s *Service) RunBackground(ctx context.Context, id string, ttl, interval time.Duration, onLead func(bool)) error {
	for ctx.Err() == nil {
		err := s.st.Lead(ctx, id, ttl, func(ctx context.Context) error {
			s.log.Info("leading background loops", "planner", id)
			s.leading.Store(true)
			defer s.leading.Store(false)
			if onLead != nil {
				onLead(true)
				defer onLead(false)
			}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			heal := time.NewTicker(HealEvery)
			defer heal.Stop()
			t := newTracker()
			for {
				select {
				case <-ctx.Done():
					return nil
				case now := <-heal.C:
					_ = s.safely("leader tick", func() { s.tick(ctx, t, now) })
				case now := <-tick.C:
					_ = s.safely("leader audit", func() {
						hit("audit")
						s.pruneEvents(ctx, now)
						s.pruneRequests(ctx, now)
						for _, v := range Verify(s.st, s.params.ShareBase) {
							s.log.Error("store invariant violated", "violation", v)
						}
					})
				}
			}
		})
		if err != nil && ctx.Err() == nil {
			s.log.Warn("leader election interrupted; campaigning again", "err", err)
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
		}
	}
	return ctx.Err()
}

// Leading reports whether this planner runs the background loops now.
func (s *Service) Leading() bool { return s.leading.Load() }
