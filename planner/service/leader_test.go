package service_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/state/statetest"
)

// TestOneLeader: of two planners, exactly one runs the background loops;
// when it stops, the other takes over.
func TestOneLeader(t *testing.T) {
	c := statetest.Start(t, 1)
	a, b := newService(t, c), newService(t, c)
	var mu sync.Mutex
	leading := map[string]bool{}
	track := func(id string) func(bool) {
		return func(on bool) { mu.Lock(); leading[id] = on; mu.Unlock() }
	}
	count := func() (n int, who string) {
		mu.Lock()
		defer mu.Unlock()
		for id, on := range leading {
			if on {
				n++
				who = id
			}
		}
		return n, who
	}
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	doneA := make(chan struct{})
	go func() { a.RunBackground(ctxA, "a", 2*time.Second, 100*time.Millisecond, track("a")); close(doneA) }()
	go b.RunBackground(ctxB, "b", 2*time.Second, 100*time.Millisecond, track("b"))
	waitFor(t, func() bool { n, _ := count(); return n == 1 }, "one leader")
	time.Sleep(500 * time.Millisecond)
	if n, _ := count(); n != 1 {
		t.Fatalf("%d leaders", n)
	}
	_, first := count()
	if first == "a" {
		stopA()
		<-doneA
	} else {
		stopB()
	}
	waitFor(t, func() bool { n, who := count(); return n == 1 && who != first }, "the other planner to take over")
	stopA()
}
