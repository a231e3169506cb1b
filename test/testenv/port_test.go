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

// TestFreePortClaimed: a port FreePort gave is held (by its lock file)
// against every other draw, as another test binary's would be: the lock is
// per open file, so a second claim here stands for the other process's.
func TestFreePortClaimed(t *testing.T) {
	p := FreePort(t)
	if claimPort(p) {
		t.Fatalf("port %d claimed again after FreePort gave it: another test process could draw it too", p)
	}
}
