package state

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ElectionKey is where planners campaign for running background loops.
const ElectionKey = Prefix + "leader"

// Heartbeat keeps host's live key on an etcd lease of ttl: the key vanishes
// (the host is down) when the agent stops calling for ttl. value is what the
// key holds; nil keeps the value it has while the key is live.
func (s *Store) Heartbeat(ctx context.Context, host string, value []byte, ttl time.Duration) error {
	s.leaseMu.Lock()
	lease, ok := s.leases[host]
	s.leaseMu.Unlock()
	live := s.isLive(host)
	if ok {
		if _, err := s.cli.KeepAliveOnce(ctx, lease); err == nil && live {
			if value == nil {
				return nil
			}
			if _, err := s.cli.Put(ctx, LiveKey(host), string(value), clientv3.WithLease(lease)); err != nil {
				return fmt.Errorf("state: heartbeat of host %s: put %s: %w", host, LiveKey(host), err)
			}
			return nil
		}
	}
	g, err := s.cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return fmt.Errorf("state: heartbeat of host %s: grant a %s lease: %w", host, ttl, err)
	}
	if value == nil {
		value = []byte("{}")
	}
	if _, err := s.cli.Put(ctx, LiveKey(host), string(value), clientv3.WithLease(g.ID)); err != nil {
		return fmt.Errorf("state: heartbeat of host %s: put %s: %w", host, LiveKey(host), err)
	}
	s.leaseMu.Lock()
	s.leases[host] = g.ID
	s.leaseMu.Unlock()
	return nil
}

// PutStatus records what a host's agent observed for one instance. It is
// not guarded: only that host's agent writes it, and the last report wins.
func (s *Store) PutStatus(ctx context.Context, host, id string, st model.Status) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("state: status of %s: %w", id, err)
	}
	if _, err := s.cli.Put(ctx, StatusKey(host, id), string(b)); err != nil {
		return fmt.Errorf("state: put %s: %w", StatusKey(host, id), err)
	}
	return nil
}

// Lead campaigns among the planners sharing the store (etcd election,
// session TTL ttl) and, once elected, runs lead with a context that ends
// when ctx ends or the leadership is lost (the session ended, or a fenced
// commit found the election key gone); then it resigns. The context
// carries the Leadership (LeaderOf): every commit made with it, or a
// context made from it, is fenced by it. It returns lead's error, or why
// the campaign ended.
func (s *Store) Lead(ctx context.Context, id string, ttl time.Duration, lead func(context.Context) error) error {
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(int(ttl/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("state: election session: %w", err)
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, ElectionKey)
	if err := el.Campaign(ctx, id); err != nil {
		return fmt.Errorf("state: campaign for %s: %w", ElectionKey, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = el.Resign(rctx)
	}()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lctx = context.WithValue(lctx, leadershipKey{}, &Leadership{key: el.Key(), rev: el.Rev(), lose: cancel})
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-lctx.Done():
		}
	}()
	err = lead(lctx)
	if ctx.Err() == nil && lctx.Err() != nil {
		return fmt.Errorf("state: lost the election session")
	}
	return err
}

// Sync waits until the cache has seen every write committed before it was
// called (a linearizable read of the current revision).
func (s *Store) Sync(ctx context.Context) error {
	resp, err := s.cli.Get(ctx, ConfigKey)
	if err != nil {
		return fmt.Errorf("state: read %s: %w", ConfigKey, err)
	}
	return s.WaitRev(ctx, resp.Header.Revision)
}

// ExpireLive deletes host's heartbeat, as its lease running out does: the
// host is down from the next revision (the simulation's agents die so).
func (s *Store) ExpireLive(ctx context.Context, host string) error {
	if _, err := s.cli.Delete(ctx, LiveKey(host)); err != nil {
		return fmt.Errorf("state: expire the heartbeat of host %s: %w", host, err)
	}
	return nil
}
