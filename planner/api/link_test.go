package api_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/agentlink"
	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// linkPlanner is the real service over embedded etcd with hosts
// registered, served through NewHTTPServer.
func linkPlanner(t *testing.T, hosts ...string) (*service.Service, *httptest.Server) {
	svc, srv, _ := linkPlannerMetrics(t, hosts...)
	return svc, srv
}

// linkPlannerMetrics is linkPlanner with its metrics.
func linkPlannerMetrics(t *testing.T, hosts ...string) (*service.Service, *httptest.Server, *api.Metrics) {
	t.Helper()
	c := statetest.Start(t, 1, func(e *state.EmbedConfig) { e.UnsafeNoFsync = true })
	st := c.Open(t, state.Config{ShareBase: 100, MaxFragmentCores: -1}, model.Protocol)
	svc := service.New(st, nil)
	for _, h := range hosts {
		if _, err := svc.RegisterHost(context.Background(), service.RegisterHostRequest{Name: h, Topology: topologytest.Laptop().Topology(), Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	m := api.NewMetrics(svc)
	h := api.Handler(svc, api.Options{Metrics: m})
	srv := httptest.NewUnstartedServer(h)
	srv.Config = api.NewHTTPServer(h, api.Timeouts{})
	srv.Start()
	t.Cleanup(srv.Close)
	return svc, srv, m
}

// heartbeatsCounted is pinfold_planner_requests_total of Heartbeat with
// code.
func heartbeatsCounted(t *testing.T, m *api.Metrics, code string) float64 {
	t.Helper()
	return metricValue(t, m, "pinfold_planner_requests_total", map[string]string{"method": "Heartbeat", "code": code})
}

// metricValue is the value of the series name with labels (0: none).
func metricValue(t *testing.T, m *api.Metrics, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			if s.GetCounter() != nil {
				return s.GetCounter().GetValue()
			}
			return s.GetGauge().GetValue()
		}
	}
	return 0
}

func openLink(t *testing.T, srv *httptest.Server, host string) *agentlink.Link {
	t.Helper()
	l, err := agentlink.NewClient(&http.Client{Transport: &http.Transport{}}, srv.URL).Open(t.Context(), host)
	if err != nil {
		t.Fatalf("open the link of %s: %v", host, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// receive is the link's next desired state, within 10 s.
func receive(t *testing.T, l *agentlink.Link) *pinfoldv1.WatchInstancesResponse {
	t.Helper()
	type got struct {
		m   *pinfoldv1.WatchInstancesResponse
		err error
	}
	ch := make(chan got, 1)
	go func() {
		m, err := l.Receive()
		ch <- got{m, err}
	}()
	select {
	case g := <-ch:
		if g.err != nil {
			t.Fatalf("receive: %v", g.err)
		}
		return g.m
	case <-time.After(10 * time.Second):
		t.Fatal("no desired state within 10 s")
	}
	return nil
}

// TestLinkCarriesHeartbeatsAndDesiredState: over one link an agent gets
// its host's desired set at once and after a deploy to it, and its
// heartbeats are the planner's (the host is up with the agent's version);
// a heartbeat the planner refuses is that heartbeat's error and the link
// goes on.
func TestLinkCarriesHeartbeatsAndDesiredState(t *testing.T) {
	svc, srv, metrics := linkPlannerMetrics(t, "h1")
	ctx := t.Context()
	l := openLink(t, srv, "h1")
	// Receive runs beside Heartbeat, as in the agent: it delivers the
	// heartbeats' answers.
	desired := make(chan *pinfoldv1.WatchInstancesResponse, 8)
	go func() {
		for {
			m, err := l.Receive()
			if err != nil {
				close(desired)
				return
			}
			desired <- m
		}
	}()
	next := func() *pinfoldv1.WatchInstancesResponse {
		t.Helper()
		select {
		case m, ok := <-desired:
			if !ok {
				t.Fatal("the link ended")
			}
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no desired state within 10 s")
		}
		return nil
	}
	first := next()
	if first.Revision == 0 || len(first.Instances) != 0 || first.Cpus == "" {
		t.Fatalf("first desired state = %v, want the empty set of h1 at a revision, with its CPUs", first)
	}
	h, _ := svc.Host("h1")
	if h.Live {
		t.Fatal("h1 is live before its first heartbeat")
	}
	resp, err := l.Heartbeat(ctx, &pinfoldv1.HeartbeatRequest{Host: "h1", AgentVersion: "v-link", Protocol: model.Protocol, TtlSeconds: 30,
		Metrics: &pinfoldv1.HostMetrics{Load1: 0.5, MemTotalBytes: 1 << 30, MemAvailableBytes: 1 << 29}})
	if err != nil || resp.PlannerProtocol != model.Protocol {
		t.Fatalf("heartbeat = %v, %v", resp, err)
	}
	if err := svc.WaitRev(ctx, svc.Rev()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for h, _ = svc.Host("h1"); (!h.Live || h.Metrics == nil) && time.Now().Before(deadline); h, _ = svc.Host("h1") {
		time.Sleep(20 * time.Millisecond)
	}
	if !h.Live || h.Metrics == nil || h.Metrics.Load1 != 0.5 || h.Metrics.AgentVersion != "v-link" {
		t.Fatalf("after the link's heartbeat h1 = live %v, metrics %+v; want live with load 0.5 of agent v-link", h.Live, h.Metrics)
	}
	if _, err := svc.Deploy(ctx, service.DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Size: model.Size{Pieces: 50, Memory: 64 << 20}}}); err != nil {
		t.Fatal(err)
	}
	got := next()
	for len(got.Instances) == 0 { // the heartbeat's own change may come first
		got = next()
	}
	if len(got.Instances) != 1 || got.Instances[0].Service != "web" || got.Revision <= first.Revision {
		t.Fatalf("after the deploy: %v, want web's one instance at a later revision", got)
	}
	// A refused heartbeat (TTL 0) is its own error; the link goes on.
	_, err = l.Heartbeat(ctx, &pinfoldv1.HeartbeatRequest{Host: "h1", AgentVersion: "v-link", Protocol: model.Protocol, TtlSeconds: 0})
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("heartbeat with TTL 0 = %v, want invalid_argument", err)
	}
	if _, err := l.Heartbeat(ctx, &pinfoldv1.HeartbeatRequest{Host: "h1", AgentVersion: "v-link", Protocol: model.Protocol, TtlSeconds: 30}); err != nil {
		t.Fatalf("the heartbeat after a refused one: %v", err)
	}
	if n := metricValue(t, metrics, "pinfold_planner_streams_open", map[string]string{"kind": "link"}); n != 1 {
		t.Errorf("pinfold_planner_streams_open{kind=link} = %v, want 1", n)
	}
	// The link's heartbeats are counted as the calls were.
	if ok, bad := heartbeatsCounted(t, metrics, "ok"), heartbeatsCounted(t, metrics, "invalid_argument"); ok != 2 || bad != 1 {
		t.Errorf("Heartbeat requests counted: %v ok, %v invalid_argument; want 2 and 1", ok, bad)
	}
}

// rawLink upgrades a connection to host's link by hand and returns it
// with its reader, so that a test can send what no agent sends.
func rawLink(t *testing.T, srv *httptest.Server, host string) (net.Conn, *bufio.Reader) {
	t.Helper()
	u, _ := url.Parse(srv.URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET %s?host=%s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", agentlink.Path, host, agentlink.Protocol)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	return conn, br
}

// endsWith reads frames until the link's end and returns its error frame.
func endsWith(t *testing.T, conn net.Conn, br *bufio.Reader) error {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var last error
	for {
		k, b, err := agentlink.ReadFrame(br, agentlink.MaxPlannerFrame)
		if err != nil {
			if last == nil {
				t.Fatalf("the link ended (%v) without an error frame", err)
			}
			return last
		}
		if k == agentlink.KindError {
			last = agentlink.ParseError(b)
		}
	}
}

// TestLinkRefusesWhatNoAgentSends: a frame over MaxAgentFrame (refused
// before it is read), a frame of a kind only the planner sends, a
// heartbeat of another host and bytes that are no heartbeat each end the
// link with an error frame naming the reason, and give its place back: the
// host takes MaxWatchesPerHost links again afterwards.
func TestLinkRefusesWhatNoAgentSends(t *testing.T) {
	_, srv := linkPlanner(t, "h1", "h2")
	other, _ := proto.Marshal(&pinfoldv1.HeartbeatRequest{Host: "h2", Protocol: model.Protocol, TtlSeconds: 30})
	for _, tc := range []struct {
		name  string
		frame []byte
		code  connect.Code
		text  string
	}{
		{"over the bound", binary.BigEndian.AppendUint32(nil, agentlink.MaxAgentFrame+1), connect.CodeResourceExhausted, "at most 16384"},
		{"a planner's kind", []byte{0, 0, 0, 1, byte(agentlink.KindDesired)}, connect.CodeInvalidArgument, "an agent sends only heartbeats"},
		{"another host's heartbeat", append([]byte{0, 0, 0, byte(1 + len(other)), byte(agentlink.KindHeartbeat)}, other...), connect.CodePermissionDenied, `a heartbeat of host "h2"`},
		{"not protobuf", []byte{0, 0, 0, 3, byte(agentlink.KindHeartbeat), 0xff, 0xff}, connect.CodeInvalidArgument, "heartbeat"},
		{"length 0", []byte{0, 0, 0, 0}, connect.CodeInvalidArgument, "length 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, br := rawLink(t, srv, "h1")
			if _, err := conn.Write(tc.frame); err != nil {
				t.Fatal(err)
			}
			err := endsWith(t, conn, br)
			if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("the link ended with %v (%s), want %s naming %q", err, connect.CodeOf(err), tc.code, tc.text)
			}
		})
	}
	for range api.MaxWatchesPerHost {
		openLink(t, srv, "h1")
	}
	_, err := agentlink.NewClient(&http.Client{}, srv.URL).Open(t.Context(), "h1")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "MaxWatchesPerHost") {
		t.Errorf("link %d of h1 = %v, want resource_exhausted naming the bound", api.MaxWatchesPerHost+1, err)
	}
}

// TestLinkRequestRefusals: a request that is no link upgrade is refused
// with its reason before anything is taken; a planner without links is
// ErrUnsupported to the agent, which then uses the calls.
func TestLinkRequestRefusals(t *testing.T) {
	_, srv := linkPlanner(t, "h1")
	for _, tc := range []struct {
		name, path string
		header     map[string]string
		status     int
		text       string
	}{
		{"no upgrade", agentlink.Path + "?host=h1", nil, http.StatusBadRequest, "Upgrade: pinfold-link.v1"},
		// A proxy that drops the upgrade: the refusal tells the agent's
		// operator the way around it.
		{"upgrade dropped", agentlink.Path + "?host=h1", nil, http.StatusBadRequest, "or run it with --no-link"},
		{"another protocol", agentlink.Path + "?host=h1", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, http.StatusBadRequest, `Upgrade = "websocket"`},
		{"no host", agentlink.Path, map[string]string{"Connection": "Upgrade", "Upgrade": agentlink.Protocol}, http.StatusBadRequest, "query parameter host is missing"},
		{"host too long", agentlink.Path + "?host=" + strings.Repeat("a", service.MaxNameLen+1), map[string]string{"Connection": "Upgrade", "Upgrade": agentlink.Protocol}, http.StatusBadRequest, "longer than 253 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+tc.path, nil)
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b := make([]byte, 4096)
			n, _ := resp.Body.Read(b)
			if resp.StatusCode != tc.status || !strings.Contains(string(b[:n]), tc.text) {
				t.Errorf("%s: HTTP %d %q, want %d naming %q", tc.name, resp.StatusCode, b[:n], tc.status, tc.text)
			}
		})
	}
	// Over HTTP/2 (a proxy that speaks it to the planner): refused, naming
	// --no-link.
	req := httptest.NewRequest(http.MethodGet, agentlink.Path+"?host=h1", nil)
	req.ProtoMajor, req.ProtoMinor, req.Proto = 2, 0, "HTTP/2.0"
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", agentlink.Protocol)
	rec := httptest.NewRecorder()
	srv.Config.Handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "HTTP/2") || !strings.Contains(rec.Body.String(), "--no-link") {
		t.Errorf("a link over HTTP/2: HTTP %d %q, want 400 naming HTTP/2 and --no-link", rec.Code, rec.Body.String())
	}
	// An unregistered host's link ends with not_found, as its watch did.
	conn, br := rawLink(t, srv, "nosuch")
	if err := endsWith(t, conn, br); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("link of an unregistered host ended with %v, want not_found", err)
	}
	old := httptest.NewServer(func() http.Handler {
		mux := http.NewServeMux()
		mux.Handle(pinfoldv1connect.NewPlannerServiceHandler(pinfoldv1connect.UnimplementedPlannerServiceHandler{}))
		return mux
	}())
	t.Cleanup(old.Close)
	if _, err := agentlink.NewClient(&http.Client{}, old.URL).Open(t.Context(), "h1"); !errors.Is(err, agentlink.ErrUnsupported) {
		t.Errorf("a planner without links: %v, want ErrUnsupported", err)
	}
	// A proxy that forwards the request without its upgrade: the
	// planner's 400 reaches the agent, which takes the calls instead.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, _ := http.NewRequestWithContext(r.Context(), r.Method, srv.URL+r.URL.RequestURI(), nil)
		resp, err := http.DefaultClient.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(proxy.Close)
	_, err := agentlink.NewClient(&http.Client{}, proxy.URL).Open(t.Context(), "h1")
	if !errors.Is(err, agentlink.ErrUnsupported) || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), "--no-link") {
		t.Errorf("through a proxy that drops the upgrade: %v, want ErrUnsupported with the planner's 400 naming --no-link", err)
	}
}

// TestLinksCountedAsWatchStreams: an open link counts in
// pinfold_planner_streams_open{kind="watch"}, one over the host's bound in
// _streams_refused_total, and both series' help says that links are
// counted there (it named only WatchInstances, which agents no longer hold).
func TestLinksCountedAsWatchStreams(t *testing.T) {
	_, srv, m := linkPlannerMetrics(t, "h1")
	for range api.MaxWatchesPerHost {
		openLink(t, srv, "h1")
	}
	if _, err := agentlink.NewClient(&http.Client{}, srv.URL).Open(t.Context(), "h1"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("link %d of h1 = %v, want resource_exhausted", api.MaxWatchesPerHost+1, err)
	}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want float64
	}{
		{"pinfold_planner_streams_open", api.MaxWatchesPerHost},
		{"pinfold_planner_streams_refused_total", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, mf := range mfs {
				if mf.GetName() != tc.name {
					continue
				}
				if !strings.Contains(mf.GetHelp(), "links") {
					t.Errorf("help of %s = %q, want it to name the agents' links", tc.name, mf.GetHelp())
				}
				for _, s := range mf.GetMetric() {
					if s.GetLabel()[0].GetValue() != "watch" {
						continue
					}
					if got := s.GetGauge().GetValue() + s.GetCounter().GetValue(); got != tc.want {
						t.Errorf("%s{kind=\"watch\"} = %v, want %v", tc.name, got, tc.want)
					}
					return
				}
			}
			t.Errorf("no %s{kind=\"watch\"} series", tc.name)
		})
	}
}

// TestLinkShutdown: the server's Shutdown ends the links, which net/http
// no longer knows of.
func TestLinkShutdown(t *testing.T) {
	_, srv := linkPlanner(t, "h1")
	l := openLink(t, srv, "h1")
	receive(t, l)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := srv.Config.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := l.Receive()
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "the planner is shutting down") {
		t.Errorf("after Shutdown Receive = %v, want unavailable saying the planner is shutting down", err)
	}
}

// serverGoroutines counts the goroutines of this process serving
// connections: net/http's per connection and the links'.
func serverGoroutines() int {
	buf := make([]byte, 64<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	n := 0
	for _, g := range strings.Split(stacks, "\n\n") {
		if strings.Contains(g, "net/http.(*conn).serve") || strings.Contains(g, "net/http.(*connReader).backgroundRead") || strings.Contains(g, "api.(*link)") {
			n++
		}
	}
	return n
}

// TestLinkGoroutinesPerAgent: an agent on its link costs the planner two
// goroutines of its own and none of net/http's; heartbeating and watching
// with the calls over HTTP/1.1 costs three (the control: the measure
// tells the two apart).
func TestLinkGoroutinesPerAgent(t *testing.T) {
	const agents = 20
	names := make([]string, agents)
	for i := range names {
		names[i] = fmt.Sprintf("h%d", i)
	}
	_, srv := linkPlanner(t, names...)
	settle := func() int {
		time.Sleep(300 * time.Millisecond)
		return serverGoroutines()
	}
	base := settle()
	for _, h := range names {
		l := openLink(t, srv, h)
		receive(t, l)
	}
	linked := settle() - base
	if linked > 2*agents {
		t.Errorf("%d agents on links: %d serving goroutines, want at most %d", agents, linked, 2*agents)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	base = settle()
	for _, h := range names {
		cl := pinfoldv1connect.NewPlannerServiceClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}, srv.URL)
		st, err := cl.WatchInstances(ctx, connect.NewRequest(&pinfoldv1.WatchInstancesRequest{Host: h}))
		if err != nil || !st.Receive() {
			t.Fatalf("watch of %s: %v", h, err)
		}
		// The agent's heartbeat, on its second connection while the
		// watch holds the first.
		if _, err := cl.Heartbeat(ctx, connect.NewRequest(&pinfoldv1.HeartbeatRequest{Host: h, Protocol: model.Protocol, TtlSeconds: 30})); err != nil {
			t.Fatal(err)
		}
	}
	called := settle() - base
	t.Logf("goroutines serving %d agents: %d on links, %d with the calls", agents, linked, called)
	if called < 3*agents {
		t.Errorf("control: %d agents with the calls hold %d serving goroutines, want at least %d (else this measure cannot tell)", agents, called, 3*agents)
	}
}

// TestLinkOutlivesItsOpenContext: Open's context bounds the request only
// (the agent bounds it by its TTL): the link stays open after it ends.
func TestLinkOutlivesItsOpenContext(t *testing.T) {
	_, srv := linkPlanner(t, "h1")
	ctx, cancel := context.WithCancel(t.Context())
	l, err := agentlink.NewClient(&http.Client{Transport: &http.Transport{}}, srv.URL).Open(ctx, "h1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	cancel()
	go func() {
		for {
			if _, err := l.Receive(); err != nil {
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	hctx, done := context.WithTimeout(t.Context(), 5*time.Second)
	defer done()
	if _, err := l.Heartbeat(hctx, &pinfoldv1.HeartbeatRequest{Host: "h1", Protocol: model.Protocol, TtlSeconds: 30}); err != nil {
		t.Errorf("heartbeat after Open's context ended: %v, want the link open", err)
	}
}
