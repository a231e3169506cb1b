package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/agentlink"
	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/balance"
	"github.com/pinfold/pinfold/planner/clip"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology"
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
	Events(ctx context.Context, service, host, after string, limit int) ([]state.Event, error)
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
	Resize(context.Context, service.ResizeRequest) ([]model.Instance, error)
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

func hostMsg(v state.HostView, shareBase int) *pinfoldv1.Host {
	h := &pinfoldv1.Host{Name: v.Host.Name, State: v.State(),
		CapacityCpus: map[int32]int32{}, CapacityMemoryBytes: v.Host.MemoryBytes,
		UsedCpus: map[int32]int32{}, UsedMemoryBytes: v.Alloc.MemoryUsed,
		Agent: v.Host.Agent, AgentVersion: v.Host.AgentVersion, Protocol: int32(v.Host.Protocol),
		Instances: map[string]int32{}, ReservedCpus: v.Host.ReservedCPUs.String(), ReservedMemoryBytes: v.Host.ReservedMem,
		ShareBase: int32(shareBase)}
	h.HostType, h.FaultDomain, h.UpgradeDomain = v.Host.Type, v.Host.FaultDomain, v.Host.UpgradeDomain
	if !v.Host.MaintenanceUntil.IsZero() {
		h.MaintenanceUntil = v.Host.MaintenanceUntil.Format(time.RFC3339)
	}
	h.Draining, h.Stuck, h.NoAgent = v.Host.Draining, v.Host.Stuck, v.Host.NoAgent
	if !v.Host.DrainDeadline.IsZero() {
		h.DrainDeadline = v.Host.DrainDeadline.Format(time.RFC3339)
	}
	if len(v.Host.Properties) > 0 {
		h.Properties = map[string]string{}
		for k, p := range v.Host.Properties {
			h.Properties[k] = p.String()
		}
	}
	if m := v.Metrics; m != nil {
		h.Metrics = &pinfoldv1.HostMetrics{Load1: m.Load1, Load5: m.Load5, Load15: m.Load15, MemTotalBytes: m.MemTotal, MemAvailableBytes: m.MemAvailable}
	}
	for id, p := range v.Host.CPUs {
		h.CapacityCpus[int32(id)] = int32(p)
	}
	for id, p := range v.Alloc.Used {
		h.UsedCpus[int32(id)] = int32(p)
	}
	h.SharedPoolPieces, h.MemoryFirstQuotaPieces = int32(state.SharedPool(v.Host, v.Alloc).Len()*shareBase), int32(v.Alloc.MemoryFirstQuota)
	for svc, n := range v.Alloc.Instances {
		h.Instances[svc] = int32(n)
	}
	if t := v.Host.Topology; t != nil {
		h.TopologyJson, _ = json.Marshal(t)
		for _, n := range t.NUMANodes {
			h.NumaNodes = append(h.NumaNodes, &pinfoldv1.NUMANode{Id: int32(n.ID), Cpus: n.CPUs.String(),
				MemoryBytes: v.Host.NUMAMemory[n.ID], UsedMemoryBytes: v.Alloc.NUMAUsed[n.ID]})
		}
	}
	return h
}

// plannedMsgs are instances just planned, without a host's status yet.
func (s *Server) plannedMsgs(ins []model.Instance) []*pinfoldv1.Instance {
	out := make([]*pinfoldv1.Instance, 0, len(ins))
	for _, in := range ins {
		out = append(out, instanceMsg(in, nil, s.sb()))
	}
	return out
}

func instanceMsg(in model.Instance, st *model.Status, shareBase int) *pinfoldv1.Instance {
	return pinfoldv1.NewInstance(in, st, service.InstanceState(in, st), shareBase)
}

func (s *Server) sb() int { return s.reads.Params().ShareBase }

func (s *Server) RegisterHost(ctx context.Context, r *connect.Request[pinfoldv1.RegisterHostRequest]) (*connect.Response[pinfoldv1.RegisterHostResponse], error) {
	m := r.Msg
	var t topology.Topology
	dec := json.NewDecoder(strings.NewReader(string(m.TopologyJson)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, invalid("topology_json: %s", clip.Text(err.Error(), 300))
	}
	reserved, err := cpuset.ParseCPUs(m.ReservedCpus)
	if err != nil {
		return nil, invalid("reserved_cpus = %q: %v", clip.Text(m.ReservedCpus, 200), err)
	}
	v, err := s.agents.RegisterHost(ctx, service.RegisterHostRequest{Name: m.Name, Topology: &t, Force: m.Force, Agent: m.Agent,
		AgentVersion: m.AgentVersion, Protocol: int(m.Protocol), NoAgent: m.NoAgent, Settings: state.CapacitySettings{
			PiecesPerCPU: int(m.PiecesPerCpu), ReservedCPUs: reserved, ReservedMemory: m.ReservedMemoryBytes, MemoryShare: m.MemoryShare}})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.RegisterHostResponse{Host: hostMsg(v, s.sb())}), nil
}

// ListHosts answers one page of hosts (service.HostsPage): a call's
// memory and message are the page's, not the cluster's.
func (s *Server) ListHosts(_ context.Context, r *connect.Request[pinfoldv1.ListHostsRequest]) (*connect.Response[pinfoldv1.ListHostsResponse], error) {
	hosts, next, err := s.reads.HostsPage(int(r.Msg.PageSize), r.Msg.PageToken)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pinfoldv1.ListHostsResponse{Hosts: make([]*pinfoldv1.Host, 0, len(hosts)), NextPageToken: next}
	for _, v := range hosts {
		h := hostMsg(v, s.sb())
		h.TopologyJson = nil // list stays small; GetHost carries it
		out.Hosts = append(out.Hosts, h)
	}
	return connect.NewResponse(out), nil
}

func (s *Server) GetHost(_ context.Context, r *connect.Request[pinfoldv1.GetHostRequest]) (*connect.Response[pinfoldv1.GetHostResponse], error) {
	v, ok := s.reads.Host(r.Msg.Name)
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("host %q is not registered", r.Msg.Name))
	}
	out := &pinfoldv1.GetHostResponse{Host: hostMsg(v, s.sb())}
	for _, iv := range s.reads.Instances(r.Msg.Name, "") {
		out.Instances = append(out.Instances, instanceMsg(iv.Instance, iv.Status, s.sb()))
	}
	return connect.NewResponse(out), nil
}

func (s *Server) SetHost(ctx context.Context, r *connect.Request[pinfoldv1.SetHostRequest]) (*connect.Response[pinfoldv1.SetHostResponse], error) {
	m := r.Msg
	remove, err := cpuset.ParseCPUs(m.RemoveCpus)
	if err != nil {
		return nil, invalid("remove_cpus = %q: %v", clip.Text(m.RemoveCpus, 200), err)
	}
	req := service.SetHostRequest{Name: m.Name, RemoveCPUs: remove, MemoryBytes: m.MemoryBytes, MemoryDelta: m.MemoryDeltaBytes,
		AddCPUs: map[cpuset.CPUID]int{}, NUMAMemory: map[cpuset.NUMANodeID]int64{}, RemoveProperties: m.RemoveProperties,
		FaultDomain: m.FaultDomain, UpgradeDomain: m.UpgradeDomain, Type: m.HostType}
	if len(m.SetProperties) > 0 {
		req.SetProperties = map[string]placement.Value{}
		for k, v := range m.SetProperties {
			req.SetProperties[k] = placement.ParseValue(v)
		}
	}
	for id, p := range m.AddCpus {
		req.AddCPUs[cpuset.CPUID(id)] = int(p)
	}
	for id, b := range m.NumaMemoryBytes {
		req.NUMAMemory[cpuset.NUMANodeID(id)] = b
	}
	v, err := s.changes.SetHost(ctx, req)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.SetHostResponse{Host: hostMsg(v, s.sb())}), nil
}

func (s *Server) SetHostEnabled(ctx context.Context, r *connect.Request[pinfoldv1.SetHostEnabledRequest]) (*connect.Response[pinfoldv1.SetHostEnabledResponse], error) {
	v, err := s.changes.SetEnabled(ctx, r.Msg.Name, r.Msg.Enabled)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.SetHostEnabledResponse{Host: hostMsg(v, s.sb())}), nil
}

func (s *Server) SetHostMaintenance(ctx context.Context, r *connect.Request[pinfoldv1.SetHostMaintenanceRequest]) (*connect.Response[pinfoldv1.SetHostMaintenanceResponse], error) {
	if !r.Msg.Off && (r.Msg.GraceSeconds < 1 || r.Msg.GraceSeconds > 30*24*3600) {
		return nil, invalid("grace_seconds = %d: want 1..2592000 (30 days), or off", r.Msg.GraceSeconds)
	}
	grace := time.Duration(r.Msg.GraceSeconds) * time.Second
	if r.Msg.Off {
		grace = -1
	}
	v, err := s.changes.SetMaintenance(ctx, r.Msg.Name, grace)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.SetHostMaintenanceResponse{Host: hostMsg(v, s.sb())}), nil
}

func settingsMsg(ps placement.Settings) *pinfoldv1.PlacementSettings {
	m := &pinfoldv1.PlacementSettings{BufferPercent: ps.Buffer, OverbookingPercent: ps.Overbooking, ConstraintPriorities: map[string]int32{},
		DownGraceSeconds: int64(ps.Grace() / time.Second)}
	for r, p := range ps.Priorities {
		m.ConstraintPriorities[r] = int32(p)
	}
	return m
}

func (s *Server) GetPlacementSettings(context.Context, *connect.Request[pinfoldv1.GetPlacementSettingsRequest]) (*connect.Response[pinfoldv1.PlacementSettings], error) {
	return connect.NewResponse(settingsMsg(s.reads.PlacementSettings())), nil
}

func (s *Server) SetPlacementSettings(ctx context.Context, r *connect.Request[pinfoldv1.PlacementSettings]) (*connect.Response[pinfoldv1.PlacementSettings], error) {
	if g := r.Msg.DownGraceSeconds; g < 0 || g > int64(placement.MaxDownGrace/time.Second) {
		return nil, toConnect(&service.Error{Code: service.Invalid, Message: fmt.Sprintf("down_grace_seconds = %d: want 0 (the default, %s) ..%d", g, placement.DefaultDownGrace, int64(placement.MaxDownGrace/time.Second))})
	}
	ps := placement.Settings{Buffer: r.Msg.BufferPercent, Overbooking: r.Msg.OverbookingPercent, DownGrace: time.Duration(r.Msg.DownGraceSeconds) * time.Second}
	if len(r.Msg.ConstraintPriorities) > 0 {
		ps.Priorities = map[placement.Rule]placement.Priority{}
		for k, v := range r.Msg.ConstraintPriorities {
			ps.Priorities[k] = placement.Priority(v)
		}
	}
	out, err := s.changes.SetPlacementSettings(ctx, ps)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(settingsMsg(out)), nil
}

func (s *Server) Health(context.Context, *connect.Request[pinfoldv1.HealthRequest]) (*connect.Response[pinfoldv1.HealthResponse], error) {
	out := &pinfoldv1.HealthResponse{}
	for _, w := range s.reads.Health(time.Now()) {
		out.Warnings = append(out.Warnings, &pinfoldv1.HealthWarning{Kind: w.Kind, Subject: w.Subject, Detail: w.Detail})
	}
	return connect.NewResponse(out), nil
}

func (s *Server) RemoveHost(ctx context.Context, r *connect.Request[pinfoldv1.RemoveHostRequest]) (*connect.Response[pinfoldv1.RemoveHostResponse], error) {
	moved, err := s.changes.RemoveHost(ctx, r.Msg.Name)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pinfoldv1.RemoveHostResponse{}
	for _, m := range moved {
		out.Moved = append(out.Moved, &pinfoldv1.Move{Instance: m.From.ID, Service: m.From.Service, From: m.From.Host, To: m.To.Host, NewInstance: m.To.ID,
			Why: "its host was removed"})
	}
	return connect.NewResponse(out), nil
}

func (s *Server) DrainHost(ctx context.Context, r *connect.Request[pinfoldv1.DrainHostRequest]) (*connect.Response[pinfoldv1.DrainHostResponse], error) {
	d := r.Msg.DeadlineSeconds
	if d < 0 || d > 30*24*3600 {
		return nil, toConnect(&service.Error{Code: service.Invalid, Message: fmt.Sprintf("deadline_seconds = %d: want 0 (none) ..%d", d, 30*24*3600)})
	}
	v, err := s.changes.DrainHost(ctx, service.DrainRequest{Host: r.Msg.Name, Deadline: time.Duration(d) * time.Second, Cancel: r.Msg.Cancel,
		MoveLocalVolumes: r.Msg.MoveLocalVolumes}, time.Now())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.DrainHostResponse{Host: hostMsg(v, s.sb())}), nil
}

func (s *Server) ListEvents(ctx context.Context, r *connect.Request[pinfoldv1.ListEventsRequest]) (*connect.Response[pinfoldv1.ListEventsResponse], error) {
	if r.Msg.Limit < 0 {
		return nil, toConnect(&service.Error{Code: service.Invalid, Message: fmt.Sprintf("limit = %d: want 0 (the most, %d) or more", r.Msg.Limit, service.MaxEventsListed)})
	}
	evs, err := s.reads.Events(ctx, r.Msg.Service, r.Msg.Host, r.Msg.After, int(r.Msg.Limit))
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

func (s *Server) Scale(ctx context.Context, r *connect.Request[pinfoldv1.ScaleRequest]) (*connect.Response[pinfoldv1.ScaleResponse], error) {
	res, err := s.changes.Scale(ctx, r.Msg.Service, int(r.Msg.Count))
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.ScaleResponse{Added: s.plannedMsgs(res.Added), Removed: res.Removed, Count: int32(res.Count)}), nil
}

func (s *Server) Rebalance(ctx context.Context, r *connect.Request[pinfoldv1.RebalanceRequest]) (*connect.Response[pinfoldv1.RebalanceResponse], error) {
	m := r.Msg
	res, err := s.changes.Rebalance(ctx, service.RebalanceRequest{Apply: m.Apply, Defragment: m.Defragment, MoveLocalVolumes: m.MoveLocalVolumes,
		Options: balance.Options{BalancingThreshold: m.BalancingThreshold, ActivityThreshold: m.ActivityThreshold, MaxMoves: int(m.MaxMoves)}})
	out := &pinfoldv1.RebalanceResponse{ImbalanceBefore: res.Before, ImbalanceAfter: res.After,
		FragmentedBefore: int32(res.FragmentedBefore), FragmentedAfter: int32(res.FragmentedAfter), Proposed: int32(res.Proposed)}
	for _, mv := range res.Moves {
		out.Moves = append(out.Moves, &pinfoldv1.Move{Instance: mv.Instance, Service: mv.Service, From: mv.From, To: mv.To, Why: mv.Why, NewInstance: mv.NewInstance})
	}
	for _, mv := range res.Kept {
		out.Kept = append(out.Kept, &pinfoldv1.Move{Instance: mv.Instance, Service: mv.Service, From: mv.From, Why: mv.Why})
	}
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(out), nil
}

// DeployRequestOf is the service's deploy request for m at the share
// base shareBase; its error is a Connect error (invalid_argument). A
// client checks a request with it and service.CheckDeploy as Deploy does.
func DeployRequestOf(m *pinfoldv1.DeployRequest, shareBase int) (service.DeployRequest, error) {
	p, err := requestPieces(m.Cpu, shareBase, m.Bind)
	if err != nil {
		return service.DeployRequest{}, err
	}
	st, err := alloc.ParseStrategy("strategy", m.Strategy)
	if err != nil {
		return service.DeployRequest{}, toConnect(&service.Error{Code: service.Invalid, Message: err.Error()})
	}
	spec := model.Spec{Image: m.Image, Command: m.Command, Env: m.Env, Network: m.Network, Health: m.Health.Model(), Container: m.Container.Model(), Ports: pinfoldv1.PortsModel(m.Ports)}
	return service.DeployRequest{Service: m.Service, Spec: spec,
		Count: int(m.Count), Pieces: p, Bind: m.Bind, WholeCores: m.WholeCores, Memory: m.MemoryBytes, MemorySoft: m.MemorySoftBytes, Strategy: st, MaxPerHost: int(m.MaxPerHost),
		UseBuffer: m.UseBuffer, CreateOnly: m.CreateOnly, Rules: state.Rules{Constraint: m.Constraint,
			Affinity:     placement.Affinity{Hard: m.AffinityHard, Soft: m.AffinitySoft},
			AntiAffinity: placement.Affinity{Hard: m.AntiAffinityHard, Soft: m.AntiAffinitySoft},
			Policy:       m.PlacementPolicy, HostsOrder: m.HostsOrder, DomainSpread: m.DomainSpread}}, nil
}

func (s *Server) Deploy(ctx context.Context, r *connect.Request[pinfoldv1.DeployRequest]) (*connect.Response[pinfoldv1.DeployResponse], error) {
	req, err := DeployRequestOf(r.Msg, s.sb())
	if err != nil {
		return nil, err
	}
	res, err := s.changes.DeployWithRules(ctx, req)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pinfoldv1.DeployResponse{DomainSpread: res.DomainSpread, Instances: s.plannedMsgs(res.Instances)}
	for _, v := range res.Violations {
		out.Violations = append(out.Violations, &pinfoldv1.Violation{Rule: v.Rule, Detail: v.Detail})
	}
	return connect.NewResponse(out), nil
}

func (s *Server) Resize(ctx context.Context, r *connect.Request[pinfoldv1.ResizeRequest]) (*connect.Response[pinfoldv1.ResizeResponse], error) {
	m := r.Msg
	var to *service.ResizeTo
	if strings.TrimSpace(m.ToCpu) != "" || m.ToMemoryBytes != 0 {
		switch {
		case strings.TrimSpace(m.CpuDelta) != "" || m.MemoryDeltaBytes != 0:
			return nil, invalid("to_cpu = %q, to_memory_bytes = %d: a size is given with cpu_delta = %q, memory_delta_bytes = %d: give a size or deltas, not both",
				m.ToCpu, m.ToMemoryBytes, m.CpuDelta, m.MemoryDeltaBytes)
		case strings.TrimSpace(m.ToCpu) == "" || m.ToMemoryBytes <= 0:
			return nil, invalid("to_cpu = %q, to_memory_bytes = %d: a size needs both (decimal CPUs, and bytes above 0)", m.ToCpu, m.ToMemoryBytes)
		}
		p, err := pieces("to_cpu", m.ToCpu, s.sb(), false)
		if err != nil {
			return nil, err
		}
		to = &service.ResizeTo{Pieces: p, Memory: m.ToMemoryBytes}
	}
	d, err := pieces("cpu_delta", m.CpuDelta, s.sb(), true)
	if err != nil {
		// A change of less than one piece is refused, not rounded to none
		// or up to a piece ("0" itself says no CPU change). Only an amount
		// pieces refuses: 1 piece at a share base that is not a power of
		// ten is written with 4 decimals, a little less than 1 piece
		// (0.0156 of 64 is 0.9984).
		if f, _ := strconv.ParseFloat(strings.TrimSpace(m.CpuDelta), 64); f != 0 && math.Abs(f)*float64(s.sb()) < 1 {
			return nil, invalid("cpu_delta = %q: less than one piece of a CPU, it changes nothing: the smallest step is %s CPU (1 piece; share base %d)",
				m.CpuDelta, alloc.FormatPieces(1, s.sb()), s.sb())
		}
		return nil, err
	}
	if d == 0 && m.MemoryDeltaBytes == 0 && m.Bind == nil && to == nil {
		return nil, invalid("nothing to change: give cpu_delta, memory_delta_bytes, bind, or to_cpu with to_memory_bytes")
	}
	expect := 0
	if strings.TrimSpace(m.ExpectCpu) != "" {
		if expect, err = pieces("expect_cpu", m.ExpectCpu, s.sb(), false); err != nil {
			return nil, err
		}
	}
	if m.ExpectMemoryBytes < 0 {
		return nil, invalid("expect_memory_bytes = %d: want a size in bytes, or 0 for none", m.ExpectMemoryBytes)
	}
	ins, err := s.changes.Resize(ctx, service.ResizeRequest{Target: m.Target, CPUDelta: d, MemoryDelta: m.MemoryDeltaBytes, Bind: m.Bind,
		ExpectPieces: expect, ExpectMemory: m.ExpectMemoryBytes, To: to})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.ResizeResponse{Instances: s.plannedMsgs(ins)}), nil
}

func (s *Server) Replace(ctx context.Context, r *connect.Request[pinfoldv1.ReplaceRequest]) (*connect.Response[pinfoldv1.ReplaceResponse], error) {
	var ctr *model.Container
	if r.Msg.Container != nil {
		c := r.Msg.Container.Model()
		ctr = &c
	}
	ins, err := s.changes.Replace(ctx, service.ReplaceRequest{Target: r.Msg.Target, Image: r.Msg.Image, Command: r.Msg.Command,
		Health: r.Msg.Health.Model(), Hosts: r.Msg.Hosts, Pull: r.Msg.Pull, Container: ctr})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.ReplaceResponse{Instances: s.plannedMsgs(ins)}), nil
}

func (s *Server) Remove(ctx context.Context, r *connect.Request[pinfoldv1.RemoveRequest]) (*connect.Response[pinfoldv1.RemoveResponse], error) {
	ids, err := s.changes.Remove(ctx, r.Msg.Target)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.RemoveResponse{Ids: ids}), nil
}

// GetService answers a service's record (service.ServiceRecord); a viewer
// sees the environment's names, never its values, as in ListInstances.
func (s *Server) GetService(ctx context.Context, r *connect.Request[pinfoldv1.GetServiceRequest]) (*connect.Response[pinfoldv1.GetServiceResponse], error) {
	if err := state.ValidateServiceName(r.Msg.Name); err != nil {
		return nil, invalid("name: %v", err)
	}
	svc, n, ok := s.reads.ServiceRecord(r.Msg.Name)
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("service %q is not deployed", r.Msg.Name))
	}
	m := &pinfoldv1.ServiceRecord{Name: svc.Name, Image: svc.Image, Command: svc.Command, Env: svc.Env, Network: svc.Network,
		Health: pinfoldv1.NewHealthCheck(svc.Health), Pull: svc.Pull, Cpu: alloc.FormatPieces(svc.Pieces, s.sb()), Bind: svc.Bind,
		WholeCores: svc.WholeCores, MemoryBytes: svc.Memory, MemorySoftBytes: svc.MemorySoft, Strategy: svc.Strategy,
		MaxPerHost: int32(min(svc.MaxPerHost, math.MaxInt32)), Count: int32(min(n, math.MaxInt32)), ShareBase: int32(s.sb()),
		Container: pinfoldv1.NewContainerSpec(svc.Container), Ports: pinfoldv1.NewPorts(svc.Ports)}
	if rl := svc.Rules; rl != nil {
		m.Constraint, m.PlacementPolicy, m.HostsOrder, m.DomainSpread = rl.Constraint, rl.Policy, rl.HostsOrder, rl.DomainSpread
		m.AffinityHard, m.AffinitySoft, m.AntiAffinityHard, m.AntiAffinitySoft = rl.Affinity.Hard, rl.Affinity.Soft, rl.AntiAffinity.Hard, rl.AntiAffinity.Soft
	}
	return connect.NewResponse(&pinfoldv1.GetServiceResponse{Service: m}), nil
}

// ListInstances answers one page of instances (service.InstancesPage).
func (s *Server) ListInstances(ctx context.Context, r *connect.Request[pinfoldv1.ListInstancesRequest]) (*connect.Response[pinfoldv1.ListInstancesResponse], error) {
	ins, next, err := s.reads.InstancesPage(r.Msg.Host, r.Msg.Service, int(r.Msg.PageSize), r.Msg.PageToken)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pinfoldv1.ListInstancesResponse{Instances: make([]*pinfoldv1.Instance, 0, len(ins)), NextPageToken: next}
	for _, iv := range ins {
		out.Instances = append(out.Instances, instanceMsg(iv.Instance, iv.Status, s.sb()))
	}
	return connect.NewResponse(out), nil
}

func (s *Server) Capacity(_ context.Context, r *connect.Request[pinfoldv1.CapacityRequest]) (*connect.Response[pinfoldv1.CapacityResponse], error) {
	m := r.Msg
	p, err := requestPieces(m.Cpu, s.sb(), m.Bind)
	if err != nil {
		return nil, err
	}
	caps, err := s.reads.Capacity(service.DeployRequest{Service: m.Service, Pieces: p, Bind: m.Bind, WholeCores: m.WholeCores, Memory: m.MemoryBytes, MaxPerHost: int(m.MaxPerHost),
		UseBuffer: m.UseBuffer, Rules: state.Rules{Constraint: m.Constraint,
			Affinity: placement.Affinity{Hard: m.AffinityHard}, AntiAffinity: placement.Affinity{Hard: m.AntiAffinityHard}}})
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pinfoldv1.CapacityResponse{Capacity: map[string]int32{}, Limit: map[string]string{}}
	for _, h := range slices.Sorted(maps.Keys(caps)) {
		c := caps[h]
		out.Capacity[h] = int32(min(c.Count, 1<<30))
		out.Total += int64(min(c.Count, 1<<30))
		out.Limit[h] = c.Limit
	}
	return connect.NewResponse(out), nil
}

func (s *Server) Heartbeat(ctx context.Context, r *connect.Request[pinfoldv1.HeartbeatRequest]) (*connect.Response[pinfoldv1.HeartbeatResponse], error) {
	resp, err := s.heartbeat(ctx, r.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// heartbeat serves a heartbeat, of a call or of an agent link.
func (s *Server) heartbeat(ctx context.Context, m *pinfoldv1.HeartbeatRequest) (*pinfoldv1.HeartbeatResponse, error) {
	ttl := time.Duration(m.TtlSeconds) * time.Second
	var met *state.Metrics
	if hm := m.Metrics; hm != nil {
		met = &state.Metrics{Load1: hm.Load1, Load5: hm.Load5, Load15: hm.Load15, MemTotal: hm.MemTotalBytes, MemAvailable: hm.MemAvailableBytes}
	}
	if err := s.agents.Heartbeat(ctx, m.Host, m.AgentVersion, int(m.Protocol), ttl, met); err != nil {
		return nil, toConnect(err)
	}
	return &pinfoldv1.HeartbeatResponse{PlannerProtocol: model.Protocol}, nil
}

func (s *Server) ReportStatus(ctx context.Context, r *connect.Request[pinfoldv1.ReportStatusRequest]) (*connect.Response[pinfoldv1.ReportStatusResponse], error) {
	m := r.Msg
	err := s.agents.ReportStatus(ctx, m.Host, m.Id, m.Status())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.ReportStatusResponse{}), nil
}

// WatchInstances sends the host's desired set, then again after each change
// to the host's instances, until the client goes away.
func (s *Server) WatchInstances(ctx context.Context, r *connect.Request[pinfoldv1.WatchInstancesRequest], stream *connect.ServerStream[pinfoldv1.WatchInstancesResponse]) error {
	if s.watches != nil {
		if !s.watches.take(r.Msg.Host) {
			return watchRefusal(r.Msg.Host)
		}
		defer s.watches.release(r.Msg.Host)
	}
	err := s.agents.WatchInstances(ctx, r.Msg.Host, func(rev int64, h state.HostView, ins []state.InstanceView) error {
		return stream.Send(s.desiredMsg(rev, h, ins))
	})
	switch {
	case err == nil || ctx.Err() != nil:
		return ctx.Err()
	case service.CodeOf(err) != "":
		return toConnect(err)
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

// desiredMsg is a host's desired set at rev, as a watch or a link sends it.
func (s *Server) desiredMsg(rev int64, h state.HostView, ins []state.InstanceView) *pinfoldv1.WatchInstancesResponse {
	msg := &pinfoldv1.WatchInstancesResponse{Revision: rev, Cpus: cpuset.Of(slices.Collect(maps.Keys(h.Host.CPUs))...).String(),
		SharedPool: state.SharedPool(h.Host, h.Alloc).String()}
	for _, iv := range ins {
		msg.Instances = append(msg.Instances, instanceMsg(iv.Instance, iv.Status, s.sb()))
	}
	return msg
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
