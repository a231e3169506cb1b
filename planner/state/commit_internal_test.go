package state

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/test/testenv"
)

func freeURL(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
}

// startStore starts a single-member embedded etcd (fsync off, history
// kept for history; 0: the default) and opens a store on it.
func startStore(t *testing.T, history time.Duration) (*Store, string) {
	t.Helper()
	cu, pu := freeURL(t), freeURL(t)
	e, err := StartEmbedded(EmbedConfig{Name: "t", Dir: filepath.Join(t.TempDir(), "etcd"), ClientURL: cu, PeerURL: pu, LogLevel: "fatal", UnsafeNoFsync: true, History: history})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	s, err := Open(context.Background(), Dial{Endpoints: []string{cu}}, Config{ShareBase: 100, MaxFragmentCores: -1}, model.Protocol, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, cu
}

// TestCommitOutcomeReadBack: when etcd's answer to a commit is lost, the
// commit marker tells whether it applied: the marker holding the commit's
// value means applied (its revision is returned), any other value means
// not applied (nothing was written; the change is tried again).
func TestCommitOutcomeReadBack(t *testing.T) {
	s, _ := startStore(t, 0)
	ctx := context.Background()
	var c Change
	c.PutService(Service{Name: "web"})
	prev := s.markerRev
	rev, err := s.Commit(ctx, &c)
	if err != nil {
		t.Fatal(err)
	}
	lost := errors.New("etcdserver: request timed out")
	applied := fmt.Sprintf("%s/%d", s.id, s.commits.Load())
	if got, ok, err := s.resolve(ctx, c.Len(), prev, applied, lost); err != nil || !ok || got != rev {
		t.Errorf("the commit that applied read back as rev %d, applied %v, %v; want %d", got, ok, err, rev)
	}
	if _, ok, err := s.resolve(ctx, c.Len(), prev, applied+"-not", lost); err != nil || ok {
		t.Errorf("a commit that did not apply read back as applied %v, %v; want not applied", ok, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := s.resolve(cancelled, c.Len(), prev, applied, lost); err == nil || errors.Is(err, ErrConflict) || !errors.Is(err, lost) {
		t.Errorf("no answer from etcd read back as %v, want the lost answer's error, outcome unknown", err)
	}
}

// TestLostCommitNeverAppliesLate: a commit whose answer was lost and
// which resolve found not applied must never apply afterwards: a frozen
// etcd member holds the request and hands it on when it resumes, after
// the caller went on (and its retry may have chosen other hosts, which
// the lost commit's guards do not cover).
func TestLostCommitNeverAppliesLate(t *testing.T) {
	s, _ := startStore(t, 0)
	ctx := context.Background()
	var c Change
	c.PutService(Service{Name: "late"})
	prev, token := s.markerRev, fmt.Sprintf("%s/%d", s.id, s.commits.Add(1))
	// The attempt a frozen member holds: sent, unanswered, not yet applied.
	held := func() (*clientv3.TxnResponse, error) {
		return s.commitTxn(ctx, time.Minute, &c, nil, prev, token)
	}
	if _, ok, err := s.resolve(ctx, c.Len(), prev, token, errors.New("context deadline exceeded")); err != nil || ok {
		t.Fatalf("resolve: applied %v, %v; want not applied", ok, err)
	}
	resp, err := held() // the member resumes and applies what it held
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Service("late"); ok || resp.Succeeded {
		t.Errorf("the held commit applied after it was resolved as not applied (succeeded %v)", resp.Succeeded)
	}
	// The store goes on committing.
	var next Change
	next.PutService(Service{Name: "next"})
	if _, err := s.Commit(ctx, &next); err != nil {
		t.Fatal(err)
	}
}

// TestFencedCommit: leader work committed after its planner lost the
// election (its key gone while it still runs: a planner paused past its
// session's TTL) is refused, nothing of it written, and ends the lead
// context; work of the same planner that is not leader work commits.
func TestFencedCommit(t *testing.T) {
	s, _ := startStore(t, 0)
	ctx := context.Background()
	leading := make(chan context.Context)
	done := make(chan error, 1)
	go func() {
		done <- s.Lead(ctx, "a", 5*time.Second, func(lctx context.Context) error {
			leading <- lctx
			<-lctx.Done()
			return nil
		})
	}()
	lctx := <-leading
	l := LeaderOf(lctx)
	if l == nil {
		t.Fatal("the lead context carries no leadership")
	}
	put := func(name string) *Change {
		var c Change
		c.PutService(Service{Name: name})
		return &c
	}
	if _, err := s.Commit(lctx, put("while-leading")); err != nil {
		t.Fatalf("leader work while leading: %v", err)
	}
	if _, err := s.cli.Delete(ctx, l.Key()); err != nil { // the session's lease expired
		t.Fatal(err)
	}
	fenced := put("fenced")
	fenced.GuardLeader(l) // as the pipeline fences a job of the lead context
	merged := put("user")
	merged.Merge(fenced)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		c    *Change
		want error
	}{
		{"by the lead context", lctx, put("by-context"), ErrNotLeader},
		{"by GuardLeader", ctx, fenced, ErrNotLeader},
		{"merged with a fenced change", ctx, merged, ErrNotLeader},
		{"not leader work", ctx, put("other"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Commit(tc.ctx, tc.c)
			if !errors.Is(err, tc.want) || (tc.want != nil && !errors.Is(err, ErrConflict)) {
				t.Fatalf("commit: %v, want %v", err, tc.want)
			}
		})
	}
	for name, want := range map[string]bool{"while-leading": true, "by-context": false, "fenced": false, "user": false, "other": true} {
		if _, ok := s.Service(name); ok != want {
			t.Errorf("service %s written: %v, want %v", name, ok, want)
		}
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("Lead returned no error after losing the election")
		}
	case <-time.After(10 * time.Second):
		t.Error("the lead context goes on after a commit found the leadership lost")
	}
}

// TestLoadInPages: a store larger than one read opens whole, at one
// revision (a 10,000-host store is over 100 MB: one response cannot carry
// it, and the restarted planner once failed to start on it).
func TestLoadInPages(t *testing.T) {
	s, cu := startStore(t, 0)
	ctx := context.Background()
	const n = 2*loadPage + 57
	var c Change
	for i := range n {
		c.PutService(Service{Name: fmt.Sprintf("svc%04d", i)})
	}
	if _, err := s.Commit(ctx, &c); err != nil {
		t.Fatal(err)
	}
	again, err := Open(ctx, Dial{Endpoints: []string{cu}}, s.Config(), model.Protocol, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	for i := range n {
		if _, ok := again.Service(fmt.Sprintf("svc%04d", i)); !ok {
			t.Fatalf("service svc%04d missing after a load in pages of %d", i, loadPage)
		}
	}
	if again.Rev() < s.Rev() {
		t.Errorf("loaded at revision %d, before the commit at %d", again.Rev(), s.Rev())
	}
}

// TestEmbeddedHistoryCompacted: the embedded etcd compacts its history
// (without it, every write ever made stays until the database quota
// refuses all writes); the store follows across the compaction.
func TestEmbeddedHistoryCompacted(t *testing.T) {
	s, _ := startStore(t, time.Second)
	ctx := context.Background()
	commit := func(name string) int64 {
		var c Change
		c.PutService(Service{Name: name})
		rev, err := s.Commit(ctx, &c)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	first := commit("a")
	var compacted bool
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !compacted; time.Sleep(200 * time.Millisecond) {
		commit("b")
		_, err := s.cli.Get(ctx, ServiceKey("a"), clientv3.WithRev(first))
		compacted = errors.Is(err, rpctypes.ErrCompacted)
	}
	if !compacted {
		t.Fatal("revision of the first write still readable after 20 s: the history is never compacted")
	}
	commit("c")
	if _, ok := s.Service("c"); !ok {
		t.Error("the store stopped following after the compaction")
	}
}
