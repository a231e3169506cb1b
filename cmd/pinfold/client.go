package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// DefaultPlanner is where the planner listens unless told otherwise.
const DefaultPlanner = "127.0.0.1:7878"

// clientFlags are the flags of every command that talks to a planner.
type clientFlags struct {
	addr            string
	tlsCA           string
	tlsCert, tlsKey string
	// requestID names the command's changes (--request-id; "": one is
	// made per invocation). See callLog.
	requestID string
	// cmd is the command the flags belong to: where notices go.
	cmd *cobra.Command
}

func (c *clientFlags) register(cmd *cobra.Command) {
	c.cmd = cmd
	cmd.Flags().StringVar(&c.addr, "planner", envOr("PINFOLD_PLANNER", DefaultPlanner), "planner address: an http:// or https:// URL, or host:port (https when --tls-ca or --tls-cert is given, else http; env PINFOLD_PLANNER)")
	cmd.Flags().StringVar(&c.tlsCA, "tls-ca", os.Getenv("PINFOLD_TLS_CA"), "CA certificate to verify an https:// planner (env PINFOLD_TLS_CA)")
	cmd.Flags().StringVar(&c.tlsCert, "tls-cert", os.Getenv("PINFOLD_TLS_CERT"), "client certificate for a planner that requires one, PEM (env PINFOLD_TLS_CERT; pinfold pki issue makes one)")
	cmd.Flags().StringVar(&c.tlsKey, "tls-key", os.Getenv("PINFOLD_TLS_KEY"), "private key of --tls-cert, PEM (env PINFOLD_TLS_KEY)")
	cmd.Flags().StringVar(&c.requestID, "request-id", "", "names this command's change, so that repeating the command with the same ID returns the first outcome and changes nothing (commands that only read ignore it; default: a new ID per run, printed when the outcome is unknown)")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func (c *clientFlags) client(opts ...connect.ClientOption) (pinfoldv1connect.PlannerServiceClient, error) {
	hc, err := c.httpClient()
	if err != nil {
		return nil, err
	}
	return pinfoldv1connect.NewPlannerServiceClient(hc, strings.TrimSuffix(c.baseURL(), "/"), opts...), nil
}

// baseURL is the planner's address as a URL. A bare host:port is https://
// when a CA or a client certificate is given (a TLS planner answers a
// plain request with "400 Bad Request", which told the user nothing), else
// http://.
func (c *clientFlags) baseURL() string {
	if strings.Contains(c.addr, "://") {
		return c.addr
	}
	if c.tlsCA != "" || c.tlsCert != "" {
		return "https://" + c.addr
	}
	return "http://" + c.addr
}

// httpClient is an HTTP client for the planner, with the TLS flags.
func (c *clientFlags) httpClient() (*http.Client, error) {
	base := c.baseURL()
	hc := &http.Client{Timeout: 5 * time.Minute}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, badInput("--tls-cert and --tls-key go together")
	}
	if u, err := url.Parse(base); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, badInput("--planner %q (or PINFOLD_PLANNER): want an http:// or https:// URL, or host:port", c.addr)
	}
	if strings.HasPrefix(base, "http://") {
		hc.Transport = plainTransport{http.DefaultTransport}
	}
	if strings.HasPrefix(base, "https://") {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.tlsCA != "" {
			pool, err := loadCA("--tls-ca", c.tlsCA)
			if err != nil {
				return nil, err
			}
			tc.RootCAs = pool
		}
		if c.tlsCert != "" {
			cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
			if err != nil {
				return nil, badInput("--tls-cert/--tls-key: %v", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		hc.Transport = &http.Transport{TLSClientConfig: tc}
	}
	return hc, nil
}

// errPlainToTLS is a plain HTTP request answered by a TLS planner: Go's
// TLS server answers it 400 without reading it, so nothing was changed.
var errPlainToTLS = errors.New("the planner speaks https (TLS), and this command sent plain http")

// plainTransport sends plain HTTP and turns a TLS server's answer to it
// into errPlainToTLS (the attack review of issue 38: it exited 4,
// "internal error of the planner: 400 Bad Request; the change may or may
// not have been made", where nothing could have been).
type plainTransport struct{ next http.RoundTripper }

func (t plainTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		return resp, err
	}
	const tlsAnswer = "Client sent an HTTP request to an HTTPS server."
	head := make([]byte, len(tlsAnswer))
	n, _ := io.ReadFull(resp.Body, head)
	if string(head[:n]) == tlsAnswer {
		resp.Body.Close()
		return nil, errPlainToTLS
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head[:n]), resp.Body), resp.Body}
	return resp, nil
}

// call connects to the planner and runs f, mapping the API errors it
// returns onto the CLI's exit codes (see apiError).
func (c *clientFlags) call(f func(cl pinfoldv1connect.PlannerServiceClient) error) error {
	id := c.requestID
	if id == "" {
		id = newRequestID()
	} else if err := service.ValidateRequestID(id); err != nil {
		return badInput("--request-id: %v", err)
	}
	l := &callLog{requestID: id, sleep: time.Sleep}
	if c.cmd != nil {
		l.notice = func(id string) {
			fmt.Fprintf(c.cmd.ErrOrStderr(), "pinfold: request %s was made before: this is its first outcome, and nothing changed now\n", id)
		}
	}
	cl, err := c.client(connect.WithInterceptors(l))
	if err != nil {
		return err
	}
	err = f(cl)
	if _, refused := certificateRefused(err); refused && c.tlsCert == "" {
		// The planner wants a client certificate and this command gave
		// none: say that, not every reason a certificate is refused.
		return &exitError{code: exitBadInput, err: errors.New("the planner requires a TLS client certificate and this command gave none: --tls-cert and --tls-key (or PINFOLD_TLS_CERT and PINFOLD_TLS_KEY), from pinfold pki issue ROLE NAME; nothing was changed")}
	}
	return apiError(err)
}

// newRequestID is a request ID no other run makes: "cli-" and 16 random
// hex digits.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "cli-" + hex.EncodeToString(b[:])
}

// recorded are the calls the planner answers once per request ID (a
// repeat returns the first outcome): safe to send again after a lost
// answer.
var recorded = map[string]bool{
	pinfoldv1connect.PlannerServiceDeployProcedure: true, pinfoldv1connect.PlannerServiceResizeProcedure: true,
	pinfoldv1connect.PlannerServiceReplaceProcedure: true, pinfoldv1connect.PlannerServiceRemoveProcedure: true,
}

// retryWaits are the pauses before sending a recorded call again after
// its answer was lost (the planner restarting, a connection cut): about
// 15 s in all.
var retryWaits = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}

// rateWaits are the pauses before sending again a call refused for its
// identity's rate: about a minute in all, the longest 2 s.
var rateWaits = func() []time.Duration {
	var out []time.Duration
	for d, total := 100*time.Millisecond, time.Duration(0); total < time.Minute; total += d {
		out = append(out, d)
		d = min(2*d, 2*time.Second)
	}
	return out
}()

// rateLimited reports whether err is the planner's refusal of a call over
// its identity's rate (--identity-rate): refused before it was read.
func rateLimited(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
		return false
	}
	// The whole refusal's shape (api.limitIdentities), not a word in it:
	// another refusal may quote a name holding any text.
	return rateRefusal.MatchString(ce.Message())
}

var rateRefusal = regexp.MustCompile(`^identity .+ called more than [0-9.e+]+ times a second: at most [0-9.e+]+ a second per identity after a burst of [0-9]+ \(--identity-rate, --identity-burst\); slow down$`)

// readOnly are the calls that change nothing in the planner.
var readOnly = map[string]bool{
	pinfoldv1connect.PlannerServiceListHostsProcedure: true, pinfoldv1connect.PlannerServiceGetHostProcedure: true,
	pinfoldv1connect.PlannerServiceGetPlacementSettingsProcedure: true, pinfoldv1connect.PlannerServiceHealthProcedure: true,
	pinfoldv1connect.PlannerServiceListInstancesProcedure: true, pinfoldv1connect.PlannerServiceCapacityProcedure: true,
	pinfoldv1connect.PlannerServiceExportPlanProcedure: true, pinfoldv1connect.PlannerServiceListEventsProcedure: true,
	pinfoldv1connect.PlannerServiceWatchInstancesProcedure: true, pinfoldv1connect.PlannerServiceGetServiceProcedure: true,
}

// changes reports whether a call may change the planner's state (a
// rebalance without apply is a dry run).
func changes(req connect.AnyRequest) bool {
	if r, ok := req.Any().(*pinfoldv1.RebalanceRequest); ok {
		return r.Apply
	}
	return !readOnly[req.Spec().Procedure]
}

// callLog follows one command's unary calls: whether a call that changes
// something has been accepted yet, and, for a call that fails, whether it
// was one that changes something. apiError reads it from the callError.
// Each call that changes something carries a request ID (requestID for
// the first, requestID.2, .3 … for later ones, so that the same command
// run again with --request-id names its calls the same way); a recorded
// call whose answer was lost is sent again with its ID (retryWaits).
type callLog struct {
	accepted  bool
	requestID string
	n         int
	sleep     func(time.Duration)
	// notice, when set, is told of a call the planner answered from the
	// record of an earlier one with the same request ID.
	notice func(id string)
}

// callError is a failed call, as callLog saw it.
type callError struct {
	err error
	// changes: the call may change the planner's state; afterChange: an
	// earlier call of the command changed it.
	changes, afterChange bool
	// reached: an attempt of the call got to the planner (its answer was
	// lost), whatever the last attempt found.
	reached bool
	// requestID is the failed call's request ID ("" for none), procedure
	// its method.
	requestID, procedure string
}

// lost reports whether err leaves a call's outcome unknown for want of an
// answer (no connection, a connection cut, a deadline).
func lost(err error) bool {
	c := connect.CodeOf(err)
	return c == connect.CodeUnavailable || c == connect.CodeDeadlineExceeded || cut(err)
}

// cut reports whether err is a connection the planner's side cut (reset,
// closed mid-answer: a planner killed while it commits), which the client
// library reports as canceled although no one canceled the call.
func cut(err error) bool {
	return connect.CodeOf(err) == connect.CodeCanceled && !errors.Is(err, context.Canceled)
}

func (e *callError) Error() string { return e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

func (l *callLog) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ch := changes(req)
		id := ""
		if ch && l.requestID != "" {
			l.n++
			id = l.requestID
			if l.n > 1 {
				id = fmt.Sprintf("%s.%d", l.requestID, l.n)
			}
			req.Header().Set(api.RequestIDHeader, id)
		}
		res, err := next(ctx, req)
		// reached: some attempt got to the planner, so the change may have
		// been made even when a later attempt finds no planner at all.
		reached := err != nil && !neverConnected(err)
		// Only a call that got to the planner is sent again: one that never
		// connected changed nothing, and says so at once (exit 3).
		for i := 0; err != nil && reached && id != "" && recorded[req.Spec().Procedure] && lost(err) && i < len(retryWaits) && ctx.Err() == nil; i++ {
			l.sleep(retryWaits[i])
			res, err = next(ctx, req)
			reached = reached || err != nil && !neverConnected(err)
		}
		// A call refused for its identity's rate was refused before it
		// was read: it changed nothing, whatever it is, and is sent again
		// once the rate allows (issue 36: apply -f of 2,300 services
		// failed on its own calls).
		for i := 0; err != nil && rateLimited(err) && i < len(rateWaits) && ctx.Err() == nil; i++ {
			l.sleep(rateWaits[i])
			res, err = next(ctx, req)
		}
		if err != nil {
			return res, &callError{err: err, changes: ch, afterChange: l.accepted, reached: reached, requestID: id, procedure: req.Spec().Procedure}
		}
		l.accepted = l.accepted || ch
		if res != nil && res.Header().Get(api.RepeatedHeader) == "true" && l.notice != nil {
			l.notice(id)
		}
		return res, nil
	}
}

func (l *callLog) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (l *callLog) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// checkOutcome is what a user does when the outcome of a change is unknown.
const checkOutcome = "check what happened with `pinfold ps` or `pinfold events`"

// apiError turns an API error into the CLI's exit codes (see main.go):
// invalid input and unknown or duplicate names are exit 2 (nothing was
// changed); a request the cluster cannot meet now (capacity, a failed
// precondition) is exit 1; no connection to the planner, or a failed read,
// is exit 3 (nothing was changed); an internal error of the planner, or a
// connection lost once a change was sent or made, is exit 4 (the outcome
// is unknown).
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	var call *callError
	changed, afterChange, reached, check := false, false, false, checkOutcome
	if errors.As(err, &call) {
		changed, afterChange, reached = call.changes, call.afterChange, call.reached
		if id := call.requestID; id != "" && recorded[call.procedure] {
			check = fmt.Sprintf("repeat the command with --request-id %s: it returns the first outcome if the change was made, and makes it once if not; or %s", id, checkOutcome)
		}
	}
	unknown := func(format string, args ...any) error {
		return &exitError{code: exitUnknown, err: fmt.Errorf(format+"; "+check, args...)}
	}
	msg := ce.Message()
	if errors.Is(err, errPlainToTLS) {
		return &exitError{code: exitBadInput, err: fmt.Errorf("%v: give the planner as https://HOST:PORT with --tls-ca (or a bare host:port with --tls-ca or --tls-cert); nothing was changed", errPlainToTLS)}
	}
	if alert, ok := certificateRefused(err); ok {
		return &exitError{code: exitBadInput, err: fmt.Errorf("the planner refused this command's TLS client certificate (%s): it is revoked, expired, issued by another CA, or none was given (--tls-cert and --tls-key, or PINFOLD_TLS_CERT and PINFOLD_TLS_KEY); nothing was changed", alert)}
	}
	if verify := (*tls.CertificateVerificationError)(nil); errors.As(err, &verify) {
		return &exitError{code: exitBadInput, err: fmt.Errorf("the planner's TLS certificate does not verify against --tls-ca (PINFOLD_TLS_CA): %v; give the CA that signed it (the ca.pem of the planner's pki directory); nothing was changed", verify.Err)}
	}
	switch ce.Code() {
	case connect.CodePermissionDenied:
		return &exitError{code: exitDenied, err: fmt.Errorf("permission denied: %s (the certificate's role does not allow it: an admin certificate does, pinfold pki issue admin NAME); nothing was changed", msg)}
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeAlreadyExists:
		return &exitError{code: exitBadInput, err: errors.New(msg)}
	case connect.CodeFailedPrecondition:
		return &exitError{code: exitUnmet, err: errors.New(msg)}
	case connect.CodeResourceExhausted:
		return &exitError{code: exitUnmet, err: fmt.Errorf("not placed: %s", msg)}
	case connect.CodeInternal, connect.CodeUnknown, connect.CodeDataLoss:
		switch {
		case afterChange:
			return unknown("the planner accepted the change, then failed (internal error of the planner): %s", msg)
		case changed:
			return unknown("internal error of the planner: %s; the change may or may not have been made", msg)
		}
		return &exitError{code: exitUnknown, err: fmt.Errorf("internal error of the planner: %s (this command only reads: nothing was changed; the planner's log says more)", msg)}
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled:
		if ce.Code() == connect.CodeCanceled && !cut(err) {
			if changed || afterChange {
				return unknown("interrupted after the request was sent: %s; the change may or may not have been made", msg)
			}
			break
		}
		connected := reached || !neverConnected(err)
		switch {
		case afterChange:
			return unknown("the planner accepted the change, then the connection to the planner was lost: %s", msg)
		case changed && connected:
			return unknown("the connection to the planner was lost after the request was sent: %s; the change may or may not have been made", msg)
		case connected:
			return &exitError{code: exitUnreachable, err: fmt.Errorf("planner unreachable: the connection to the planner was lost: %s; nothing was changed (this call only reads)", msg)}
		}
		return &exitError{code: exitUnreachable, err: fmt.Errorf("planner unreachable (is `pinfold planner` running?): %s; nothing was changed", msg)}
	}
	return &exitError{code: exitUnmet, err: fmt.Errorf("%s: %s", ce.Code(), msg)}
}

// certificateRefused reports whether err is the planner's TLS alert that
// it refused the client's certificate (bad, revoked, expired, of an
// unknown CA, or none sent: "remote error: tls: bad certificate"): the
// handshake failed, so the request was never read. It returns the alert.
func certificateRefused(err error) (string, bool) {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
		return "", false
	}
	alert := op.Err.Error() // crypto/tls's alert type is not exported
	return alert, strings.HasPrefix(alert, "tls: ") && strings.Contains(alert, "certificate")
}

// neverConnected reports whether err shows that no request reached the
// planner: the connection, its name lookup or its TLS handshake failed.
func neverConnected(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect") {
		return true
	}
	var (
		dns    *net.DNSError
		verify *tls.CertificateVerificationError
		alert  tls.AlertError
		record tls.RecordHeaderError
	)
	return errors.As(err, &dns) || errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &record)
}

// parseSize reads a byte size: a plain number is bytes; K, M, G, T (and
// KB, MB, GB, TB) are powers of 1000; Ki, Mi, Gi, Ti (and KiB, MiB, GiB,
// TiB) are powers of 1024. Decimals are allowed ("1.5GiB"). With signed,
// a leading + or - is allowed (for deltas).
func parseSize(flag, s string, signed bool) (int64, error) {
	in := strings.TrimSpace(s)
	sign := int64(1)
	if signed && (strings.HasPrefix(in, "+") || strings.HasPrefix(in, "-")) {
		if in[0] == '-' {
			sign = -1
		}
		in = in[1:]
	}
	n, err := alloc.ParseBytes(in)
	switch {
	case errors.Is(err, alloc.ErrSizeTooLarge):
		return 0, badInput("%s %q: not a size pinfold can hold", flag, s)
	case err != nil:
		return 0, badInput("%s %q: want a size such as 512MiB, 1.5GiB or 1G (K/M/G/T = 1000s, Ki/Mi/Gi/Ti = 1024s)", flag, s)
	}
	return sign * n, nil
}

// parseCPUAndMemory parses an instance size: --cpu and --memory.
func parseCPUAndMemory(cpu, memory string) (string, int64, error) {
	c, err := parseCPU("--cpu", cpu, false)
	if err != nil {
		return "", 0, err
	}
	m, err := parseSize("--memory", memory, false)
	return c, m, err
}

// parseCPU checks a decimal CPU amount ("1.7"; signed: "+0.5", "-0.3")
// before it is sent; the planner converts it to pieces (an amount off
// their grid, 0.505 at 1/100, it refuses with the nearest). A signed amount
// keeps its sign, so that the planner's errors show it as it was written.
func parseCPU(flag, s string, signed bool) (string, error) {
	t := strings.TrimSpace(s)
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || !alloc.IsDecimal(t) || (!signed && f < 0) || (!signed && strings.HasPrefix(t, "+")) {
		what := "a number of CPUs such as 1.7"
		if signed {
			what = "a signed number of CPUs such as +0.7 or -0.5"
		}
		return "", badInput("%s %q: want %s", flag, s, what)
	}
	if math.Abs(f) > alloc.MaxCPUs {
		return "", badInput("%s %q: want a number of CPUs from 0 to %d", flag, s, int(alloc.MaxCPUs))
	}
	return t, nil
}

// progressDelay is how long a request runs before its progress line is
// printed: the planner's refusals of bad input come back at once, so they
// are not preceded by a "placing …" line as if the work had begun.
var progressDelay = 300 * time.Millisecond

// slowProgress prints a progress line once a request has run for a while.
type slowProgress struct {
	timer *time.Timer
	done  chan struct{}
}

func startProgress(w io.Writer, after time.Duration, format string, args ...any) *slowProgress {
	p := &slowProgress{done: make(chan struct{})}
	p.timer = time.AfterFunc(after, func() {
		defer close(p.done)
		fmt.Fprintf(w, format, args...)
	})
	return p
}

// stop keeps the line from being printed, or waits until it is, so that
// nothing printed after stop comes before it. A nil progress does nothing.
func (p *slowProgress) stop() {
	if p != nil && !p.timer.Stop() {
		<-p.done
	}
}

// checkInstanceSize refuses, before anything is sent or printed, a size
// the planner would refuse whatever its settings: a bound instance of no
// CPU, memory below the Docker engine's smallest limit, a soft limit
// above the hard one. (A CPU amount below one piece depends on the
// planner's share base, so the planner checks it.)
func checkInstanceSize(cpu string, bind bool, memory, soft int64, memoryFlag string) error {
	if f, _ := strconv.ParseFloat(cpu, 64); bind && f == 0 {
		return badInput("--cpu %q: a CPU-bound instance (--bind) needs more than 0 CPUs; leave --bind out for a memory-first instance", cpu)
	}
	if memory < service.MinInstanceMemory {
		return badInput("--memory %q: want at least %s (the Docker engine's smallest memory limit)", memoryFlag, alloc.FormatBytes(service.MinInstanceMemory))
	}
	if soft > memory {
		return badInput("--memory-soft %s: want at most --memory (%s)", alloc.FormatBytes(soft), alloc.FormatBytes(memory))
	}
	return nil
}

// needSign refuses a resize amount without a sign: resize changes by
// deltas, and "--cpu 1" read as "+1" surprised those who meant a size.
func needSign(flag, s string) error {
	t := strings.TrimSpace(s)
	if t == "" || t[0] == '+' || t[0] == '-' {
		return nil
	}
	if f, err := strconv.ParseFloat(strings.TrimRight(t, "KMGTiB"), 64); err == nil && f == 0 {
		return badInput("%s %q: changes nothing; give a change such as +1 or -1, or leave %s out", flag, s, flag)
	}
	return badInput("%s %q: ambiguous: resize takes a change, not a size; write +%s to add or -%s to take away", flag, s, t, t)
}

// parseCPUDelta reads resize's --cpu: a signed change ("+0.7", "-0.5")
// that is not zero. One that is below a piece of a CPU (1/share base) the
// planner refuses, since only it knows the share base.
func parseCPUDelta(s string) (string, error) {
	if err := needSign("--cpu", s); err != nil {
		return "", err
	}
	t, err := parseCPU("--cpu", s, true)
	if err != nil {
		return "", err
	}
	if f, _ := strconv.ParseFloat(t, 64); f == 0 {
		return "", badInput("--cpu %q: changes nothing; give a change such as +0.5 or -0.5, or leave --cpu out", s)
	}
	return t, nil
}

// parseMemoryDelta reads resize's --memory: a signed change of at least
// a byte ("+64MiB", "-1GiB").
func parseMemoryDelta(s string) (int64, error) {
	if err := needSign("--memory", s); err != nil {
		return 0, err
	}
	d, err := parseSize("--memory", s, true)
	if err != nil {
		return 0, err
	}
	if d == 0 {
		return 0, badInput("--memory %q: changes nothing: it comes to 0 bytes (the smallest step is 1 byte); give a change such as +64MiB, or leave --memory out", s)
	}
	return d, nil
}

// loadCA reads the PEM certificates in path (given as flag) into a pool.
func loadCA(flag, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, badInput("%s %q: no readable PEM certificate: %v", flag, path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, badInput("%s %q: no readable PEM certificate in it", flag, path)
	}
	return pool, nil
}

// fileExists reports whether path names an existing file.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
