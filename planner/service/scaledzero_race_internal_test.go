package service

import (
	"testing"

	"github.com/pinfold/pinfold/planner/model"
)

// TestScaledToZeroRaces: a scale from 0 and a resize or replace of the
// service's record queued together, in either order, leave every instance
// at the record's size and image: the scale's deploy reads the record in
// its plan (a record changed since its read makes it read again), and a
// resize planned after the deploy in the same group sees the instances
// the deploy planned and resizes them too.
func TestScaledToZeroRaces(t *testing.T) {
	small := DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Bind: true, Memory: gib / 16}}}
	other := DeployRequest{Service: "other", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Bind: true, Memory: gib / 16}}}
	resize := func(f healFixture, errs chan<- error) func() {
		return func() {
			_, err := f.Resize(f.ctx, ResizeRequest{Target: "web", CPUDelta: 10, ExpectPieces: 10})
			errs <- err
		}
	}
	replace := func(f healFixture, errs chan<- error) func() {
		return func() { _, err := f.Replace(f.ctx, ReplaceRequest{Target: "web", Image: "j"}); errs <- err }
	}
	scale := func(f healFixture, errs chan<- error) func() {
		return func() { _, err := f.Scale(f.ctx, "web", 3); errs <- err }
	}
	for _, tc := range []struct {
		name      string
		order     func(f healFixture, errs chan<- error) []func()
		pieces    int
		image     string
		instances int
	}{
		{"resize then scale", func(f healFixture, e chan<- error) []func() { return []func(){resize(f, e), scale(f, e)} }, 20, "i", 3},
		{"scale then resize", func(f healFixture, e chan<- error) []func() { return []func(){scale(f, e), resize(f, e)} }, 20, "i", 3},
		{"replace then scale", func(f healFixture, e chan<- error) []func() { return []func(){replace(f, e), scale(f, e)} }, 10, "j", 3},
		{"scale then replace", func(f healFixture, e chan<- error) []func() { return []func(){scale(f, e), replace(f, e)} }, 10, "j", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHealFixture(t, "a", "b", "c")
			if _, err := f.DeployWithRules(f.ctx, small); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Scale(f.ctx, "web", 0); err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 4)
			planAndWait(t, f, other, whilePlanning(t, f, tc.order(f, errs)...), errs)
			d, _ := f.st.Service("web")
			if d.Value.Pieces != tc.pieces || d.Value.Image != tc.image {
				t.Errorf("record: %d pieces, image %s; want %d, %s", d.Value.Pieces, d.Value.Image, tc.pieces, tc.image)
			}
			ins := f.st.ServiceInstances("web")
			if got := countInstances(ins); got != tc.instances {
				t.Errorf("web has %d instances, want %d", got, tc.instances)
			}
			for _, v := range ins {
				if v.Instance.Pieces() != d.Value.Pieces || v.Instance.Image != d.Value.Image {
					t.Errorf("instance %s: %d pieces, image %s; the record %d, %s", v.Instance.ID, v.Instance.Pieces(), v.Instance.Image, d.Value.Pieces, d.Value.Image)
				}
			}
			f.verify()
		})
	}
}
