package service

import (
	"sync"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
)

// queued is how many requests wait in the pipeline (not yet planned).
func (p *pipeline) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// whilePlanning runs during the first deploy planned from now on (on the
// pipeline's goroutine, so nothing else is planned meanwhile): it starts
// each of reqs, one after another, and waits until each has read what it
// reads outside the pipeline and queued its change. The pipeline then
// plans them in that order, after the deploy. The returned function waits
// for them to finish.
func whilePlanning(t *testing.T, f healFixture, reqs ...func()) (wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	var once sync.Once
	fp := func(step string) {
		if step != "deploy" {
			return
		}
		once.Do(func() {
			for i, r := range reqs {
				wg.Add(1)
				go func() { defer wg.Done(); r() }()
				// Not eventually: t.Fatal may not stop the pipeline's goroutine.
				end := time.Now().Add(10 * time.Second)
				for f.pipe.queued() < i+1 && time.Now().Before(end) {
					time.Sleep(time.Millisecond)
				}
				if f.pipe.queued() < i+1 {
					t.Errorf("request %d did not queue", i)
					return
				}
			}
		})
	}
	failpoint.Store(&fp)
	t.Cleanup(func() { failpoint.Store(nil) })
	return wg.Wait
}

// planAndWait deploys other, whose planning starts the requests
// whilePlanning holds, waits for them (wait) and fails t for every error
// they sent on errs.
func planAndWait(t *testing.T, f healFixture, other DeployRequest, wait func(), errs chan error) {
	t.Helper()
	if _, err := f.DeployWithRules(f.ctx, other); err != nil {
		t.Fatal(err)
	}
	wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent request: %v", err)
		}
	}
}

// TestScaleReadsWhatItChanges: a scale counts the service's instances and
// reads its size before its deploy is planned; requests committed in
// between must not be undone. Two scales to 5 from 1 leave 5 instances,
// not 9; a scale and a resize queued together leave every instance and
// the service's record at the resized size, not new instances (and the
// record) at the size before the resize.
func TestScaleReadsWhatItChanges(t *testing.T) {
	small := DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Bind: true, Memory: gib / 16}}}
	other := DeployRequest{Service: "other", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Bind: true, Memory: gib / 16}}}
	cases := []struct {
		name       string
		concurrent func(f healFixture, errs chan<- error) []func()
		want       int // instances of web
		wantPieces int // of each web instance and of its record
	}{
		{
			name: "two scales",
			concurrent: func(f healFixture, errs chan<- error) []func() {
				scale := func() { _, err := f.Scale(f.ctx, "web", 5); errs <- err }
				return []func(){scale, scale}
			},
			want: 5, wantPieces: 10,
		},
		{
			name: "resize then scale",
			concurrent: func(f healFixture, errs chan<- error) []func() {
				return []func(){
					func() { _, err := f.Resize(f.ctx, ResizeRequest{Target: "web", CPUDelta: 10}); errs <- err },
					func() { _, err := f.Scale(f.ctx, "web", 5); errs <- err },
				}
			},
			want: 5, wantPieces: 20,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newHealFixture(t, "a", "b", "c")
			if _, err := f.DeployWithRules(f.ctx, small); err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 4)
			reqs := tc.concurrent(f, errs)
			planAndWait(t, f, other, whilePlanning(t, f, reqs...), errs)
			ins := f.st.ServiceInstances("web")
			if got := countInstances(ins); got != tc.want {
				t.Errorf("web has %d instances, want %d", got, tc.want)
			}
			for _, v := range ins {
				if p := v.Instance.Pieces(); p != tc.wantPieces {
					t.Errorf("instance %s has %d pieces, want %d", v.Instance.ID, p, tc.wantPieces)
				}
			}
			if d, _ := f.st.Service("web"); d.Value.Pieces != tc.wantPieces {
				t.Errorf("service record: %d pieces, want %d", d.Value.Pieces, tc.wantPieces)
			}
			f.verify()
		})
	}
}

// TestScaleRetryReadsTheCommittedChange: a scale refused because a change
// planned before it in the same commit group altered the service reads
// again only once that group committed, so its second deploy succeeds.
// Reading the cache at once found it without the change (the group was
// still committing) and spent an attempt on the same stale read; under 30
// concurrent scales and 10 resizes some scales gave up after 8.
func TestScaleRetryReadsTheCommittedChange(t *testing.T) {
	f := newHealFixture(t, "a", "b", "c")
	small := DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Bind: true, Memory: gib / 16}}}
	if _, err := f.DeployWithRules(f.ctx, small); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	deploys, commits := 0, 0
	errs := make(chan error, 2)
	wait := whilePlanning(t, f,
		func() { _, err := f.Resize(f.ctx, ResizeRequest{Target: "web", CPUDelta: 10}); errs <- err },
		func() { _, err := f.Scale(f.ctx, "web", 3); errs <- err },
	)
	inner := *failpoint.Load()
	fp := func(step string) {
		inner(step)
		mu.Lock()
		switch step {
		case "deploy":
			deploys++
		case "commit":
			commits++
		}
		n := commits
		mu.Unlock()
		if step == "commit" && n == 2 {
			// The group of the resize, whose plan refused the scale's
			// deploy: held until the scale has queued its next request.
			end := time.Now().Add(10 * time.Second)
			for f.pipe.queued() < 1 && time.Now().Before(end) {
				time.Sleep(time.Millisecond)
			}
		}
	}
	failpoint.Store(&fp)
	other := DeployRequest{Service: "other", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Bind: true, Memory: gib / 16}}}
	planAndWait(t, f, other, wait, errs)
	if got := countInstances(f.st.ServiceInstances("web")); got != 3 {
		t.Errorf("web has %d instances, want 3", got)
	}
	// other's deploy, the scale's refused one and the one that succeeds.
	mu.Lock()
	defer mu.Unlock()
	if deploys != 3 {
		t.Errorf("%d deploys planned, want 3 (the scale's second read was stale)", deploys)
	}
	f.verify()
}
