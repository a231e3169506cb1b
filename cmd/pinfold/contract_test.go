package main

import (
	"context"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// The CLI's contract with its users (issue 24): what --cpu and --memory of
// resize mean, that settings changes only what it names, and the exit
// codes the README promises.

const laptopTopology = "../../numa/testdata/want/laptop-i7-1185g7.json"

// TestResizeDeltas: resize takes signed deltas only; an unsigned amount is
// refused as ambiguous, and a delta that changes nothing (zero, or less
// than one piece of a CPU) is refused with the smallest step; nothing
// changes. A one-piece delta goes through.
func TestResizeDeltas(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "h1", "--topology", laptopTopology)
	pf.Must("deploy", "web", "--count", "1", "--cpu", "1", "--bind", "--memory", "256MiB", "--image", "i")
	before := pf.Must("ps", "-o", "json")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--cpu", "1"}, []string{`--cpu "1"`, "ambiguous", "+1", "-1"}},
		{[]string{"--cpu", "0.5"}, []string{`--cpu "0.5"`, "+0.5", "-0.5"}},
		{[]string{"--memory", "64MiB"}, []string{`--memory "64MiB"`, "ambiguous", "+64MiB", "-64MiB"}},
		{[]string{"--cpu", "+0"}, []string{`--cpu "+0"`, "changes nothing"}},
		{[]string{"--memory", "-0GiB"}, []string{`--memory "-0GiB"`, "changes nothing"}},
		{[]string{"--memory", "+0.4"}, []string{`--memory "+0.4"`, "changes nothing", "1 byte"}},
		{[]string{"--cpu", "+0.001"}, []string{`cpu_delta = "+0.001"`, "less than one piece", "0.01"}},
		{[]string{"--cpu", "-0.004", "--memory", "+1MiB"}, []string{`cpu_delta = "-0.004"`, "0.01"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, errOut, code := pf.Run(append([]string{"resize", "web", "--wait", "0"}, tc.args...)...)
			if code != exitBadInput {
				t.Errorf("exit %d, want %d: %s", code, exitBadInput, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
	if after := pf.Must("ps", "-o", "json"); after != before {
		t.Errorf("refused resizes changed the instances:\n%s\nwas\n%s", after, before)
	}
	var ins []instanceJSON
	if err := json.Unmarshal([]byte(pf.Must("resize", "web", "--cpu", "+0.01", "--wait", "0", "-o", "json")), &ins); err != nil || len(ins) != 1 || ins[0].CPUPlanned != "1.01" {
		t.Errorf("resize web --cpu +0.01 = %+v, %v; want 1.01 CPUs", ins, err)
	}
}

// settingsJSON is settings -o json.
type settingsJSON struct {
	Buffer      map[string]float64 `json:"buffer_percent"`
	Overbooking map[string]float64 `json:"overbooking_percent"`
	Priorities  map[string]int32   `json:"constraint_priorities"`
	DownGrace   int64              `json:"down_grace_seconds"`
}

// TestSettingsChangesOnlyWhatItNames: each settings call changes only the
// maps and keys it names; KEY= removes a key and --clear empties a map.
func TestSettingsChangesOnlyWhatItNames(t *testing.T) {
	pf := plannerCLI(t)
	get := func() settingsJSON {
		t.Helper()
		var s settingsJSON
		if err := json.Unmarshal([]byte(pf.Must("settings", "-o", "json")), &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	pf.Must("settings", "--buffer", "cpu=0.2", "--overbooking", "memory=0.3", "--down-grace", "2m")
	pf.Must("settings", "--priority", "UpgradeDomain=0")
	s := get()
	if s.Buffer["cpu"] != 0.2 || s.Overbooking["memory"] != 0.3 || s.Priorities["UpgradeDomain"] != 0 || len(s.Priorities) != 1 || s.DownGrace != 120 {
		t.Errorf("after --priority: %+v; want the buffer, the overbooking and the down grace kept", s)
	}
	pf.Must("settings", "--priority", "Affinity=1")
	s = get()
	if s.Buffer["cpu"] != 0.2 || len(s.Priorities) != 2 || s.Overbooking["memory"] != 0.3 {
		t.Errorf("after adding a priority: %+v; want it next to the others", s)
	}
	// memory has an overbooking: a buffer for it too is refused, and says how to remove one.
	if _, errOut, code := pf.Run("settings", "--buffer", "memory=0.1"); code != exitBadInput || !strings.Contains(errOut, "never both") || !strings.Contains(errOut, "--overbooking memory=") {
		t.Errorf("buffer and overbooking for memory: exit %d %s", code, errOut)
	}
	pf.Must("settings", "--priority", "UpgradeDomain=", "--overbooking", "memory=", "--buffer", "memory=0.1")
	s = get()
	if _, ok := s.Priorities["UpgradeDomain"]; ok || s.Priorities["Affinity"] != 1 || len(s.Overbooking) != 0 || len(s.Buffer) != 2 || s.Buffer["memory"] != 0.1 {
		t.Errorf("after removing two keys and adding one: %+v", s)
	}
	pf.Must("settings", "--clear", "buffer", "--buffer", "memory=0.05")
	s = get()
	if len(s.Buffer) != 1 || s.Buffer["memory"] != 0.05 || s.Priorities["Affinity"] != 1 || s.DownGrace != 120 {
		t.Errorf("after --clear buffer --buffer memory=0.05: %+v", s)
	}
	pf.Must("settings", "--clear", "buffer,priority")
	if s = get(); len(s.Buffer) != 0 || len(s.Priorities) != 0 {
		t.Errorf("after --clear buffer,priority: %+v", s)
	}
	pf.Must("settings", "--overbooking", "memory=25%")
	if s = get(); s.Overbooking["memory"] != 0.25 {
		t.Errorf("after --overbooking memory=25%%: %+v, want 0.25", s)
	}
	pf.Must("settings", "--overbooking", "memory=")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--clear", "everything"}, `--clear "everything": want buffer, overbooking or priority`},
		{[]string{"--buffer", "disk=0.1"}, `--buffer "disk=0.1": unknown resource "disk"`},
		{[]string{"--priority", "UpgradeDomain=x"}, `--priority "UpgradeDomain=x"`},
		{[]string{"--buffer", "cpu"}, `--buffer "cpu": want RES=FRACTION (0.2), RES=PERCENT (20%)`},
		// A new user's trial: memory=20 meant 20 % and set 2,000 %.
		{[]string{"--overbooking", "memory=20"}, "--overbooking memory=20: a fraction (0.2 = 20%): write memory=20% if 20 % is meant"},
	} {
		if _, errOut, code := pf.Run(append([]string{"settings"}, tc.args...)...); code != exitBadInput || !strings.Contains(errOut, tc.want) {
			t.Errorf("settings %v: exit %d %q; want exit 2 with %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestUnknownSubcommand: an unknown subcommand of any command group is an
// error naming it (exit 2), not the group's help with exit 0.
func TestUnknownSubcommand(t *testing.T) {
	t.Parallel()
	var groups [][]string
	helpOnly := map[string]bool{} // groups that do nothing but hold commands
	var walk func(prefix []string, c *cobra.Command)
	walk = func(prefix []string, c *cobra.Command) {
		for _, sub := range c.Commands() {
			if !sub.HasSubCommands() {
				continue
			}
			p := append(append([]string{}, prefix...), sub.Name())
			groups = append(groups, p)
			helpOnly[strings.Join(p, " ")] = !sub.Runnable()
			walk(p, sub)
		}
	}
	root := newRootCmd()
	root.InitDefaultCompletionCmd()
	walk(nil, root)
	groups = append(groups, nil) // the root itself
	if len(groups) < 4 {
		t.Fatalf("only the groups %v", groups)
	}
	for _, g := range groups {
		args := append(append([]string{}, g...), "lst")
		out, errOut, code := runCLI(t, "", args...)
		if code != exitBadInput || !strings.Contains(errOut, `unknown command "lst"`) || out != "" {
			t.Errorf("pinfold %v: exit %d, stdout %q, stderr %q; want exit 2 naming the unknown command", args, code, out, errOut)
		}
		// A group alone still shows its help.
		if !helpOnly[strings.Join(g, " ")] {
			continue
		}
		if out, errOut, code := runCLI(t, "", g...); code != 0 || !strings.Contains(out, "Available Commands:") {
			t.Errorf("pinfold %v: exit %d, %s %s; want its help", g, code, out, errOut)
		}
	}
}

// TestHostRemoveUnmet: a host whose instances fit nowhere else is not
// removed, and that is a request that cannot be met (exit 1), not bad input.
func TestHostRemoveUnmet(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "h1", "--topology", laptopTopology)
	pf.Must("deploy", "web", "--count", "1", "--cpu", "1", "--bind", "--memory", "256MiB", "--image", "i")
	if _, errOut, code := pf.Run("host", "remove", "h1"); code != exitUnmet || !strings.Contains(errOut, "cannot be placed on another host") {
		t.Errorf("host remove h1: exit %d %s; want exit 1", code, errOut)
	}
	if out := pf.Must("host", "list"); !strings.Contains(out, "h1") {
		t.Errorf("h1 was removed:\n%s", out)
	}
}

// failingPlanner answers like a planner that fails: internal errors and
// handler panics (the connection is cut after the request arrived).
type failingPlanner struct {
	pinfoldv1connect.UnimplementedPlannerServiceHandler
}

func (failingPlanner) Deploy(context.Context, *connect.Request[pinfoldv1.DeployRequest]) (*connect.Response[pinfoldv1.DeployResponse], error) {
	return nil, connect.NewError(connect.CodeInternal, errors.New("store write failed: disk full"))
}

func (failingPlanner) ListInstances(context.Context, *connect.Request[pinfoldv1.ListInstancesRequest]) (*connect.Response[pinfoldv1.ListInstancesResponse], error) {
	return nil, connect.NewError(connect.CodeInternal, errors.New("cache broken"))
}

func (failingPlanner) RemoveHost(context.Context, *connect.Request[pinfoldv1.RemoveHostRequest]) (*connect.Response[pinfoldv1.RemoveHostResponse], error) {
	panic(http.ErrAbortHandler)
}

func (failingPlanner) ListHosts(context.Context, *connect.Request[pinfoldv1.ListHostsRequest]) (*connect.Response[pinfoldv1.ListHostsResponse], error) {
	panic(http.ErrAbortHandler)
}

func (failingPlanner) Resize(context.Context, *connect.Request[pinfoldv1.ResizeRequest]) (*connect.Response[pinfoldv1.ResizeResponse], error) {
	return connect.NewResponse(&pinfoldv1.ResizeResponse{Instances: []*pinfoldv1.Instance{{Id: "web-1", Service: "web", Host: "h1", Generation: 2, ShareBase: 100}}}), nil
}

// TestExitCodesOfFailures: exit 3 only when the planner certainly changed
// nothing (no connection, or a read that failed); exit 4 when it may have:
// an internal error of the planner, or a connection lost after a change
// was sent or made.
func TestExitCodesOfFailures(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.Handle(pinfoldv1connect.NewPlannerServiceHandler(failingPlanner{}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"deploy", "web", "--image", "i", "--memory", "1GiB"}, exitUnknown,
			[]string{"internal error of the planner", "disk full", "pinfold ps", "pinfold events"}},
		{[]string{"ps"}, exitUnknown, []string{"internal error of the planner", "cache broken"}},
		{[]string{"host", "remove", "h1"}, exitUnknown, []string{"connection to the planner was lost", "pinfold events"}},
		{[]string{"resize", "web", "--cpu", "+1"}, exitUnknown, []string{"the planner accepted", "connection to the planner was lost"}},
		{[]string{"host", "list"}, exitUnreachable, []string{"planner unreachable", "nothing was changed"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			_, errOut, code := runCLI(t, "", append(tc.args, "--planner", srv.URL)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d: %s", code, tc.code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
	if _, errOut, code := runCLI(t, "", "deploy", "web", "--image", "i", "--memory", "1GiB", "--planner", freeAddr(t)); code != exitUnreachable || !strings.Contains(errOut, "nothing was changed") {
		t.Errorf("deploy to no planner: exit %d %s; want 3", code, errOut)
	}
}

// TestRootHelpListsExitCodes: the root --help and the README's table
// document every exit code main.go declares (an exit* constant; a new one
// without a line in both fails here), and nothing else. Guard: at least
// the six codes 0..5.
func TestRootHelpListsExitCodes(t *testing.T) {
	t.Parallel()
	codes := declaredExitCodes(t)
	if len(codes) < 6 {
		t.Fatalf("found %d exit* constants in main.go, want at least 6: %v", len(codes), codes)
	}
	out, _, _ := runCLI(t, "", "--help")
	i := strings.Index(out, "Exit codes")
	if i < 0 {
		t.Fatalf("root --help has no exit codes:\n%s", out)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	helpCodes := regexp.MustCompile(`(?m)^  (\d+) `).FindAllStringSubmatch(out[i:], -1)
	tableCodes := regexp.MustCompile(`(?m)^\| (\d+) \| `).FindAllStringSubmatch(string(readme), -1)
	for name, found := range map[string][][]string{"root --help": helpCodes, "README's exit code table": tableCodes} {
		var got []string
		for _, m := range found {
			got = append(got, m[1])
		}
		if !slices.Equal(got, codes) {
			t.Errorf("%s lists codes %v, main.go declares %v", name, got, codes)
		}
	}
	if !strings.Contains(out[i:], "pinfold events") {
		t.Errorf("root --help's exit codes do not say how to check an unknown outcome:\n%s", out[i:])
	}
}

// declaredExitCodes is the values of main.go's exit* constants, in order.
func declaredExitCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for k, n := range vs.Names {
				if lit, ok := vs.Values[k].(*ast.BasicLit); ok && strings.HasPrefix(n.Name, "exit") && lit.Kind == token.INT {
					codes = append(codes, lit.Value)
				}
			}
		}
	}
	return codes
}

// TestMachineReadableOutput: commands that print something take -o json
// (the README's promise), and settings' maps are objects even when empty.
func TestMachineReadableOutput(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "h1", "--topology", laptopTopology)
	var h hostJSON
	if err := json.Unmarshal([]byte(pf.Must("host", "disable", "h1", "-o", "json")), &h); err != nil || h.Name != "h1" || h.State != "disabled" {
		t.Errorf("host disable -o json: %+v, %v", h, err)
	}
	if out := pf.Must("host", "enable", "h1", "-o", "yaml"); !strings.Contains(out, "name: h1") || !strings.Contains(out, "state: up") {
		t.Errorf("host enable -o yaml:\n%s", out)
	}
	var s map[string]json.RawMessage
	if err := json.Unmarshal([]byte(pf.Must("settings", "-o", "json")), &s); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"buffer_percent", "overbooking_percent", "constraint_priorities"} {
		if string(s[k]) != "{}" {
			t.Errorf("settings -o json: %s = %s, want {}", k, s[k])
		}
	}
}

// vanishingPlanner cuts the connection of the first Remove it gets and
// stops listening, as a planner killed while it commits: the CLI's
// retries with the request ID then find no planner at all.
type vanishingPlanner struct {
	pinfoldv1connect.UnimplementedPlannerServiceHandler
	srv *httptest.Server
}

func (p vanishingPlanner) Remove(context.Context, *connect.Request[pinfoldv1.RemoveRequest]) (*connect.Response[pinfoldv1.RemoveResponse], error) {
	p.srv.Listener.Close()
	panic(http.ErrAbortHandler)
}

// TestLostAnswerThenNoPlanner: a change whose connection was cut after it
// was sent, retried with its request ID against a planner that is gone,
// is an unknown outcome (exit 4) naming the ID to repeat it with — not
// exit 3 "nothing was changed" from the last retry's refused connection
// (a new user's deploy had committed 3,000 instances, and the retry that
// exit 3 invited made 6,000).
func TestLostAnswerThenNoPlanner(t *testing.T) {
	waits := retryWaits
	retryWaits = []time.Duration{time.Millisecond, time.Millisecond}
	t.Cleanup(func() { retryWaits = waits })
	mux := http.NewServeMux()
	srv := httptest.NewUnstartedServer(mux)
	mux.Handle(pinfoldv1connect.NewPlannerServiceHandler(vanishingPlanner{srv: srv}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	_, errOut, code := runCLI(t, "", "remove", "web", "--request-id", "rm-web-1", "--planner", srv.URL)
	if code != exitUnknown || !strings.Contains(errOut, "--request-id rm-web-1") {
		t.Errorf("exit %d: %s\nwant 4 naming --request-id rm-web-1", code, errOut)
	}
}

// resetOnce resets (TCP RST) the connection of the first Remove it gets,
// after reading the request, as a planner killed with kill -9 while it
// commits; the next attempts reach next.
type resetOnce struct {
	next  http.Handler
	mu    sync.Mutex
	calls int
}

func (h *resetOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/Remove") {
		h.mu.Lock()
		h.calls++
		first := h.calls == 1
		h.mu.Unlock()
		if first {
			_, _ = io.Copy(io.Discard, r.Body)
			c, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				panic(err)
			}
			_ = c.(*net.TCPConn).SetLinger(0) // close sends RST: "connection reset by peer"
			_ = c.Close()
			return
		}
	}
	h.next.ServeHTTP(w, r)
}

// countingPlanner answers every Remove.
type countingPlanner struct {
	pinfoldv1connect.UnimplementedPlannerServiceHandler
}

func (countingPlanner) Remove(context.Context, *connect.Request[pinfoldv1.RemoveRequest]) (*connect.Response[pinfoldv1.RemoveResponse], error) {
	return connect.NewResponse(&pinfoldv1.RemoveResponse{}), nil
}

// TestResetAnswerIsRetried: a change whose connection was reset after it
// was sent (the planner killed with kill -9 mid-commit: "connection reset
// by peer", which the client library reports as canceled) is sent again
// with its request ID, as for any lost answer, and succeeds once the
// planner answers — not given up at once as if the user had interrupted
// it (a new user's deploy exited 4 after 0.15 s).
func TestResetAnswerIsRetried(t *testing.T) {
	waits := retryWaits
	retryWaits = []time.Duration{time.Millisecond, time.Millisecond}
	t.Cleanup(func() { retryWaits = waits })
	mux := http.NewServeMux()
	mux.Handle(pinfoldv1connect.NewPlannerServiceHandler(countingPlanner{}))
	h := &resetOnce{next: mux}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	_, errOut, code := runCLI(t, "", "remove", "web", "--request-id", "rm-web-2", "--planner", srv.URL)
	if code != 0 {
		t.Errorf("exit %d: %s\nwant 0: the reset call sent again with its ID", code, errOut)
	}
	if h.calls != 2 {
		t.Errorf("the planner got %d Remove calls, want 2 (the reset one and its retry)", h.calls)
	}
}

// TestCapacityRefusesWhatDeployRefuses: capacity counts no room for a
// size a deploy refuses (a new user got "total 7600" for 4 MiB instances,
// then a refused deploy); both refuse it the same way, exit 2.
func TestCapacityRefusesWhatDeployRefuses(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "h1", "--topology", laptopTopology)
	for _, cmd := range [][]string{
		{"capacity", "--cpu", "0.01", "--bind", "--memory", "4MiB"},
		{"deploy", "tiny", "--count", "1", "--cpu", "0.01", "--bind", "--memory", "4MiB", "--image", "i"},
	} {
		out, errOut, code := pf.Run(cmd...)
		if code != exitBadInput || !strings.Contains(errOut, "6 MiB") {
			t.Errorf("pinfold %v: exit %d, stdout %q, stderr %q; want exit 2 naming the smallest memory", cmd, code, out, errOut)
		}
	}
}

// TestOneLine: a multi-line outcome (a refusal's elimination report) is one
// cell of the events table, not lines that break its columns.
func TestOneLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"ok", "ok"},
		{"not placed: no host has room\n  NodeCapacity 2 eliminated: a, b\n  Affinity 0 eliminated: -\n (parked)", "not placed: no host has room | NodeCapacity 2 eliminated: a, b | Affinity 0 eliminated: - | (parked)"},
	} {
		if got := oneLine(tc.in); got != tc.want {
			t.Errorf("oneLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestPlannerAddressMistakes (the attack review of issue 38): a
// --planner that names no http or https planner, and plain http to a
// planner that speaks TLS, are the caller's configuration: exit 2,
// saying nothing was changed (they exited 4, "the change may or may not
// have been made", and 3).
func TestPlannerAddressMistakes(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.Handle(pinfoldv1connect.NewPlannerServiceHandler(failingPlanner{}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	plain := "http://" + strings.TrimPrefix(srv.URL, "https://")
	for _, tc := range []struct {
		planner string
		args    []string
		want    string
	}{
		{"ftp://127.0.0.1:1", []string{"deploy", "web", "--image", "i", "--memory", "1GiB"}, `--planner "ftp://127.0.0.1:1"`},
		{"ftp://x", []string{"ps"}, "want an http:// or https:// URL"},
		{"http://", []string{"ps"}, "want an http:// or https:// URL"},
		{plain, []string{"deploy", "web", "--image", "i", "--memory", "1GiB"}, "the planner speaks https"},
		{plain, []string{"ps"}, "the planner speaks https"},
	} {
		t.Run(tc.planner+" "+tc.args[0], func(t *testing.T) {
			t.Parallel()
			_, errOut, code := runCLI(t, "", append(tc.args, "--planner", tc.planner)...)
			if code != exitBadInput || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "nothing was changed") && !strings.Contains(errOut, "--planner") {
				t.Errorf("exit %d, stderr %q; want exit %d saying %q and that nothing was changed", code, errOut, exitBadInput, tc.want)
			}
		})
	}
}
