package api

import (
	"context"
	"errors"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pinfold/pinfold/planner/clip"
	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
)

// unrecorded are the methods that change nothing worth an event: reads,
// and the agents' routine (heartbeats, status reports, the watch; a
// refusal among the reports is recorded by the service).
var unrecorded = map[string]bool{"Heartbeat": true, "ReportStatus": true, "WatchInstances": true}

// eventRecorder records every call that may change the cluster in the
// event log: who (the client certificate's identity, "local" without
// TLS), the request (environment values cut to their names), and the
// outcome. The event of a call that commits a change is written in the
// change's own etcd transaction (service.Audit): an acknowledged change
// always has its event. A call that ends in an error and commits nothing
// is counted per identity and method; a viewer's or agent's are sampled
// (service.RecordFailed), an admin's written whole.
type eventRecorder struct{ svc Planner }

func (e eventRecorder) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		method := req.Spec().Procedure[strings.LastIndexByte(req.Spec().Procedure, '/')+1:]
		if !recorded(method) {
			return next(ctx, req)
		}
		ev := state.Event{Identity: identityOf(ctx), Kind: method}
		m, _ := req.Any().(proto.Message)
		if m != nil {
			ev.Subject, ev.Host, ev.Service, ev.ServiceExact = subjectOf(method, m)
			ev = ev.Clipped() // the names only, not a 4 MB one, held while the call runs
		}
		a := &service.Audit{Event: ev}
		if m != nil {
			a.Request = func() string { return requestText(m) }
		}
		resp, err := next(service.WithAudit(ctx, a), req)
		switch {
		case err == nil && a.Committed():
			return resp, err // its event went with its change
		case err == nil:
			// Nothing to write (a repeat, or a change of nothing).
			ev = a.Full()
			ev.Outcome = "ok"
			if call := service.RequestFrom(ctx); call != nil && call.Repeated {
				ev.Outcome = "ok: a repeat of request " + call.ID + ", answered with its first outcome; nothing changed"
			}
			// A viewer's or agent's sampled, as refusals are: a dry run
			// repeated 12,000 times once pushed every admin event out
			// of retention (issue 36 E1).
			e.svc.RecordUnchanged(ev, method, !trusted(ctx))
		case a.Committed():
			// A change committed, then the call failed (a heal placing
			// some instances only): its event says so too.
			ev = a.Full()
			ev.Outcome = connect.CodeOf(err).String() + ": " + errorMessage(err) + " (after a change committed, with its event)"
			e.svc.Record(ev)
		default:
			e.failed(ctx, method, ev, func() string { return a.Full().Request }, err)
		}
		return resp, err
	}
}

// recorded reports whether a call of method is recorded in the event log.
func recorded(method string) bool {
	return methodAccess[method] != read && !unrecorded[method]
}

// failed records a call of method that ended in err and committed nothing: counted
// per identity and method, its event sampled unless the caller is trusted
// (service.RecordFailed). request is the request's text for the event,
// read only if the event is written ("" for a request never read).
func (e eventRecorder) failed(ctx context.Context, method string, ev state.Event, request func() string, err error) {
	ev.Outcome = connect.CodeOf(err).String() + ": " + errorMessage(err)
	e.svc.RecordFailed(ev, request, method, !trusted(ctx))
}

// unreadRecorder counts and records a call precheck refused before its
// request was read, through the same functions the interceptors count and
// record a refused call with (Metrics.observe, eventRecorder.failed): the
// same series, the same event, the same sampling, less what only the
// request tells (its subject, host, service and text).
type unreadRecorder struct {
	metrics *Metrics // nil: no metrics
	events  eventRecorder
}

func (u unreadRecorder) refused(ctx context.Context, procedure string, start time.Time, err error) {
	method := procedure[strings.LastIndexByte(procedure, '/')+1:]
	if u.metrics != nil {
		u.metrics.observe(procedure, start, err)
	}
	if recorded(method) {
		u.events.failed(ctx, method, state.Event{Identity: identityOf(ctx), Kind: method}.Clipped(), nil, err)
	}
}

// requestText is m as JSON for the event log, environment values cut to
// their names.
func requestText(m proto.Message) string {
	if hasEnv(m.ProtoReflect()) {
		m = proto.Clone(m)
		namesOnly(m.ProtoReflect())
	}
	b, err := (protojson.MarshalOptions{UseProtoNames: true}).Marshal(m)
	if err != nil {
		return ""
	}
	return string(b)
}

// hasEnv reports whether r, or a message in it, sets a field named env.
func hasEnv(r protoreflect.Message) bool {
	found := false
	r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Name() == "env":
			found = true
		case fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap():
			found = hasEnv(v.Message())
		}
		return !found
	})
	return found
}

// namesOnly cuts every entry of every env list in r to its name.
func namesOnly(r protoreflect.Message) {
	r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Name() == "env" && fd.IsList() && fd.Kind() == protoreflect.StringKind:
			l := v.List()
			for i := range l.Len() {
				l.Set(i, protoreflect.ValueOfString(service.EnvName(l.Get(i).String())))
			}
		case fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap():
			namesOnly(v.Message())
		}
		return true
	})
}

func (e eventRecorder) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (e eventRecorder) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next // the streams are the agents' watch and ExportPlan (a read): nothing to record
}

func errorMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// identityOf is the caller's identity: the verified client certificate's
// ("admin:alice"); a CA-signed certificate with no valid role by its own
// name ("carol (no role)"); "local" only when the API runs without TLS.
func identityOf(ctx context.Context) string {
	who, _ := ctx.Value(identityKey{}).(identified)
	switch {
	case who.err == nil && who.id.Name != "":
		return who.id.String()
	case who.tls && who.cn != "":
		return clip.Text(who.cn, 200) + " (no role)"
	case who.tls:
		return "(no certificate)"
	}
	return "local"
}

// trusted reports whether the caller may change everything (an admin, or
// any caller without TLS): its failed calls are written whole, not
// sampled.
func trusted(ctx context.Context) bool {
	who, _ := ctx.Value(identityKey{}).(identified)
	return !who.tls || who.err == nil && who.id.Role == pki.RoleAdmin
}

// subjectOf reads what a request acts on from its fields: a service or
// target, a host (name on the host methods, or host). exact: the service
// is a service field's, a service's name and never an instance ID
// (state.Event.ServiceExact); a target may be either.
func subjectOf(method string, m proto.Message) (subject, host, service string, exact bool) {
	r := m.ProtoReflect()
	str := func(name string) string {
		f := r.Descriptor().Fields().ByName(protoreflect.Name(name))
		if f == nil || f.Kind().String() != "string" || f.IsList() {
			return ""
		}
		return r.Get(f).String()
	}
	service = str("service")
	exact = service != ""
	if t := str("target"); t != "" {
		subject, service, exact = t, t, false
	}
	if h := str("host"); h != "" {
		host = h
	}
	if n := str("name"); n != "" && strings.Contains(method, "Host") {
		host = n
	}
	if subject == "" {
		subject = service
	}
	if subject == "" {
		subject = host
	}
	return subject, host, service, exact
}
