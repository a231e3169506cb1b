package service_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

func withID(id string) (context.Context, *service.RequestCall) {
	call := &service.RequestCall{ID: id}
	return service.WithRequest(context.Background(), call), call
}

func ids(ins []model.Instance) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.ID
	}
	slices.Sort(out)
	return out
}

// TestRequestIDsMakeWritesIdempotent: a repeat of a request ID returns the
// first outcome and changes nothing — on the same planner, after a restart
// (a new service and store over the same etcd), and when two planners get
// the same ID at once; an ID reused by another method is refused. Without
// the records every repeat below makes new instances (or resizes again).
func TestRequestIDsMakeWritesIdempotent(t *testing.T) {
	c := statetest.Start(t, 1)
	a := newService(t, c)
	for _, h := range []string{"h1", "h2"} {
		register(t, a, h, topologytest.Laptop().Topology())
	}
	web := service.DeployRequest{Service: "web", Count: 3, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 50, Bind: true, Memory: GiB}}}

	ctx, call := withID("deploy-1")
	first, err := a.DeployWithRules(ctx, web)
	if err != nil || call.Repeated {
		t.Fatalf("first deploy: %v, repeated %v", err, call.Repeated)
	}
	rev := a.Store().Rev()
	ctx, call = withID("deploy-1")
	again, err := a.DeployWithRules(ctx, web)
	if err != nil || !call.Repeated || !slices.Equal(ids(again.Instances), ids(first.Instances)) {
		t.Fatalf("repeat: %v, repeated %v, instances %v; want the first's %v", err, call.Repeated, ids(again.Instances), ids(first.Instances))
	}
	if a.Store().Rev() != rev || len(a.Store().ServiceInstances("web")) != 3 {
		t.Fatalf("the repeat changed the store: revision %d → %d, %d instances", rev, a.Store().Rev(), len(a.Store().ServiceInstances("web")))
	}

	// The planner restarts: the record is in etcd, not in its memory.
	b := newService(t, c)
	ctx, call = withID("deploy-1")
	if again, err := b.DeployWithRules(ctx, web); err != nil || !call.Repeated || !slices.Equal(ids(again.Instances), ids(first.Instances)) {
		t.Fatalf("repeat after a restart: %v, repeated %v, %v", err, call.Repeated, ids(again.Instances))
	}

	// The same ID with other content, or another method, is refused; a
	// new ID acts.
	ctx, _ = withID("deploy-1")
	other := web
	other.Count = 4
	if _, err := b.DeployWithRules(ctx, other); service.CodeOf(err) != service.Invalid {
		t.Errorf("a deploy of 4 reusing the ID of a deploy of 3 = %v, want invalid", err)
	}
	ctx, _ = withID("deploy-1")
	if _, err := b.Resize(ctx, service.ResizeRequest{Target: "web", CPUDelta: 10}); service.CodeOf(err) != service.Invalid {
		t.Errorf("resize reusing a deploy's ID = %v, want invalid", err)
	}
	ctx, _ = withID("resize-1")
	if _, err := b.Resize(ctx, service.ResizeRequest{Target: "web", CPUDelta: 10}); err != nil {
		t.Fatal(err)
	}
	ctx, call = withID("resize-1")
	res, err := a.Resize(ctx, service.ResizeRequest{Target: "web", CPUDelta: 10})
	if err != nil || !call.Repeated {
		t.Fatalf("repeated resize: %v, repeated %v", err, call.Repeated)
	}
	for _, in := range res {
		if in.Pieces() != 60 {
			t.Errorf("after a resize by +0.1 and its repeat %s has %d pieces, want 60", in.ID, in.Pieces())
		}
	}

	// Two planners given the same new ID at once: one deploy.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, p := range []planner{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ctx, _ := withID("deploy-2")
				_, errs[i] = p.DeployWithRules(ctx, service.DeployRequest{Service: "db", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 50, Bind: true, Memory: GiB}}})
				if service.CodeOf(errs[i]) != service.Conflicted {
					return
				}
			}
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("concurrent deploys with one ID: %v, %v", errs[0], errs[1])
	}
	if err := a.Store().Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(a.Store().ServiceInstances("db")); n != 2 {
		t.Errorf("two planners deploying 2 with one request ID made %d instances, want 2", n)
	}

	// Remove, repeated: the first outcome, not "not found".
	ctx, _ = withID("rm-1")
	gone, err := a.Remove(ctx, "db")
	if err != nil || len(gone) != 2 {
		t.Fatalf("remove: %v, %v", gone, err)
	}
	ctx, call = withID("rm-1")
	if again, err := a.Remove(ctx, "db"); err != nil || !call.Repeated || !slices.Equal(again, gone) {
		t.Errorf("repeated remove = %v, %v (repeated %v); want %v", again, err, call.Repeated, gone)
	}

	// Scale is idempotent by its count and records nothing under the ID:
	// a deploy that reuses it acts (before, scale's deploy recorded the ID
	// as a Deploy, and the later deploy was answered with scale's instances).
	ctx, _ = withID("scale-1")
	if r, err := a.Scale(ctx, "web", 4); err != nil || len(r.Added) != 1 {
		t.Fatalf("scale web to 4: %+v, %v", r, err)
	}
	ctx, call = withID("scale-1")
	if res, err := a.DeployWithRules(ctx, service.DeployRequest{Service: "cache", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 50, Bind: true, Memory: GiB}}}); err != nil ||
		call.Repeated || len(res.Instances) != 1 || res.Instances[0].Service != "cache" {
		t.Errorf("a deploy reusing a scale's ID = %+v, %v (repeated %v); want a new cache instance", res.Instances, err, call.Repeated)
	}

	// Records are forgotten after their time.
	if n, err := a.Store().PruneRequests(context.Background(), time.Now().Add(state.RequestTTL)); err != nil || n != 5 {
		t.Errorf("pruning every record: %d, %v; want 5 (deploy-1, resize-1, deploy-2, rm-1, scale-1)", n, err)
	}
	verify(t, a)
}

func TestValidateRequestID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"a", true}, {"cli-4f2a:01.x_y", true}, {"", false}, {string(make([]byte, 65)), false}, {"with space", false}, {"é", false}, {"a/b", false},
	} {
		if err := service.ValidateRequestID(tc.id); (err == nil) != tc.ok {
			t.Errorf("ValidateRequestID(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
}
