package state

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestPruneRequestsBoundsTheCount: past maxRequests the oldest records go,
// however young; without the bound none would before RequestTTL.
func TestPruneRequestsBoundsTheCount(t *testing.T) {
	s, _ := startStore(t, 0)
	ctx := context.Background()
	defer func(n int) { maxRequests = n }(maxRequests)
	maxRequests = 3
	t0 := time.Now().UTC()
	for i := range 5 {
		var c Change
		c.PutRequest(fmt.Sprintf("r%d", i), Request{Method: "Deploy", Time: t0.Add(time.Duration(i) * time.Second)})
		if _, err := s.Commit(ctx, &c); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.PruneRequests(ctx, t0.Add(-RequestTTL)); err != nil || n != 2 {
		t.Fatalf("pruned %d, %v; want the 2 oldest", n, err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, false, true, true, true} {
		if _, ok := s.Request(fmt.Sprintf("r%d", i)); ok != want {
			t.Errorf("record r%d kept %v, want %v", i, ok, want)
		}
	}
}
