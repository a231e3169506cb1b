package state

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinfold/pinfold/planner/model"
)

func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprintf("http://%s", l.Addr())
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
// not applied (ErrConflict: re-plan, nothing was written).
func TestCommitOutcomeReadBack(t *testing.T) {
	s, _ := startStore(t, 0)
	ctx := context.Background()
	var c Change
	c.PutService(Service{Name: "web"})
	rev, err := s.Commit(ctx, &c)
	if err != nil {
		t.Fatal(err)
	}
	lost := errors.New("etcdserver: request timed out")
	applied := fmt.Sprintf("%s/%d", s.id, s.commits.Load())
	if got, err := s.resolve(ctx, &c, applied, lost); err != nil || got != rev {
		t.Errorf("the commit that applied read back as rev %d, %v; want %d", got, err, rev)
	}
	if _, err := s.resolve(ctx, &c, applied+"-not", lost); !errors.Is(err, ErrConflict) {
		t.Errorf("a commit that did not apply read back as %v, want ErrConflict", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.resolve(cancelled, &c, applied, lost); err == nil || errors.Is(err, ErrConflict) || !errors.Is(err, lost) {
		t.Errorf("no answer from etcd read back as %v, want the lost answer's error, outcome unknown", err)
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
