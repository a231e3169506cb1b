package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// TestAgentHTTP2Settings: the API server announces the HTTP/2 settings
// sized for agent connections (16 KiB frames, the protocol's 64 KiB window per stream, a
// 1 KiB HPACK table, 100 streams; Go's defaults were 1 MiB, 1 MiB, 4 KiB
// and 250) and keeps
// the connection's window at the protocol's 64 KiB, and a 14 KiB body (a
// registration's topology) sent within those windows still arrives whole.
func TestAgentHTTP2Settings(t *testing.T) {
	srv := serveWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Body-Length", strconv.Itoa(len(b)))
	}), Timeouts{})
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame: %v, want SETTINGS", f)
	}
	for _, c := range []struct {
		id   http2.SettingID
		want uint32
	}{
		{http2.SettingMaxFrameSize, H2MaxReadFrameSize},
		{http2.SettingInitialWindowSize, H2StreamWindow},
		{http2.SettingHeaderTableSize, H2HeaderTable},
		{http2.SettingMaxConcurrentStreams, H2MaxConcurrentStreams},
	} {
		t.Run(c.id.String(), func(t *testing.T) {
			if v, ok := sf.Value(c.id); !ok || v != c.want {
				t.Errorf("%s = %d (sent: %v), want %d", c.id, v, ok, c.want)
			}
		})
	}
	if err := fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}

	// One request with a 14 KiB body, sent as the windows allow.
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "planner"}, {":path", "/echo"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("t"), 14<<10)
	streamWin, connWin := int(H2StreamWindow), 65535
	for len(body) > 0 {
		if n := min(len(body), streamWin, connWin, H2MaxReadFrameSize); n > 0 {
			if err := fr.WriteData(1, n == len(body), body[:n]); err != nil {
				t.Fatal(err)
			}
			body, streamWin, connWin = body[n:], streamWin-n, connWin-n
			continue
		}
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for a window update with %d bytes to send: %v", len(body), err)
		}
		if wu, ok := f.(*http2.WindowUpdateFrame); ok {
			if wu.StreamID == 0 {
				connWin += int(wu.Increment)
			} else {
				streamWin += int(wu.Increment)
			}
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if wu, ok := f.(*http2.WindowUpdateFrame); ok && wu.StreamID == 0 && connWin+int(wu.Increment) > 65535 {
			t.Errorf("the server raised the connection's window past 64 KiB (by %d)", wu.Increment)
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok {
			if got := h.PseudoValue("status"); got != "200" {
				t.Fatalf("status %s", got)
			}
			for _, hf := range h.RegularFields() {
				if hf.Name == "body-length" && hf.Value != strconv.Itoa(14<<10) {
					t.Errorf("the handler read %s bytes, want %d", hf.Value, 14<<10)
				}
			}
			return
		}
	}
}

// TestAgentClientCompressesRegistration: with the agent's client options a
// registration (a 128-CPU host's topology, 13 KiB of JSON) goes
// gzip-compressed, under CompressMinBytes on the wire, and the planner's
// handler decodes it (the call reaches the planner); a heartbeat goes as
// it is.
func TestAgentClientCompressesRegistration(t *testing.T) {
	type seen struct {
		encoding string
		bytes    int64
	}
	calls := make(chan seen, 2)
	api := Handler(unreachedPlanner{}, Options{})
	srv := serveWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls <- seen{r.Header.Get("Content-Encoding"), int64(len(b))}
		r.Body = io.NopCloser(bytes.NewReader(b))
		api.ServeHTTP(w, r)
	}), Timeouts{})
	cl := pinfoldv1connect.NewPlannerServiceClient(srv.Client(), srv.URL, AgentClientOptions()...)
	tj, err := json.Marshal(topologytest.BenchHost().Topology())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = cl.RegisterHost(ctx, connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: "h1", TopologyJson: tj, Agent: true, AgentVersion: "test", Protocol: model.Protocol, MemoryShare: 1}))
	if !strings.Contains(fmt.Sprint(err), "reached the planner") {
		t.Fatalf("registration: %v, want the call to reach the planner", err)
	}
	if c := <-calls; c.encoding != "gzip" || c.bytes >= CompressMinBytes {
		t.Errorf("registration of %d bytes of topology sent as %d bytes with encoding %q, want gzip under %d", len(tj), c.bytes, c.encoding, CompressMinBytes)
	}
	_, _ = cl.Heartbeat(ctx, connect.NewRequest(&pinfoldv1.HeartbeatRequest{Host: "h1", AgentVersion: "test", Protocol: model.Protocol, TtlSeconds: 30}))
	if c := <-calls; c.encoding != "" {
		t.Errorf("a heartbeat of %d bytes went with encoding %q, want none", c.bytes, c.encoding)
	}
}

// TestHTTP2BodyBeforeSettings: a client may send a request's body within
// the protocol's initial 64 KiB stream window before the server's
// SETTINGS reach it (RFC 9113 6.9.2); Go's HTTP/2 client and curl do so
// on a new connection. With a 4 KiB stream window announced, the server
// reset every such stream past 4 KiB (FLOW_CONTROL_ERROR: a 5 KB request,
// 20 of 20 from Go's client, about half from curl).
func TestHTTP2BodyBeforeSettings(t *testing.T) {
	srv := serveWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Body-Length", strconv.Itoa(len(b)))
	}), Timeouts{})
	for _, size := range []int{5 << 10, 60 << 10} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Post("http://"+srv.Listener.Addr().String()+"/", "application/json", bytes.NewReader(make([]byte, size)))
			if err != nil {
				t.Fatalf("a %d-byte body as a new connection's first request: %v", size, err)
			}
			defer resp.Body.Close()
			if got := resp.Header.Get("Body-Length"); resp.StatusCode != http.StatusOK || got != strconv.Itoa(size) {
				t.Fatalf("a %d-byte body: %s, %s bytes read", size, resp.Status, got)
			}
		})
	}
}
