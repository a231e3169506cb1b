package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// access is what a method needs.
type access int

const (
	adminOnly access = iota // changes the cluster
	read                    // reads it: admin and viewer
	ownHost                 // an agent's own host (and admin)
	dryRun                  // changes it unless the request asks for a dry run (Rebalance): a viewer's dry run only
)

// methodAccess is, per API method, who may call it: the one table both
// checks read, the one before the request's body is read (precheck: may
// the caller's role ever call the method) and the one after it is decoded
// (authorize: this request, for an agent's own host or a dry run). Every
// method of the service is listed (TestEveryMethodHasAccess); a name
// missing here is admin only.
var methodAccess = map[string]access{
	"ListHosts": read, "GetHost": read, "ListInstances": read, "Capacity": read, "ExportPlan": read, "Health": read, "GetPlacementSettings": read, "ListEvents": read, "GetService": read,
	"RegisterHost": ownHost, "Heartbeat": ownHost, "ReportStatus": ownHost, "WatchInstances": ownHost,
	"Rebalance": dryRun,
	"SetHost":   adminOnly, "SetHostEnabled": adminOnly, "SetHostMaintenance": adminOnly, "DrainHost": adminOnly, "RemoveHost": adminOnly,
	"SetPlacementSettings": adminOnly, "Deploy": adminOnly, "Resize": adminOnly, "Remove": adminOnly, "Replace": adminOnly, "Scale": adminOnly,
}

// mayEverCall reports whether role may call a method needing acc with
// some request: what is decided before the request is read.
func mayEverCall(role pki.Role, acc access) bool {
	switch role {
	case pki.RoleAdmin:
		return true
	case pki.RoleViewer:
		return acc == read || acc == dryRun
	case pki.RoleAgent:
		return acc == ownHost
	}
	return false
}

// hostOf is the host an agent method acts for.
func hostOf(msg any) (string, bool) {
	switch m := msg.(type) {
	case *pinfoldv1.RegisterHostRequest:
		return m.Name, m.Agent // an agent registers as an agent, never by hand
	case *pinfoldv1.HeartbeatRequest:
		return m.Host, true
	case *pinfoldv1.ReportStatusRequest:
		return m.Host, true
	case *pinfoldv1.WatchInstancesRequest:
		return m.Host, true
	}
	return "", false
}

// denied is the refusal of a call id's role may never make.
func denied(id pki.Identity, method string) error {
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("identity %s may not call %s", id, method))
}

// authorize decides whether id may call method with msg, like Kubernetes'
// node authorizer: an agent acts only for its own host; a viewer only
// reads; an admin does everything.
func authorize(id pki.Identity, method string, msg any) error {
	acc := methodAccess[method]
	switch {
	case !mayEverCall(id.Role, acc):
		return denied(id, method)
	case id.Role == pki.RoleAdmin || acc == read:
		return nil
	case acc == dryRun:
		if m, ok := msg.(*pinfoldv1.RebalanceRequest); ok && !m.Apply {
			return nil // a dry run changes nothing
		}
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("identity %s may not call %s with apply: a viewer may only ask for a dry run", id, method))
	}
	// ownHost, for an agent
	host, ok := hostOf(msg)
	if ok && host == id.Name {
		if m, reg := msg.(*pinfoldv1.RegisterHostRequest); reg {
			if field, value := capacityField(m); field != "" {
				return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("identity %s may not set %s = %s in %s: an agent registers what it observes (topology, memory, version); the host's capacity settings and force are the admin's (pinfold host register, host set)",
					id, field, value, method))
			}
		}
		return nil
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("identity %s may not call %s for host %q: an agent acts only for its own host", id, method, clipValue(host)))
}

type identityKey struct{}

// identified is an identity, or why the client has none.
type identified struct {
	id  pki.Identity
	err error
	// tls: the connection is TLS; cn: its verified client certificate's
	// CommonName (the name recorded for one with no valid role).
	tls bool
	cn  string
}

// identify reads the client's identity from its verified certificate.
func identify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who := identified{err: errors.New("no verified client certificate"), tls: r.TLS != nil}
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
			c := r.TLS.VerifiedChains[0][0]
			id, err := pki.IdentityOf(c)
			who = identified{id: id, err: err, tls: true, cn: c.Subject.CommonName}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, who)))
	})
}

// authorizer checks every call, unary or streaming, against its caller's
// identity before the handler sees it. Most refusals come before it, from
// precheck, before the request is read; it makes those that need the
// request (an agent's own host, a viewer's dry run).
type authorizer struct{}

func (authorizer) check(ctx context.Context, procedure string, msg any) error {
	who, _ := ctx.Value(identityKey{}).(identified)
	if who.err != nil {
		return unauthenticated(procedure, who.err)
	}
	return authorize(who.id, procedure[strings.LastIndex(procedure, "/")+1:], msg)
}

func unauthenticated(procedure string, err error) error {
	return connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("%s: %w", procedure, err))
}

func (a authorizer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := a.check(ctx, req.Spec().Procedure, req.Any()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (authorizer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a authorizer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, &checkedConn{StreamingHandlerConn: conn, check: func(msg any) error { return a.check(ctx, conn.Spec().Procedure, msg) }})
	}
}

// checkedConn authorizes a stream on its request message, before the
// handler acts on it.
type checkedConn struct {
	connect.StreamingHandlerConn
	check func(any) error
}

func (c *checkedConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	return c.check(msg)
}

// procedurePrefix starts the path of every PlannerService procedure.
const procedurePrefix = "/" + pinfoldv1connect.PlannerServiceName + "/"

// precheck refuses a PlannerService call before a byte of its body is
// read or decoded when the request does not matter: a caller with no
// verified identity (Unauthenticated), or one whose role may never call
// the method (PermissionDenied: a viewer's Deploy, an agent's ListHosts),
// as methodAccess says. A malformed or 4 MiB request of such a caller is
// refused as such, not parsed. The refusal is the error the authorizer
// would return, written in the call's protocol (Connect, gRPC, gRPC-Web:
// connect.ErrorWriter), and counted and recorded by rec exactly as the
// interceptors count and record a call the authorizer refuses: the same
// functions (Metrics.observe, eventRecorder.failed), with no request to
// record since none was read. Paths that are not a method of the service
// go on to the API, which answers them (NotFound) without reading them.
func precheck(next http.Handler, rec unreadRecorder) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method, ok := strings.CutPrefix(r.URL.Path, procedurePrefix)
		acc, known := methodAccess[method]
		if !ok || !known {
			next.ServeHTTP(w, r)
			return
		}
		who, _ := r.Context().Value(identityKey{}).(identified)
		var err error
		switch {
		case who.err != nil:
			err = unauthenticated(r.URL.Path, who.err)
		case !mayEverCall(who.id.Role, acc):
			err = denied(who.id, method)
		default:
			next.ServeHTTP(w, r)
			return
		}
		rec.refused(r.Context(), r.URL.Path, time.Now(), err)
		_ = errs.Write(w, r, err) // a write error is the client's gone: nothing to answer
	})
}

// readers lets through the requests whose verified identity may read the
// cluster (admin, viewer): the pages and series outside the API (/metrics,
// /ui/) under the API's authorization.
func readers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, _ := r.Context().Value(identityKey{}).(identified)
		switch {
		case who.err != nil:
			http.Error(w, "pinfold: "+who.err.Error(), http.StatusUnauthorized)
		case who.id.Role != pki.RoleAdmin && who.id.Role != pki.RoleViewer:
			http.Error(w, fmt.Sprintf("pinfold: identity %s may not read %s", who.id, r.URL.Path), http.StatusForbidden)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// capacityField is the first capacity setting m sets ("" when none):
// what only an admin may choose for a host (issue 36 AG1: an agent's own
// registration with pieces_per_cpu 10000 and force let one CPU hold 96
// CPUs' worth of pieces).
func capacityField(m *pinfoldv1.RegisterHostRequest) (field, value string) {
	switch {
	case m.PiecesPerCpu != 0:
		return "pieces_per_cpu", fmt.Sprint(m.PiecesPerCpu)
	case m.ReservedCpus != "":
		return "reserved_cpus", fmt.Sprintf("%q", clipValue(m.ReservedCpus))
	case m.ReservedMemoryBytes != 0:
		return "reserved_memory_bytes", fmt.Sprint(m.ReservedMemoryBytes)
	case m.MemoryShare != 0:
		return "memory_share", fmt.Sprint(m.MemoryShare)
	case m.Force:
		return "force", "true"
	case m.NoAgent != "":
		return "no_agent", fmt.Sprintf("%q", clipValue(m.NoAgent))
	}
	return "", ""
}

// clipValue keeps an echoed value short.
func clipValue(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
