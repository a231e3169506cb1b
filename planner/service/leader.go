package service

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/pinfold/pinfold/planner/state"
)

// ElectionKey is where planners campaign for running background loops.
const ElectionKey = state.Prefix + "leader"

// RunBackground campaigns for leadership among the planners sharing the
// store (etcd concurrency election, session TTL ttl) and, while leading,
// audits the store every interval: Verify's violations are logged as errors.
// onLead, if set, is called with true when this planner becomes leader and
// false when it stops leading. It returns when ctx ends.
func (s *Service) RunBackground(ctx context.Context, id string, ttl, interval time.Duration, onLead func(bool)) error {
	for ctx.Err() == nil {
		if err := s.leadOnce(ctx, id, ttl, interval, onLead); err != nil && ctx.Err() == nil {
			s.log.Warn("leader election interrupted; campaigning again", "err", err)
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
		}
	}
	return ctx.Err()
}

func (s *Service) leadOnce(ctx context.Context, id string, ttl, interval time.Duration, onLead func(bool)) error {
	sess, err := concurrency.NewSession(s.st.Client(), concurrency.WithTTL(int(ttl/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("election session: %w", err)
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, ElectionKey)
	if err := el.Campaign(ctx, id); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	s.log.Info("leading background loops", "planner", id)
	if onLead != nil {
		onLead(true)
		defer onLead(false)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = el.Resign(rctx)
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sess.Done():
			return fmt.Errorf("lost the election session")
		case <-tick.C:
			for _, v := range Verify(s.st, s.params.ShareBase) {
				s.log.Error("store invariant violated", "violation", v)
			}
		}
	}
}
