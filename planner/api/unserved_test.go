package api

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestUnservedConnsBounded: connections that send nothing are held at
// most maxUnservedConns at once, whoever opens them; past it a new one is
// closed at once, and once they go, requests are served again (attack
// review: 19,990 silent connections took 15,289 of the planner's 20,000
// files). Control: the connections under the bound stay open.
func TestUnservedConnsBounded(t *testing.T) {
	saved := maxUnservedConns
	maxUnservedConns = 20
	t.Cleanup(func() { maxUnservedConns = saved })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), Timeouts{})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	var conns []net.Conn
	closed := 0
	for range 30 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	time.Sleep(100 * time.Millisecond) // the server's accepts: not ours to wait on
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		if err == io.EOF {
			closed++
		} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			t.Errorf("connection %d: %v, want it held (a timeout) or closed (EOF)", i, err)
		}
	}
	if closed != 10 {
		t.Errorf("%d of 30 silent connections closed by the server, want the 10 past the bound of 20", closed)
	}
	for _, c := range conns {
		c.Close()
	}
	// Once they are gone, a request is served.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get("http://" + ln.Addr().String())
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no request served after the silent connections closed: %v", err)
		}
	}
}
