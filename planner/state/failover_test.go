package state_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
)

// freezeFor is how long TestCommitsThroughFrozenMember freezes the etcd
// leader: PINFOLD_ETCD_FREEZE (a Go duration; docs/TESTING.md has the
// 20 s figures), default 6 s.
func freezeFor(t *testing.T) time.Duration {
	v := os.Getenv("PINFOLD_ETCD_FREEZE")
	if v == "" {
		return 6 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 2*time.Second {
		t.Fatalf("PINFOLD_ETCD_FREEZE = %q: want a duration of 2s or more", v)
	}
	return d
}

// op is one acknowledged or refused commit of the load.
type op struct {
	store      string
	start, end time.Time
	id         string // the instance it wrote
	err        error
}

// load commits, from st until stop, one instance at a time on one of the
// hosts, with the host's usage counting its instances (MemoryUsed = their
// number), guarded by the host's revisions and re-planned on conflicts,
// as the service does.
func load(ctx context.Context, name string, st *state.Store, hosts []string, stop <-chan struct{}, record func(op)) {
	r := rand.New(rand.NewPCG(uint64(len(name)), uint64(name[0])))
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-time.After(2 * time.Millisecond): // a steady load, not a busy loop (CI has 2 cores)
		}
		o := op{store: name, start: time.Now(), id: fmt.Sprintf("%s-%d", name, n)}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second) // the pipeline's commit timeout
		for {
			v, ok := st.Host(hosts[r.IntN(len(hosts))])
			if !ok {
				o.err = fmt.Errorf("host %s missing", v.Host.Name)
				break
			}
			a := v.Alloc.Clone()
			a.MemoryUsed++
			var c state.Change
			c.GuardView(v)
			c.PutAlloc(v.Host.Name, a)
			c.PutInstance(model.Instance{ID: o.id, Service: "load", Host: v.Host.Name})
			_, o.err = st.Commit(cctx, &c)
			if !errors.Is(o.err, state.ErrConflict) {
				break
			}
		}
		cancel()
		o.end = time.Now()
		record(o)
		if o.err != nil && ctx.Err() != nil {
			return
		}
	}
}

// TestCommitsThroughFrozenMember: two stores commit through a real
// 3-member etcd cluster while its leader stops answering (a proxy stalls
// its client and peer traffic, as SIGSTOP would), then while the next
// leader is killed, then while one store is closed. Commits keep
// succeeding through the frozen member (each store commits while it is
// still frozen, after the probes had time to find it), every commit
// acknowledged is in the store once and every one refused is not, and
// every host's usage equals the sum of its instances.
//
// PINFOLD_ETCD_UNGUARDED=1 runs it with the client pinfold had before
// (no probes, keepalives or attempt timeouts): the control, which fails.
func TestCommitsThroughFrozenMember(t *testing.T) {
	if os.Getenv("PINFOLD_ETCD_UNGUARDED") != "" {
		state.SetUnguarded(true)
		defer state.SetUnguarded(false)
	}
	freeze := freezeFor(t)
	c := statetest.StartProxied(t, 3, func(e *state.EmbedConfig) { e.UnsafeNoFsync = true })
	cfg := state.Config{ShareBase: 100, MaxFragmentCores: -1}
	a, b := c.Open(t, cfg, model.Protocol), c.Open(t, cfg, model.Protocol)
	ctx := context.Background()
	hosts := []string{"h0", "h1", "h2", "h3"}
	var reg state.Change
	for _, h := range hosts {
		reg.PutHost(state.Host{Name: h})
	}
	if _, err := a.Commit(ctx, &reg); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var ops []op
	record := func(o op) { mu.Lock(); ops = append(ops, o); mu.Unlock() }
	stopA, stopB := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	ctxB, cancelB := context.WithCancel(ctx)
	defer cancelB()
	wg.Go(func() { load(ctx, "a", a, hosts, stopA, record) })
	wg.Go(func() { load(ctxB, "b", b, hosts, stopB, record) })

	time.Sleep(time.Second)
	leader := c.Leader()
	if leader < 0 {
		t.Fatal("no etcd leader before the freeze")
	}
	frozeAt := time.Now()
	c.Freeze(leader)
	t.Logf("member %d (the leader) frozen for %s", leader, freeze)
	time.Sleep(freeze)
	thawedAt := time.Now()
	c.Thaw(leader)
	time.Sleep(time.Second)
	killed := -1
	for deadline := time.Now().Add(10 * time.Second); killed < 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		killed = c.Leader()
	}
	if killed < 0 {
		t.Fatal("no etcd leader after the thaw")
	}
	c.Stop(killed)
	t.Logf("member %d (the leader) killed", killed)
	time.Sleep(2 * time.Second)
	close(stopB)
	cancelB()
	b.Close() // a planner gone mid-load: the other goes on
	closedAt := time.Now()
	time.Sleep(time.Second)
	close(stopA)
	wg.Wait()

	// Progress through the freeze: each store acknowledged a commit it
	// started after the probes had time to find the frozen member.
	settled := frozeAt.Add(min(freeze/2, 3*time.Second))
	var during []time.Duration
	for _, name := range []string{"a", "b"} {
		var n int
		for _, o := range ops {
			if o.store == name && o.err == nil && !o.start.Before(settled) && o.end.Before(thawedAt) {
				n++
			}
		}
		if n == 0 {
			t.Errorf("store %s committed nothing it started %s into the %s freeze before the thaw", name, settled.Sub(frozeAt), freeze)
		}
	}
	for _, o := range ops {
		if o.err == nil && o.end.After(frozeAt) && o.start.Before(thawedAt) {
			during = append(during, o.end.Sub(o.start))
		}
	}
	// The longest time a store went without acknowledging a commit while
	// the member was frozen.
	var gap time.Duration
	for _, name := range []string{"a", "b"} {
		last := frozeAt
		for _, o := range ops { // in the order they ended, per store
			if o.store != name || o.err != nil || o.end.Before(frozeAt) {
				continue
			}
			end := o.end
			if end.After(thawedAt) {
				end = thawedAt
			}
			if end.Sub(last) > gap {
				gap = end.Sub(last)
			}
			last = end
		}
		gap = max(gap, thawedAt.Sub(last))
	}
	var afterClose int
	for _, o := range ops {
		if o.store == "a" && o.err == nil && o.start.After(closedAt) {
			afterClose++
		}
	}
	if afterClose == 0 {
		t.Error("store a committed nothing after store b closed")
	}

	// Every acknowledged commit is there once; no refused one is; every
	// host's usage counts its instances.
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var acked, refused, unknown int
	for _, o := range ops {
		_, there := a.Instance(o.id)
		switch {
		case o.err == nil:
			acked++
			if !there {
				t.Errorf("store %s: commit of %s acknowledged but not in the store", o.store, o.id)
			}
		case errors.Is(o.err, state.ErrConflict):
			refused++
			if there {
				t.Errorf("store %s: commit of %s refused (%v) but in the store", o.store, o.id, o.err)
			}
		default:
			unknown++ // the closed store's last commit, or outcome unknown
			if o.store == "a" {
				t.Errorf("store a: commit of %s: %v", o.id, o.err)
			}
		}
	}
	for _, h := range hosts {
		v, _ := a.Host(h)
		if n := int64(len(a.Instances(h))); v.Alloc.MemoryUsed != n {
			t.Errorf("host %s: usage counts %d instances, it has %d", h, v.Alloc.MemoryUsed, n)
		}
	}
	slices.Sort(during)
	pct := func(p float64) time.Duration {
		if len(during) == 0 {
			return 0
		}
		return during[min(len(during)-1, int(p*float64(len(during))))]
	}
	t.Logf("commits: %d acknowledged, %d refused, %d other; acknowledged during the %s freeze: %d, latency p50 %s p99 %s max %s; longest time a store acknowledged nothing: %s",
		acked, refused, unknown, freeze, len(during), pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), pct(1).Round(time.Millisecond), gap.Round(time.Millisecond))
}
