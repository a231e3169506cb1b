package clip

import "testing"

func TestText(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijkl", 4, "abcd…(12 bytes)"},
		{"ééé", 3, "é…(6 bytes)"}, // never half a rune
		{"abc", 0, "…(3 bytes)"},
		{"abc", -1, "…(3 bytes)"},
	} {
		if got := Text(tc.s, tc.n); got != tc.want {
			t.Errorf("Text(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
