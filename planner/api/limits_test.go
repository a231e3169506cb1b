package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
)

// readCounter counts the bytes read from a request body.
type readCounter struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r readCounter) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n.Add(int64(n))
	return n, err
}

// countingPlanner is a Planner that counts what reached it; the methods
// these tests do not call are left to the embedded nil interface.
type countingPlanner struct {
	api.Planner
	deploys int
}

func (c *countingPlanner) Params() alloc.Params                                  { return alloc.DefaultParams() }
func (c *countingPlanner) Hosts() []state.HostView                               { return nil }
func (c *countingPlanner) Record(state.Event)                                    {}
func (c *countingPlanner) RecordFailed(state.Event, func() string, string, bool) {}
func (c *countingPlanner) RecordUnchanged(state.Event, string, bool)             {}
func (c *countingPlanner) DeployWithRules(context.Context, service.DeployRequest) (service.DeployResult, error) {
	c.deploys++
	return service.DeployResult{}, nil
}

// zeros is a body of '0' bytes; left counts what was not read yet (the
// client's transport may still be reading it when the response is in).
type zeros struct{ n atomic.Int64 }

func newZeros(n int64) *zeros {
	z := &zeros{}
	z.n.Store(n)
	return z
}

func (z *zeros) left() int64 { return z.n.Load() }

func (z *zeros) Read(p []byte) (int, error) {
	n := z.n.Load()
	if n <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), n)
	for i := range p[:k] {
		p[i] = '0'
	}
	z.n.Add(-k)
	return int(k), nil
}

// TestRequestBounds: a 100 MB body is refused without being held (the
// server allocates a few MiB at most), on Deploy and on ListHosts; unknown
// JSON fields are refused naming the field; a normal request passes.
func TestRequestBounds(t *testing.T) {
	p := &countingPlanner{}
	// read counts the request body bytes the planner's handler read (what
	// the client managed to send also sits in socket buffers, whose size
	// is the kernel's business).
	var read atomic.Int64
	h := api.Handler(p, api.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = readCounter{r.Body, &read}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	post := func(method string, body io.Reader) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/pinfold.v1.PlannerService/"+method, body)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	for _, method := range []string{"Deploy", "ListHosts"} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		z := newZeros(100 << 20)
		code, body := post(method, io.MultiReader(strings.NewReader(`{"service":"`), z, strings.NewReader(`"}`)))
		runtime.ReadMemStats(&after)
		grew := after.TotalAlloc - before.TotalAlloc
		sent := 100<<20 - z.left()
		if code == http.StatusOK {
			t.Errorf("%s with a 100 MB body: %d %s", method, code, body)
		}
		// The server stops reading at the limit: the client sends little
		// more than it (what the connection buffers), and nothing in this
		// process (client and server, under -race too) comes near 100 MB.
		if sent > 24<<20 || grew > 80<<20 {
			t.Errorf("%s with a 100 MB body: the client sent %d MiB, the process allocated %d MiB", method, sent>>20, grew>>20)
		}
		t.Logf("%s, 100 MB body: HTTP %d after %d KiB of it were sent; %d KiB allocated in this process meanwhile", method, code, sent>>10, grew>>10)
	}
	// A body that declares its 100 MB is refused before it is read.
	read.Store(0)
	z := newZeros(100 << 20)
	req, _ := http.NewRequest("POST", srv.URL+"/pinfold.v1.PlannerService/Deploy", z)
	req.ContentLength = 100 << 20
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "--max-request-bytes") {
			t.Errorf("declared 100 MB body: %d %s, want 413 naming --max-request-bytes", resp.StatusCode, b)
		}
	}
	if n := read.Load(); n > 0 {
		t.Errorf("a declared 100 MB body was read: the handler read %d KiB", n>>10)
	} else {
		t.Logf("declared 100 MB body: refused unread (the client had sent %d KiB into the socket)", (100<<20-z.left())>>10)
	}
	if p.deploys != 0 {
		t.Errorf("an oversized deploy reached the service")
	}
	code, body := post("Deploy", strings.NewReader(`{"service":"web","bnid":true,"memoryBytes":"1048576"}`))
	if code != http.StatusBadRequest || !strings.Contains(body, "bnid") {
		t.Errorf("unknown field: %d %s, want 400 naming bnid", code, body)
	}
	for _, grace := range []string{`"-5"`, `"9223372036"`} {
		code, body = post("SetHostMaintenance", strings.NewReader(`{"name":"h1","graceSeconds":`+grace+`}`))
		if code != http.StatusBadRequest || !strings.Contains(body, "grace_seconds") {
			t.Errorf("maintenance grace %s: %d %s, want 400 naming grace_seconds", grace, code, body)
		}
	}
	code, body = post("Deploy", strings.NewReader(fmt.Sprintf(`{"service":"web","bind":true,"cpu":"1","memoryBytes":"%d"}`, 1<<20)))
	if code != http.StatusOK || p.deploys != 1 {
		t.Errorf("a normal deploy: %d %s (deploys %d)", code, body, p.deploys)
	}
}
