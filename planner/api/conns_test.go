package api

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// shortTimeouts make a stalled or idle client's connection close well
// within the tests' waits (10 s).
var shortTimeouts = Timeouts{Header: 300 * time.Millisecond, Body: 300 * time.Millisecond, Idle: 300 * time.Millisecond}

// serveWith serves h through NewHTTPServer with t.
func serveWith(t *testing.T, h http.Handler, to Timeouts) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config = NewHTTPServer(h, to)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// closedWithin reads conn until the server closes it; it fails the test
// when the server still holds it after wait.
func closedWithin(t *testing.T, conn net.Conn, r io.Reader, wait time.Duration) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, r)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the server still holds the connection after %s", wait)
	}
}

// TestStalledBodyDropped: a client that sends a request's headers and
// part of its body, then stalls, has its connection closed once the body
// timeout passes (it was held forever, issue 26 N3), not kept alive after
// the answer until the idle timeout (a minute here) closes it: the rest
// of the body would be read as the next request.
func TestStalledBodyDropped(t *testing.T) {
	to := Timeouts{Header: shortTimeouts.Header, Body: shortTimeouts.Body, Idle: time.Minute}
	srv := serveWith(t, Handler(unreachedPlanner{}, Options{Timeouts: to}), to)
	for _, tc := range []struct {
		name   string
		length int // declared; past 256 KiB the server gives up reading the rest itself
	}{{"small", 100_000}, {"large", 4_000_000}} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, err = fmt.Fprintf(conn, "POST /pinfold.v1.PlannerService/Deploy HTTP/1.1\r\nHost: planner\r\nContent-Type: application/json\r\n"+
				"Content-Length: %d\r\n\r\n{\"service\": \"", tc.length)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			answer, err := io.ReadAll(conn)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the server still holds the connection after 10s (answered %q)", answer)
			}
			if !strings.Contains(string(answer), "deadline_exceeded") || !strings.Contains(string(answer), "--body-timeout") {
				t.Errorf("answer %q, want deadline_exceeded naming --body-timeout", answer)
			}
		})
	}
}

// TestIdleConnectionClosed: a keep-alive connection with no request in
// flight is closed once the idle timeout passes (it was held forever).
func TestIdleConnectionClosed(t *testing.T) {
	srv := serveWith(t, Handler(unreachedPlanner{}, Options{Timeouts: shortTimeouts}), shortTimeouts)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: planner\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("/healthz = %d (close %v), %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close, err)
	}
	closedWithin(t, conn, br, 10*time.Second)
}

// streamPlanner serves watches and the web view's stream that stay open
// until their caller leaves.
type streamPlanner struct{ unreachedPlanner }

func (streamPlanner) WatchInstances(ctx context.Context, host string, send func(rev int64, h state.HostView, ins []state.InstanceView) error) error {
	if err := send(1, state.HostView{}, nil); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func (streamPlanner) Rev() int64 { return 1 }

func (streamPlanner) WaitRev(ctx context.Context, rev int64) error {
	<-ctx.Done()
	return ctx.Err()
}

// collect is what c reports: "name{label values}" → value.
func collect(c prometheus.Collector) map[string]float64 {
	ch := make(chan prometheus.Metric, 100)
	c.Collect(ch)
	close(ch)
	out := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil {
			continue
		}
		d := m.Desc().String()
		name := d[strings.Index(d, `fqName: "`)+len(`fqName: "`):]
		name = name[:strings.IndexByte(name, '"')]
		for _, l := range pb.Label {
			name += "{" + l.GetValue() + "}"
		}
		switch {
		case pb.Counter != nil:
			out[name] = pb.Counter.GetValue()
		case pb.Gauge != nil:
			out[name] = pb.Gauge.GetValue()
		}
	}
	return out
}

// TestWatchStreamsPerHost: a host holds at most MaxWatchesPerHost watch
// streams; one more is refused with resource_exhausted naming the bound,
// and counted; another host's watch is served (one agent opened 2,000
// watches of its host, issue 26 N9).
func TestWatchStreamsPerHost(t *testing.T) {
	m := NewMetrics(streamPlanner{})
	srv := httptest.NewServer(Handler(streamPlanner{}, Options{Metrics: m}))
	t.Cleanup(srv.Close)
	cli := pinfoldv1connect.NewPlannerServiceClient(srv.Client(), srv.URL)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	watch := func(host string) error {
		st, err := cli.WatchInstances(ctx, connect.NewRequest(&pinfoldv1.WatchInstancesRequest{Host: host}))
		if err != nil {
			return err
		}
		if !st.Receive() {
			return st.Err()
		}
		return nil
	}
	for i := range MaxWatchesPerHost {
		if err := watch("h1"); err != nil {
			t.Fatalf("watch %d of h1: %v", i+1, err)
		}
	}
	err := watch("h1")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "at most 4 per host") {
		t.Fatalf("watch %d of h1 = %v, want resource_exhausted naming the bound", MaxWatchesPerHost+1, err)
	}
	if err := watch("h2"); err != nil {
		t.Fatalf("watch of h2: %v", err)
	}
	got := collect(streamCollector{m})
	if got["pinfold_planner_streams_refused_total{watch}"] != 1 || got["pinfold_planner_streams_open{watch}"] != MaxWatchesPerHost+1 {
		t.Errorf("stream metrics = %v, want 1 watch refused, %d open", got, MaxWatchesPerHost+1)
	}
}

// TestViewsPerIdentity: one identity holds at most MaxViewsPerIdentity
// live web views; one more is refused (429) naming the bound, and another
// identity's view is served (any viewer could take all 64, issue 26 N9).
func TestViewsPerIdentity(t *testing.T) {
	h := Handler(streamPlanner{}, Options{Authorize: true})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ou, cn, _ := strings.Cut(r.Header.Get("X-Test-Cert"), "/")
		cert := &x509.Certificate{Subject: pkix.Name{CommonName: cn, OrganizationalUnit: []string{"pinfold:" + ou}}}
		r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	view := func(who string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/ui/events", nil)
		req.Header.Set("X-Test-Cert", who)
		resp, err := srv.Client().Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusOK {
			line, err := bufio.NewReader(resp.Body).ReadString('\n') // the first event: the view is open
			if err != nil || !strings.HasPrefix(line, "event: change") {
				return nil, errors.New("no first event: " + line)
			}
		}
		return resp, nil
	}
	for i := range MaxViewsPerIdentity {
		resp, err := view("viewer/bob")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("view %d of viewer:bob: %v %v", i+1, resp, err)
		}
	}
	resp, err := view("viewer/bob")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("view %d of viewer:bob served, want 429 naming the bound", MaxViewsPerIdentity+1)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "at most 8 per identity") {
		t.Fatalf("view %d of viewer:bob = %d %q, want 429 naming the bound", MaxViewsPerIdentity+1, resp.StatusCode, body)
	}
	if resp, err := view("viewer/carol"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("view of viewer:carol: %v %v", resp, err)
	}
}
