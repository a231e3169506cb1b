package model

import "testing"

func TestInstanceIDShape(t *testing.T) {
	for _, tc := range []struct {
		id, service string
		of, ends    bool
	}{
		{"sec7-dec61c68bd", "sec7", true, true},
		{"sec7-x", "sec7", false, false},
		{"sec7-dec61c68bd", "sec", false, true},
		{"sec7-DEC61C68BD", "sec7", false, false},
		{"sec7-dec61c68b", "sec7", false, false},
		{"web", "web", false, false},
		{"-0123456789", "", true, false},
	} {
		if got := IsInstanceOf(tc.id, tc.service); got != tc.of {
			t.Errorf("IsInstanceOf(%q, %q) = %v, want %v", tc.id, tc.service, got, tc.of)
		}
		if got := EndsLikeInstanceID(tc.id); got != tc.ends {
			t.Errorf("EndsLikeInstanceID(%q) = %v, want %v", tc.id, got, tc.ends)
		}
	}
}
