package service

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// countingStatus counts the status writes that reach the store.
type countingStatus struct {
	*state.Memory
	puts atomic.Int64
}

func (c *countingStatus) PutStatus(ctx context.Context, host, id string, st model.Status) error {
	c.puts.Add(1)
	return c.Memory.PutStatus(ctx, host, id, st)
}

// TestStatusWritesBounded: an agent's reports of an unchanged status write
// nothing, and a host's status writes stay within StatusBytesPerSecond
// after StatusBytesBurst, refused past it naming the bound (attack review:
// one agent repeating an 8 KiB report 195 times a second grew etcd's db by
// 2.2 MB/s for as long as it ran). Controls: a status that changes each
// time is written each time while within the bound; a second later the
// bucket has refilled.
func TestStatusWritesBounded(t *testing.T) {
	mem := memStore(t, state.Config{ShareBase: 100, MaxFragmentCores: -1})
	st := &countingStatus{Memory: mem}
	s := New(st, nil)
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	ctx := context.Background()
	if _, err := s.RegisterHost(ctx, RegisterHostRequest{Name: "h1", Topology: topologytest.Laptop().Topology(),
		Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
		t.Fatal(err)
	}
	dep, err := s.Deploy(ctx, DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 50, Bind: true, Memory: 64 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	in := dep[0]
	big := model.Status{State: "running", Generation: in.Generation, Error: strings.Repeat("E", 4000),
		Applied: &model.Applied{CPUs: strings.Repeat("0,", 1999) + "0"}}

	// The same report 100 times: written once (the cache may lag the
	// first write by a report or two).
	st.puts.Store(0)
	for range 100 {
		if err := s.ReportStatus(ctx, "h1", in.ID, big); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, mem, in.ID)
	}
	if n := st.puts.Load(); n < 1 || n > 3 {
		t.Errorf("100 identical reports wrote %d statuses, want 1 (a few while the cache catches up)", n)
	}

	// A report that changes each time (its PID): written until the
	// host's bucket is spent, then refused naming the bound.
	st.puts.Store(0)
	var refused error
	sent := 0
	for i := range 1000 {
		big.PID = i + 1
		sent++
		if err := s.ReportStatus(ctx, "h1", in.ID, big); err != nil {
			refused = err
			break
		}
	}
	if refused == nil || !strings.Contains(refused.Error(), "bytes of instance status a second") {
		t.Fatalf("%d changing 8 KiB reports at one instant: refusal %v, want one naming the bound", sent, refused)
	}
	if wrote := st.puts.Load(); wrote*8000 > StatusBytesBurst+8000 || wrote < StatusBytesBurst/8200 {
		t.Errorf("%d statuses of about 8 KB written at one instant, want about StatusBytesBurst / 8 KB = %d", wrote, StatusBytesBurst/8100)
	}
	// Control: a second later, 64 KiB more may be written.
	now = now.Add(time.Second)
	big.PID = 5000
	if err := s.ReportStatus(ctx, "h1", in.ID, big); err != nil {
		t.Errorf("a second later: %v, want it written", err)
	}
}

// waitStatus waits until the store's cache has id's status.
func waitStatus(t *testing.T, st *state.Memory, id string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		if v, ok := st.Instance(id); ok && v.Status != nil {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("instance %s: no status in the cache after 5 s", id)
}
