package state

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Leadership is an election this planner won (Lead): it leads while its
// key under ElectionKey exists with the create revision it got. A
// planner that stopped answering etcd for longer than its session's TTL
// (its process paused, its etcd member frozen) has lost it although its
// background loops may still run: each commit of leader work is fenced by
// it, so such a planner cannot commit them.
type Leadership struct {
	key  string // this planner's key under ElectionKey
	rev  int64  // the key's create revision
	lose func() // ends the lead context
}

type leadershipKey struct{}

// LeaderOf is the leadership ctx carries (Lead's context and every context
// made from it), nil outside the leader's loops.
func LeaderOf(ctx context.Context) *Leadership {
	l, _ := ctx.Value(leadershipKey{}).(*Leadership)
	return l
}

// Key is the planner's election key (logs).
func (l *Leadership) Key() string { return l.key }

// GuardLeader fences the change by l (nil: nothing): it commits only while
// l is held, and a commit that finds it lost returns ErrNotLeader and ends
// l's lead context. Commit fences a change by its context's leadership
// itself; a change planned for a leader context but committed under
// another (the service's commit pipeline merges the changes of several
// requests) is fenced by GuardLeader(LeaderOf(jobContext)).
func (c *Change) GuardLeader(l *Leadership) {
	if l == nil {
		return
	}
	for _, have := range c.leaders {
		if have == l {
			return
		}
	}
	c.leaders = append(c.leaders, l)
}

func (l *Leadership) cmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)
}

// ErrNotLeader means a change fenced by a leadership (GuardLeader, or
// Commit's context) was not committed because this planner no longer
// leads: nothing of it was written. It is also an ErrConflict, so a
// caller that re-plans on conflicts re-plans the unfenced requests merged
// with it; the fenced ones see their lead context ended.
var ErrNotLeader error = notLeader{}

type notLeader struct{}

func (notLeader) Error() string {
	return "state: this planner no longer leads (its election key is gone): leader work not committed"
}

func (notLeader) Is(target error) bool { return target == ErrConflict }
