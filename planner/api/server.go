package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/agentlink"
	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/ui"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The API's handlers reach the planner through one small interface per
// role, so that what a handler can do follows who may call it: an agent's
// handlers see AgentCalls, a viewer's reads Reads, an admin's changes
// Changes (authorization itself is methodAccess's, in authz.go).

// AgentCalls is what an agent may call, for its own host.
type AgentCalls interface {
	RegisterHost(context.Context, service.RegisterHostRequest) (state.HostView, error)
	Heartbeat(ctx context.Context, host, version string, protocol int, ttl time.Duration, m *state.Metrics) error
	ReportStatus(ctx context.Context, host, id string, st model.Status) error
	WatchInstances(ctx context.Context, host string, send func(rev int64, h state.HostView, ins []state.InstanceView) error) error
}

// Reads is what a viewer may read (and an admin): the cluster as the
// planner's cache holds it, its parameters and its event log.
type Reads interface {
	Params() alloc.Params
	Leading() bool
	Rev() int64
	WaitRev(ctx context.Context, rev int64) error
	Events(ctx context.Context, q service.EventQuery) ([]state.Event, error)
	Capacity(service.DeployRequest) (map[string]placement.HostRoom, error)
	ExportPlan(send func(piece []byte) error) error
	Health(now time.Time) []service.Warning
	Hosts() []state.HostView
	HostsPage(pageSize int, token string) ([]state.HostView, string, error)
	Host(name string) (state.HostView, bool)
	Instances(host, service string) []state.InstanceView
	InstancesPage(host, service string, pageSize int, token string) ([]state.InstanceView, string, error)
	PlacementSettings() placement.Settings
	ServiceRecord(name string) (state.Service, int, bool)
	Priority(service string) model.Priority
	NeverPreempted(service string) bool
}

// Changes is what only an admin may change; Rebalance too, which a viewer
// may call as a dry run.
type Changes interface {
	SetHost(context.Context, service.SetHostRequest) (state.HostView, error)
	SetEnabled(ctx context.Context, name string, enabled bool) (state.HostView, error)
	SetMaintenance(ctx context.Context, name string, grace time.Duration) (state.HostView, error)
	RemoveHost(ctx context.Context, name string) ([]service.Moved, error)
	DrainHost(ctx context.Context, r service.DrainRequest, now time.Time) (state.HostView, error)
	Scale(ctx context.Context, svc string, count int) (service.ScaleResult, error)
	Rebalance(ctx context.Context, r service.RebalanceRequest) (service.RebalanceResult, error)
	SetPlacementSettings(context.Context, placement.Settings) (placement.Settings, error)
	DeployWithRules(context.Context, service.DeployRequest) (service.DeployResult, error)
	ResizePreempting(context.Context, service.ResizeRequest) ([]model.Instance, []service.Victim, error)
	Replace(context.Context, service.ReplaceRequest) ([]model.Instance, error)
	Remove(ctx context.Context, target string) ([]string, error)
}

// Recorder is what the API records of every call: events, refused calls,
// recovered panics.
type Recorder interface {
	Record(ev state.Event)
	RecordFailed(ev state.Event, request func() string, method string, sample bool)
	// RecordUnchanged records a call that succeeded and changed nothing,
	// sampled per identity with sample.
	RecordUnchanged(ev state.Event, method string, sample bool)
	RefusedCalls() (map[service.RefusalKey]int64, int64)
	// EventsDropped counts the events never written: the queue full, or
	// every write of them failed.
	EventsDropped() int64
	Panicked(where string, v any) error
	Panics() int64
}

// Planner is what the API serves: the planner service's requests and
// reads, every role's.
type Planner interface {
	AgentCalls
	Reads
	Changes
	Recorder
}

var _ Planner = (*service.Service)(nil)

// Server implements the PlannerService over a Planner, each handler
// through its role's interface.
type Server struct {
	agents  AgentCalls
	reads   Reads
	changes Changes
	// watches bounds the WatchInstances streams per host (nil: none).
	watches *streamLimits
}

var _ pinfoldv1connect.PlannerServiceHandler = (*Server)(nil)

// newServer serves svc; watches bounds the WatchInstances streams (nil:
// none).
func newServer(svc Planner, watches *streamLimits) *Server {
	return &Server{agents: svc, reads: svc, changes: svc, watches: watches}
}

// Handler returns the HTTP handler serving the API (gRPC, gRPC-Web and
// Connect JSON/proto) plus gRPC reflection.
//
// No request may make the planner hold more than o.MaxRequestBytes of it:
// the body is cut there and the call refused with ResourceExhausted before
// it is decoded. JSON requests with unknown fields are refused
// (InvalidArgument) rather than half-read. With o.Authorize every call
// needs a verified client certificate naming an identity that may make it;
// a call the identity's role may never make is refused before its body is
// read (precheck).
func Handler(svc Planner, o Options) http.Handler {
	maxBytes := o.MaxRequestBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxRequestBytes
	}
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(maxBytes), connect.WithCodec(strictJSON{}), compressLarge(), boundedGzip(maxBytes)}
	// Metrics and the event log wrap the authorizer: a call it refuses is
	// counted and recorded too, with its identity.
	if o.Metrics != nil {
		opts = append(opts, connect.WithInterceptors(o.Metrics.interceptor()))
	}
	opts = append(opts, connect.WithInterceptors(requestIDs{}, eventRecorder{svc}))
	if o.Authorize {
		opts = append(opts, connect.WithInterceptors(authorizer{}))
	}
	// Answers to anyone who may not read secrets (a viewer; a TLS caller
	// without a valid role), on every method, without them (redact.go):
	// the one place they are hidden.
	opts = append(opts, connect.WithInterceptors(redactor{}))
	// Past the authorizer, every field is checked against its bound
	// (requestBounds) before a handler sees the request.
	opts = append(opts, connect.WithInterceptors(bounds{}))
	// Innermost: a panic in a handler or stream is that call's internal
	// error (logged with its stack, an event, a metric), counted and
	// recorded by the interceptors above like any other outcome.
	opts = append(opts, connect.WithRecover(func(_ context.Context, spec connect.Spec, _ http.Header, v any) error {
		return connect.NewError(connect.CodeInternal, svc.Panicked(spec.Procedure, v))
	}))
	guard := func(h http.Handler) http.Handler { return h }
	if o.Authorize {
		guard = readers
	}
	mux := http.NewServeMux()
	if o.Metrics != nil {
		mux.Handle("/metrics", guard(promhttp.HandlerFor(o.Metrics.Registry, promhttp.HandlerOpts{})))
	}
	watches, views := newStreamLimits(MaxWatchesPerHost), newStreamLimits(MaxViewsPerIdentity)
	mux.Handle("/ui/", guard(viewsPerIdentity(ui.Handler("/ui/", svc), "/ui/events", views)))
	srv := newServer(svc, watches)
	path, api := pinfoldv1connect.NewPlannerServiceHandler(srv, opts...)
	// The agents' links (package agentlink): heartbeats and the watch on
	// one connection, served without net/http's goroutines and buffers.
	links := newLinks(srv, o.Authorize, svc.Panicked, o.Metrics)
	mux.Handle(agentlink.Path, links)
	if o.Metrics != nil {
		o.Metrics.streams.Store(&streamSet{watch: watches, view: views, links: links})
	}
	rec := unreadRecorder{metrics: o.Metrics, events: eventRecorder{svc}}
	if o.Authorize {
		// A call its caller may never make is refused before its body
		// is read, counted and recorded like one the authorizer refuses.
		api = precheck(api, rec)
	}
	mux.Handle(path, api)
	r := grpcreflect.NewStaticReflector(pinfoldv1connect.PlannerServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(r))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(r))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	// Past the message limit, the HTTP body itself is cut (framing, and
	// handlers that are not the API's); a body that declares itself larger
	// is refused before a byte of it is read.
	limit := int64(maxBytes) + 64<<10
	// A body is read within o.Timeouts.Body of its headers, or its
	// connection is dropped (NewHTTPServer bounds headers and idleness).
	// Each identity with a client certificate holds at most
	// o.Limits.ConnsPerIdentity connections and calls at its rate; past
	// them a request is refused before it is read (limitIdentities).
	lim := newIdentityLimits(o.Limits, limit, time.Now)
	lim.messageMax = int64(maxBytes)
	if o.Metrics != nil {
		o.Metrics.limits.Store(lim)
	}
	return limitedHandler{Handler: bodyDeadline(refuseDeclaredLarge(http.MaxBytesHandler(identify(limitIdentities(mux, lim, rec)), limit), limit), o.Timeouts.orDefaults().Body), lim: lim, links: links}
}

// limitedHandler is Handler's answer: the handler and its per-identity
// bounds, which NewHTTPServer's connections take at their TLS handshake
// (AdmitHandshake).
type limitedHandler struct {
	http.Handler
	lim   *identityLimits
	links *links
}

// refuseDeclaredLarge answers a request whose Content-Length is over limit
// with 413 and a Connect error, without reading its body, and closes the
// connection.
func refuseDeclaredLarge(next http.Handler, limit int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			fmt.Fprintf(w, `{"code":"resource_exhausted","message":"request body of %d bytes is larger than the planner's limit of %d (--max-request-bytes)"}`+"\n", r.ContentLength, limit)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Options configure the API handler.
type Options struct {
	MaxRequestBytes int  // 0: DefaultMaxRequestBytes
	Authorize       bool // check every call against the client certificate's identity
	// Metrics, when set, counts every call and serves /metrics.
	Metrics *Metrics
	// Timeouts bound reading a request (Body here; Header and Idle are
	// NewHTTPServer's).
	Timeouts Timeouts
	// Limits bound each identity's connections (counted on servers made
	// by NewHTTPServer) and calls.
	Limits Limits
}

// DefaultMaxRequestBytes bounds one API request.
const DefaultMaxRequestBytes = 4 << 20

// strictJSON is Connect's JSON codec without its leniency: an unknown
// field is an error naming it, not silently dropped.
type strictJSON struct{}

func (strictJSON) Name() string { return "json" }

func (strictJSON) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("api: %T is not a protobuf message", m)
	}
	return protojson.Marshal(pm)
}

func (strictJSON) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("api: %T is not a protobuf message", m)
	}
	if len(b) == 0 {
		return nil
	}
	return protojson.UnmarshalOptions{DiscardUnknown: false}.Unmarshal(b, pm)
}

// toConnect maps service errors onto gRPC codes.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	codes := map[service.Code]connect.Code{
		service.Invalid: connect.CodeInvalidArgument, service.NotFound: connect.CodeNotFound,
		service.Exists: connect.CodeAlreadyExists, service.Precond: connect.CodeFailedPrecondition,
		service.Exhausted: connect.CodeResourceExhausted, service.Conflicted: connect.CodeAborted,
	}
	if c, ok := codes[service.CodeOf(err)]; ok {
		ce := connect.NewError(c, errors.New(err.Error()))
		var se *service.Error
		if errors.As(err, &se) && len(se.Eliminations) > 0 {
			pf := &pinfoldv1.PlacementFailure{}
			for _, e := range se.Eliminations {
				pf.Eliminations = append(pf.Eliminations, &pinfoldv1.Elimination{Rule: e.Rule, Hosts: e.Hosts})
			}
			if d, derr := connect.NewErrorDetail(pf); derr == nil {
				ce.AddDetail(d)
			}
		}
		return ce
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

// pieces parses a decimal CPU amount ("1.7", "-0.3") into pieces.
func pieces(field, s string, shareBase int, allowNegative bool) (int, error) {
	if strings.TrimSpace(s) == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !alloc.IsDecimal(strings.TrimSpace(s)) {
		return 0, invalid("%s = %q: not a decimal number of CPUs", field, s)
	}
	toPieces := alloc.PiecesOf
	if allowNegative {
		toPieces = alloc.DeltaPiecesOf
	} else if f < 0 {
		return 0, invalid("%s = %q: must not be negative", field, s)
	}
	p, err := toPieces(field, f, shareBase)
	if ae := (*alloc.Error)(nil); errors.As(err, &ae) {
		// As the user wrote it, once: PiecesOf's own message names the
		// parsed value (1e+09, 0.505).
		return 0, invalid("%s = %q: %s", field, s, ae.Reason())
	} else if err != nil {
		return 0, err
	}
	return p, nil
}

// requestPieces is a deploy's or capacity's CPU amount in pieces: a bound
// instance needs at least one (an amount below one piece, pieces refuses
// as it was written: cpu = "0.0001").
func requestPieces(s string, shareBase int, bind bool) (int, error) {
	p, err := pieces("cpu", s, shareBase, false)
	if err == nil && bind && p == 0 {
		return 0, invalid("cpu = %q: is 0; a CPU-bound instance needs at least 1 piece (%s CPU, %d pieces per CPU)",
			s, alloc.FormatPieces(1, shareBase), shareBase)
	}
	return p, err
}

func (s *Server) sb() int { return s.reads.Params().ShareBase }

func (s *Server) Health(context.Context, *connect.Request[pinfoldv1.HealthRequest]) (*connect.Response[pinfoldv1.HealthResponse], error) {
	out := &pinfoldv1.HealthResponse{}
	for _, w := range s.reads.Health(time.Now()) {
		out.Warnings = append(out.Warnings, &pinfoldv1.HealthWarning{Kind: w.Kind, Subject: w.Subject, Detail: w.Detail})
	}
	return connect.NewResponse(out), nil
}

func (s *Server) ListEvents(ctx context.Context, r *connect.Request[pinfoldv1.ListEventsRequest]) (*connect.Response[pinfoldv1.ListEventsResponse], error) {
	if r.Msg.Limit < 0 {
		return nil, toConnect(&service.Error{Code: service.Invalid, Message: fmt.Sprintf("limit = %d: want 0 (the most, %d) or more", r.Msg.Limit, service.MaxEventsListed)})
	}
	evs, err := s.reads.Events(ctx, service.EventQuery{Service: r.Msg.Service, Host: r.Msg.Host, After: r.Msg.After, Limit: int(r.Msg.Limit), Latest: r.Msg.Latest})
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pinfoldv1.ListEventsResponse{}
	for _, ev := range evs {
		out.Events = append(out.Events, &pinfoldv1.Event{Id: ev.ID, Time: ev.Time.Format(time.RFC3339Nano), Identity: ev.Identity, Kind: ev.Kind,
			Subject: ev.Subject, Host: ev.Host, Service: ev.Service, Request: ev.Request, Outcome: ev.Outcome})
	}
	return connect.NewResponse(out), nil
}

// ExportPlan streams the plan file in pieces (service.ExportPlan).
func (s *Server) ExportPlan(ctx context.Context, _ *connect.Request[pinfoldv1.ExportPlanRequest], stream *connect.ServerStream[pinfoldv1.ExportPlanResponse]) error {
	err := s.reads.ExportPlan(func(piece []byte) error {
		return stream.Send(&pinfoldv1.ExportPlanResponse{PlanJson: piece})
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return toConnect(err)
}
