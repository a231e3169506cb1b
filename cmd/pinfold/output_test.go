package main

import "testing"

func TestCounted(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want string
	}{{0, "0 hosts"}, {1, "1 host"}, {2, "2 hosts"}} {
		if got := counted(tt.n, "host"); got != tt.want {
			t.Errorf("counted(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}
