package testenv

import (
	"fmt"
	"net"
	"testing"
)

// TestFreePortBelowEphemeral: the ports are outside the range connect
// allocates from, bindable, and not handed out twice by one process.
func TestFreePortBelowEphemeral(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		p := FreePort(t)
		if p >= low {
			t.Fatalf("FreePort = %d, inside the ephemeral range from %d", p, low)
		}
		if seen[p] {
			t.Fatalf("FreePort gave %d twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("FreePort = %d, not bindable: %v", p, err)
		}
		l.Close()
	}
}
