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

// TestScaleReadsWhatItChanges: a scale counts the service's instances and
// reads its size before its deploy is planned; requests committed in
// between must not be undone. Two scales to 5 from 1 leave 5 instances,
// not 9; a scale and a resize queued together leave every instance and
// the service's record at the resized size, not new instances (and the
// record) at the size before the resize.
func TestScaleReadsWhatItChanges(t *testing.T) {
	small := DeployRequest{Service: "web", Spec: model.Spec{Image: "i"}, Count: 1, Pieces: 10, Bind: true, Memory: gib / 16}
	other := DeployRequest{Service: "other", Spec: model.Spec{Image: "i"}, Count: 1, Pieces: 10, Bind: true, Memory: gib / 16}
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
			wait := whilePlanning(t, f, reqs...)
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
