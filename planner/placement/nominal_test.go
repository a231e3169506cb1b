package placement

import (
	"testing"
)

// TestNominalFirst (issue 38): a request that moves existing work
// (NominalFirst, UseBuffer) goes to a host with room within its nominal
// capacity, even one the ranking puts after a host with only the
// overbooking's room; with none it uses the overbooking and says so
// (Result.Overbooked). A request that is not NominalFirst (a deploy with
// --use-buffer) keeps taking the first host the ranking gives.
func TestNominalFirst(t *testing.T) {
	t.Parallel()
	over := Settings{Overbooking: map[string]float64{"memory": 0.2}}
	// small: 16 GiB, 15.75 of it used; big: 16 GiB, empty. Ranked small
	// first (nodes_order).
	hosts := func(bigUsed int64) []*Host {
		small := &Host{Name: "small", Resources: res("small", 8, 16<<10)}
		small.Resources.MemoryUsed = 63 << 28
		big := &Host{Name: "big", Resources: res("big", 8, 16<<10)}
		big.Resources.MemoryUsed = bigUsed
		return []*Host{small, big}
	}
	for _, tt := range []struct {
		name           string
		s              Settings
		nominalFirst   bool
		bigUsed        int64
		want           string
		wantOverbooked bool
	}{
		{"a move takes nominal room on a later host", over, true, 0, "big", false},
		{"a move takes the overbooking when no host has nominal room", over, true, 16 << 30, "small", true},
		{"without overbooking a move is plain placement", Settings{}, true, 0, "big", false},
		{"a deploy with --use-buffer keeps the ranking", over, false, 0, "small", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := req("svc", 1)
			r.Bind, r.Pieces, r.MemoryBytes = false, 10, 512<<20
			r.Policy, r.HostsOrder = NodesOrder, []string{"small", "big"}
			r.UseBuffer, r.NominalFirst = true, tt.nominalFirst
			got, err := Plan(params, tt.s, hosts(tt.bigUsed), r)
			if err != nil {
				t.Fatal(err)
			}
			if h := got.Placements[0].Host; h != tt.want || got.Overbooked != tt.wantOverbooked {
				t.Errorf("placed on %s, overbooked %t; want %s, overbooked %t", h, got.Overbooked, tt.want, tt.wantOverbooked)
			}
		})
	}
}
