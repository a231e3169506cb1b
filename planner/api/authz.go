package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/api/pinfoldv1"
	"github.com/pinfold/pinfold/planner/pki"
)

// access is what a method needs.
type access int

const (
	adminOnly access = iota // changes the cluster
	read                    // reads it: admin and viewer
	ownHost                 // an agent's own host (and admin)
)

// methodAccess is, per API method, who may call it; a method missing here
// is admin only.
var methodAccess = map[string]access{
	"ListHosts": read, "GetHost": read, "ListInstances": read, "Capacity": read, "ExportPlan": read, "Health": read, "GetPlacementSettings": read, "ListEvents": read,
	"RegisterHost": ownHost, "Heartbeat": ownHost, "ReportStatus": ownHost, "WatchInstances": ownHost,
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

// authorize decides whether id may call method with msg, like Kubernetes'
// node authorizer: an agent acts only for its own host; a viewer only
// reads; an admin does everything.
func authorize(id pki.Identity, method string, msg any) error {
	if id.Role == pki.RoleAdmin {
		return nil
	}
	acc := methodAccess[method]
	if m, ok := msg.(*pinfoldv1.RebalanceRequest); ok && !m.Apply {
		acc = read // a dry run changes nothing
	}
	switch {
	case acc == read && id.Role == pki.RoleViewer:
		return nil
	case acc == ownHost && id.Role == pki.RoleAgent:
		host, ok := hostOf(msg)
		if ok && host == id.Name {
			return nil
		}
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("identity %s may not call %s for host %q: an agent acts only for its own host", id, method, host))
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("identity %s may not call %s", id, method))
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
// identity before the handler sees it.
type authorizer struct{}

func (authorizer) check(ctx context.Context, procedure string, msg any) error {
	who, _ := ctx.Value(identityKey{}).(identified)
	if who.err != nil {
		return connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("%s: %w", procedure, who.err))
	}
	return authorize(who.id, procedure[strings.LastIndex(procedure, "/")+1:], msg)
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
