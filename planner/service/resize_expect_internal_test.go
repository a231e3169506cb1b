package service

import (
	"testing"

	"github.com/pinfold/pinfold/planner/model"
)

// TestResizeExpectsAnInstancesSize: a resize of one instance may name the
// size it read (as a service's may): that size is resized, another is
// refused (aborted) and changes nothing, so a delta is added once.
func TestResizeExpectsAnInstancesSize(t *testing.T) {
	f := newHealFixture(t, "a")
	res, err := f.DeployWithRules(f.ctx, DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 50, Bind: true, Memory: gib}}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Instances[0].ID
	tests := []struct {
		name   string
		expect ResizeRequest
		want   Code // "" for accepted
		pieces int  // the instance's after
	}{
		{"another cpu", ResizeRequest{ExpectPieces: 40}, Conflicted, 50},
		{"another memory", ResizeRequest{ExpectMemory: 2 * gib}, Conflicted, 50},
		{"the size read", ResizeRequest{ExpectPieces: 50, ExpectMemory: gib}, "", 60},
		{"the size read, again", ResizeRequest{ExpectPieces: 50, ExpectMemory: gib}, Conflicted, 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.expect
			r.Target, r.CPUDelta = id, 10
			_, err := f.Resize(f.ctx, r)
			if CodeOf(err) != tt.want {
				t.Errorf("resize = %v, want code %q", err, tt.want)
			}
			if v, _ := f.st.Instance(id); v.Instance.Pieces() != tt.pieces {
				t.Errorf("instance has %d pieces, want %d", v.Instance.Pieces(), tt.pieces)
			}
		})
	}
}
