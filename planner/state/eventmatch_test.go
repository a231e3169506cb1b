package state

import "testing"

// TestEventMatches: --service web lists web's events and its instances',
// never another service's whose name begins the same (issue 36: sec7
// listed sec7-x's). Control: without a filter everything matches.
func TestEventMatches(t *testing.T) {
	evs := []Event{
		{Kind: "Deploy", Subject: "sec7", Service: "sec7"},
		{Kind: "Resize", Subject: "sec7-dec61c68bd", Service: "sec7-dec61c68bd"},
		{Kind: "Heal", Subject: "sec7-0123456789", Service: "sec7", Host: "h1"},
		{Kind: "Deploy", Subject: "sec7-x", Service: "sec7-x"},
		{Kind: "Resize", Subject: "sec7-x-dec61c68bd", Service: "sec7-x-dec61c68bd"},
		{Kind: "DrainHost", Subject: "sec7-0a1b2c3d4e", Host: "sec7-0a1b2c3d4e"}, // a host named like an instance
	}
	for _, tc := range []struct {
		service, host string
		want          []int
	}{
		{"sec7", "", []int{0, 1, 2}},
		{"sec7-x", "", []int{3, 4}},
		{"sec7", "h1", []int{2}},
		{"", "", []int{0, 1, 2, 3, 4, 5}},
	} {
		match := EventMatches(tc.service, tc.host)
		var got []int
		for i, ev := range evs {
			if match == nil || match(ev) {
				got = append(got, i)
			}
		}
		if len(got) != len(tc.want) {
			t.Errorf("--service %q --host %q matched %v, want %v", tc.service, tc.host, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("--service %q --host %q matched %v, want %v", tc.service, tc.host, got, tc.want)
				break
			}
		}
	}
}
