package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// nextPort walks this test process's ports; FreePort seeds it from the pid
// so that test binaries running side by side start far apart.
var nextPort atomic.Int64

// FreePort returns a loopback TCP port that was free a moment ago, for a
// server the test starts next (an etcd member, a planner).
//
// A port from Listen("127.0.0.1:0") is an ephemeral port, and between its
// Close and the server's bind any outgoing connection on the machine may be
// given it: CI failed so once ("bind: address already in use" starting
// etcd). FreePort draws below the kernel's ephemeral range instead, where
// connect never allocates, walking from an offset set by the pid.
func FreePort(t testing.TB) int {
	t.Helper()
	low := ephemeralLow()
	const span = 12000
	if low < span+1024 {
		return anyPort(t)
	}
	nextPort.CompareAndSwap(0, int64(os.Getpid())*7919)
	for range 500 {
		p := low - span + int(nextPort.Add(1)%span)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		if !claimPort(p) {
			continue // another test process drew it and may bind it any moment
		}
		return p
	}
	return anyPort(t)
}

// anyPort is a port the kernel picks (an ephemeral one).
func anyPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ephemeralLow is the first port of the kernel's ephemeral range, 32768
// when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// claimed holds the lock files of the ports this process drew, open (and
// so locked) until it exits.
var claimed []*os.File

// claimPort takes port p for this process among the test binaries that
// go test runs side by side (each draws from its own offset, but the
// windows can meet): an exclusive flock on a file named for the port,
// held until the process exits. A port another process holds is refused.
func claimPort(p int) bool {
	dir := filepath.Join(os.TempDir(), "pinfold-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true // no lock directory: the bind probe alone, as before
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	claimedMu.Lock()
	claimed = append(claimed, f)
	claimedMu.Unlock()
	return true
}

var claimedMu sync.Mutex
