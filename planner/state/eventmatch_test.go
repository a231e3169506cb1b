package state

import (
	"slices"
	"testing"
)

// TestEventMatches: --service web lists web's events and its instances',
// never another service's whose name begins the same (issue 36: sec7
// listed sec7-x's), nor a request's service name shaped like one of
// web's instances (issue 36: the refused deploy of web-0123456789 was
// listed under --service web). Control: without a filter everything
// matches.
func TestEventMatches(t *testing.T) {
	evs := []Event{
		0: {Kind: "Deploy", Subject: "sec7", Service: "sec7", ServiceExact: true},
		1: {Kind: "Resize", Subject: "sec7-dec61c68bd", Service: "sec7-dec61c68bd"}, // an instance, as a target
		2: {Kind: "Heal", Subject: "sec7-0123456789", Service: "sec7", Host: "h1"},
		3: {Kind: "Deploy", Subject: "sec7-x", Service: "sec7-x", ServiceExact: true},
		4: {Kind: "Resize", Subject: "sec7-x-dec61c68bd", Service: "sec7-x-dec61c68bd"},
		5: {Kind: "DrainHost", Subject: "sec7-0a1b2c3d4e", Host: "sec7-0a1b2c3d4e"}, // a host named like an instance
		6: {Kind: "Deploy", Subject: "web-0123456789", Service: "web-0123456789", ServiceExact: true, Outcome: "invalid_argument: …"},
		7: {Kind: "Replace", Subject: "web-9876543210", Service: "web-9876543210"}, // a real instance of web, as a target
		8: {Kind: "Scale", Subject: "web", Service: "web", ServiceExact: true},
		9: {Kind: "Resize", Subject: "web-0123456789", Service: "web-0123456789"}, // written before ServiceExact: still web's
	}
	tests := []struct {
		name          string
		service, host string
		want          []int
	}{
		{"a service and its instances", "sec7", "", []int{0, 1, 2}},
		{"a service whose name begins another's", "sec7-x", "", []int{3, 4}},
		{"a service on one host", "sec7", "h1", []int{2}},
		{"a refused service name is not an instance of web", "web", "", []int{7, 8, 9}},
		{"the refused service name itself", "web-0123456789", "", []int{6, 9}},
		{"control: no filter", "", "", []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			match := EventMatches(tt.service, tt.host)
			var got []int
			for i, ev := range evs {
				if match == nil || match(ev) {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("EventMatches(%q, %q) matched events %v, want %v", tt.service, tt.host, got, tt.want)
			}
		})
	}
}
