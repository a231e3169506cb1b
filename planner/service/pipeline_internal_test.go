package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// held is a Service whose pipeline is held: requests queue, in the order
// they were made, until release runs them as one batch.
type held struct {
	*Service
	t *testing.T
}

func holdPipeline(t *testing.T) held {
	t.Helper()
	return holdPipelineOn(t, topologytest.Laptop(), []string{"h"}) // 8 CPUs, 16 GiB
}

// holdPipelineOn is holdPipeline with the hosts names of shape: on an
// in-memory store, or on etcd configured by options when there are any.
func holdPipelineOn(t *testing.T, shape topologytest.Shape, names []string, options ...func(*state.EmbedConfig)) held {
	t.Helper()
	cfg := state.Config{ShareBase: 100, MaxFragmentCores: -1}
	var st Store = memStore(t, cfg)
	if len(options) > 0 {
		st = statetest.Start(t, 1, options...).Open(t, cfg, model.Protocol)
	}
	s := New(st, nil)
	for _, name := range names {
		if _, err := s.RegisterHost(context.Background(), RegisterHostRequest{Name: name, Topology: shape.Topology(),
			Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	s.pipe.mu.Lock()
	s.pipe.running = true
	s.pipe.mu.Unlock()
	return held{s, t}
}

// queue starts call and returns once its request is in the queue.
func (h held) queue(call func() error) chan error {
	h.t.Helper()
	h.pipe.mu.Lock()
	n := len(h.pipe.queue)
	h.pipe.mu.Unlock()
	out := make(chan error, 1)
	go func() { out <- call() }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		h.pipe.mu.Lock()
		m := len(h.pipe.queue)
		h.pipe.mu.Unlock()
		if m > n {
			return out
		}
		if time.Now().After(deadline) {
			h.t.Fatal("the request never queued")
		}
	}
}

func (h held) release() { go h.pipe.run() }

// TestPipelineGroupSeesEarlierRequests: five requests queued together are
// planned in order, each against what the ones before it planned, and
// commit in one transaction: a resize and a remove of instances that exist
// only in the group, and a deploy that finds the CPUs the group took gone.
func TestPipelineGroupSeesEarlierRequests(t *testing.T) {
	h := holdPipeline(t)
	ctx := context.Background()
	spec := model.Spec{Image: "busybox"}
	var a, b []model.Instance
	var resized []model.Instance
	var removed []string
	deployA := h.queue(func() (err error) {
		a, err = h.Deploy(ctx, DeployRequest{Service: "a", Count: 2, Deploy: model.Deploy{Spec: spec, Size: model.Size{Pieces: 100, Bind: true, Memory: 1 << 30}}})
		return err
	})
	resizeA := h.queue(func() (err error) {
		resized, err = h.Resize(ctx, ResizeRequest{Target: "a", CPUDelta: 50})
		return err
	})
	deployB := h.queue(func() (err error) {
		b, err = h.Deploy(ctx, DeployRequest{Service: "b", Count: 1, Deploy: model.Deploy{Spec: spec, Size: model.Size{Pieces: 400, Bind: true, Memory: 1 << 30}}})
		return err
	})
	deployC := h.queue(func() error {
		_, err := h.Deploy(ctx, DeployRequest{Service: "c", Count: 1, Deploy: model.Deploy{Spec: spec, Size: model.Size{Pieces: 200, Bind: true, Memory: 1 << 30}}})
		return err
	})
	removeA := h.queue(func() (err error) {
		removed, err = h.Remove(ctx, "a")
		return err
	})
	h.release()
	for name, ch := range map[string]chan error{"deploy a": deployA, "resize a": resizeA, "deploy b": deployB, "remove a": removeA} {
		if err := <-ch; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := <-deployC; CodeOf(err) != Exhausted {
		t.Errorf("deploy c (2 CPUs after a took 3 and b 4 of 8) = %v, want %s", err, Exhausted)
	}
	if len(a) != 2 || len(resized) != 2 || len(b) != 1 || len(removed) != 2 {
		t.Fatalf("a %d, resized %d, b %d, removed %d instances; want 2, 2, 1, 2", len(a), len(resized), len(b), len(removed))
	}
	for _, in := range resized {
		if in.Pieces() != 150 || in.Generation != 2 {
			t.Errorf("resized %s: %d pieces, generation %d; want 150 and 2", in.ID, in.Pieces(), in.Generation)
		}
	}
	st := h.st
	if got := st.Instances(""); len(got) != 1 || got[0].Instance.ID != b[0].ID {
		t.Fatalf("stored instances %v, want only b's %s", got, b[0].ID)
	}
	if _, ok := st.Service("a"); ok {
		t.Error("service a is still stored after its remove")
	}
	v, _ := st.Host("h")
	if got := st.Instances("")[0].Rev; got != v.AllocRev {
		t.Errorf("b's instance at revision %d, the host's usage at %d: not one transaction", got, v.AllocRev)
	}
	if bad := Verify(st, 100); len(bad) > 0 {
		t.Errorf("store invariants violated:\n%s", strings.Join(bad, "\n"))
	}
}

// TestPipelineConflictReplans: a write from outside the pipeline between a
// group's plan and its commit fails the commit; the group is planned again
// from the fresh cache and commits, each request answered once.
func TestPipelineConflictReplans(t *testing.T) {
	h := holdPipeline(t)
	ctx := context.Background()
	attempts := 0
	outside := h.queue(func() error {
		return h.pipe.do(ctx, func(rd reader) (*state.Change, error) {
			attempts++
			v, _ := rd.Host("h")
			if attempts == 1 { // another planner changes the host now
				var c state.Change
				c.GuardHost("h", v.HostRev)
				c.PutHost(v.Host)
				if _, err := h.st.Commit(ctx, &c); err != nil {
					return nil, err
				}
			}
			c := new(state.Change)
			c.GuardView(v)
			c.PutService(state.Service{Name: "marker"})
			return c, nil
		})
	})
	deploy := h.queue(func() error {
		_, err := h.Deploy(ctx, DeployRequest{Service: "d", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "busybox"}, Size: model.Size{Pieces: 100, Bind: true, Memory: 1 << 30}}})
		return err
	})
	h.release()
	if err := <-outside; err != nil {
		t.Fatal(err)
	}
	if err := <-deploy; err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Errorf("planned %d times, want 2 (the first commit conflicts)", attempts)
	}
	if _, ok := h.st.Service("marker"); !ok {
		t.Error("the replanned group did not commit")
	}
	if n := len(h.st.ServiceInstances("d")); n != 1 {
		t.Errorf("%d instances of d, want 1", n)
	}
}

// changingReader is a reader under which the host h changes (another
// planner writes its registration) the first time a plan reads it after
// reading the placement views.
type changingReader struct {
	reader
	t       *testing.T
	st      Store
	changed bool
	reads   int
}

func (r *changingReader) Host(name string) (state.HostView, bool) {
	r.reads++
	if !r.changed {
		r.changed = true
		v, _ := r.st.Host(name)
		var c state.Change
		c.GuardHost(name, v.HostRev)
		h := v.Host
		h.Disabled = true
		c.PutHost(h)
		if _, err := r.st.Commit(context.Background(), &c); err != nil {
			r.t.Fatal(err)
		}
	}
	return r.reader.Host(name)
}

// TestDeployNeverCommitsAStalePlan: a host that changes between the
// placement views a deploy planned on and the documents it guards is not
// committed as planned: the plan runs again on the new documents (here
// the host was disabled, so the deploy finds no host).
func TestDeployNeverCommitsAStalePlan(t *testing.T) {
	h := holdPipeline(t)
	var cr *changingReader
	h.pipe.wrap = func(r reader) reader {
		cr = &changingReader{reader: r, t: t, st: h.st}
		return cr
	}
	deploy := h.queue(func() error {
		_, err := h.Deploy(context.Background(), DeployRequest{Service: "d", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "busybox"}, Size: model.Size{Pieces: 100, Bind: true, Memory: 1 << 30}}})
		return err
	})
	h.release()
	if err := <-deploy; CodeOf(err) != Exhausted {
		t.Fatalf("deploy onto a host disabled while it was planned = %v, want %s (planned again, no host left)", err, Exhausted)
	}
	if cr.reads != 1 {
		t.Errorf("the host was read %d times; want 1 (the second plan finds no host)", cr.reads)
	}
	if n := len(h.st.Instances("")); n != 0 {
		t.Errorf("%d instances stored on a disabled host", n)
	}
}

// TestPipelineUnderEtcdTxnLimit: against an etcd that keeps its default
// of 128 writes per transaction (an external cluster may), a group etcd
// refuses is split and planned again: 80 queued deploys all commit; one
// request larger than the limit is refused naming the fix.
func TestPipelineUnderEtcdTxnLimit(t *testing.T) {
	h := holdPipelineOn(t, topologytest.BenchHost(), []string{"a", "b"}, func(c *state.EmbedConfig) { c.MaxTxnOps = 128 })
	s, st := h.Service, h.st
	var outs []chan error
	for i := range 80 {
		outs = append(outs, h.queue(func() error {
			_, err := h.Deploy(context.Background(), DeployRequest{Service: fmt.Sprintf("s%d", i), Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "busybox"}, Size: model.Size{Pieces: 10, Bind: true, Memory: 8 << 20}}})
			return err
		}))
	}
	h.release()
	for i, ch := range outs {
		if err := <-ch; err != nil {
			t.Fatalf("deploy %d: %v", i, err)
		}
	}
	if n := len(st.Instances("")); n != 80 {
		t.Fatalf("%d instances stored, want 80", n)
	}
	if s.pipe.limit >= 128 {
		t.Errorf("group limit %d: never lowered below etcd's 128", s.pipe.limit)
	}
	_, err := s.Deploy(context.Background(), DeployRequest{Service: "big", Count: 200, Deploy: model.Deploy{Spec: model.Spec{Image: "busybox"}, Size: model.Size{Pieces: 10, Bind: true, Memory: 8 << 20}}})
	if CodeOf(err) != Invalid || !strings.Contains(err.Error(), "--max-txn-ops") {
		t.Errorf("a 200-instance deploy against a 128-write etcd = %v, want invalid_argument naming --max-txn-ops", err)
	}
	if bad := Verify(st, 100); len(bad) > 0 {
		t.Errorf("store invariants violated:\n%s", strings.Join(bad, "\n"))
	}
}
