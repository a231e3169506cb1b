package service

import (
	"context"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
)

// Store is what the service needs of the planner's state: the cache's
// reads, the guarded commit, and the few writes that are not a plan (an
// agent's heartbeat and statuses, events, pruning, the leader election).
// state.Store implements it over etcd; state.Memory in this process alone,
// for tests (state's contract tests hold the two to the same answers).
//
// The contract, as state.Store documents it method by method:
//   - Reads are of the cache at one revision, never of etcd; the views they
//     return share maps with the cache and must not be changed.
//   - Commit applies a change all or nothing, only if every document it
//     guards is still at the revision it was read at (ErrConflict
//     otherwise, after the cache has seen the newer state); a change fenced
//     by a leadership that is lost is not applied (ErrNotLeader). When
//     Commit returns a revision, the cache has seen it: a read after it
//     sees the change.
//   - WaitRev, WatchHost and Sync return once the cache has caught up (or
//     their context ends, or the store stops following: Healthy false).
type Store interface {
	Config() state.Config
	Healthy() bool
	Rev() int64
	WaitRev(ctx context.Context, rev int64) error
	Sync(ctx context.Context) error

	Host(name string) (state.HostView, bool)
	Hosts() []state.HostView
	HostsAfter(after string, limit int) ([]state.HostView, bool)
	Instance(id string) (state.InstanceView, bool)
	Instances(host string) []state.InstanceView
	InstancesAfter(host, service string, after state.InstanceRef, limit int) ([]state.InstanceView, bool)
	ServiceInstances(service string) []state.InstanceView
	Moving() []state.InstanceView
	Service(name string) (state.Doc[state.Service], bool)
	Request(id string) (state.Request, bool)
	PlacementSettings() placement.Settings
	SchedulablePlacement() *state.Placed
	ReadFleet(fn func(state.Fleet))
	Pending() *state.Pending
	WatchHost(ctx context.Context, host string, send func(rev int64) error) error

	Commit(ctx context.Context, c *state.Change) (int64, error)
	Heartbeat(ctx context.Context, host string, value []byte, ttl time.Duration) error
	PutStatus(ctx context.Context, host, id string, st model.Status) error
	Lead(ctx context.Context, id string, ttl time.Duration, lead func(context.Context) error) error
	NewEventID(t time.Time, seq int64) string
	PutEvents(ctx context.Context, evs []state.Event) error
	Events(ctx context.Context, after string, limit, scan int, keep func(state.Event) bool) ([]state.Event, error)
	LatestEvents(ctx context.Context, limit, scan int, keep func(state.Event) bool) ([]state.Event, error)
	PruneEvents(ctx context.Context, keep int, before time.Time) (int, error)
	PruneRequests(ctx context.Context, before time.Time) (int, error)
}
