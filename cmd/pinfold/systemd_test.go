package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestNotifySystemd: under a Type=notify unit (NOTIFY_SOCKET and
// WATCHDOG_USEC set, as systemd sets them) the daemon sends READY=1, pings
// the watchdog at half its period while alive, stops pinging when it is
// not, and says STOPPING=1 at the end.
func TestNotifySystemd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "200000") // 200 ms: a ping every 100 ms
	t.Setenv("WATCHDOG_PID", "")
	os.Unsetenv("WATCHDOG_PID")
	var alive atomic.Bool
	alive.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopping := notifySystemd(ctx, slog.New(slog.DiscardHandler), alive.Load)
	read := func(d time.Duration) string {
		_ = conn.SetReadDeadline(time.Now().Add(d))
		b := make([]byte, 256)
		n, err := conn.Read(b)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b[:n]))
	}
	if got := read(time.Second); got != "READY=1" {
		t.Fatalf("first message %q, want READY=1", got)
	}
	if got := read(time.Second); got != "WATCHDOG=1" {
		t.Fatalf("second message %q, want WATCHDOG=1 within the period", got)
	}
	alive.Store(false)
	read(150 * time.Millisecond) // a ping already on its way
	if got := read(400 * time.Millisecond); got != "" {
		t.Errorf("while not alive the daemon sent %q; want no watchdog ping (systemd restarts it)", got)
	}
	stopping()
	if got := read(time.Second); got != "STOPPING=1" {
		t.Errorf("at the end %q, want STOPPING=1", got)
	}
}
