package api

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
)

// unrecorded are the methods that change nothing worth an event: reads,
// and the agents' routine (heartbeats, status reports, the watch; a
// refusal among the reports is recorded by the service).
var unrecorded = map[string]bool{"Heartbeat": true, "ReportStatus": true, "WatchInstances": true}

// eventRecorder records every call that may change the cluster in the
// event log: who (the client certificate's identity, "local" without
// TLS), the request, and the outcome.
type eventRecorder struct{ svc Planner }

func (e eventRecorder) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		method := req.Spec().Procedure[strings.LastIndexByte(req.Spec().Procedure, '/')+1:]
		if methodAccess[method] == read || unrecorded[method] {
			return resp, err
		}
		ev := state.Event{Identity: identityOf(ctx), Kind: method, Outcome: "ok"}
		if m, ok := req.Any().(proto.Message); ok {
			if b, jerr := (protojson.MarshalOptions{UseProtoNames: true}).Marshal(m); jerr == nil {
				ev.Request = string(b)
			}
			ev.Subject, ev.Host, ev.Service = subjectOf(method, m)
		}
		if err != nil {
			ev.Outcome = connect.CodeOf(err).String() + ": " + errorMessage(err)
		}
		if call := service.RequestFrom(ctx); call != nil && call.Repeated {
			ev.Outcome = "ok: a repeat of request " + call.ID + ", answered with its first outcome; nothing changed"
		}
		e.svc.Record(ev)
		return resp, err
	}
}

func (e eventRecorder) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (e eventRecorder) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next // the one stream is the agents' watch: nothing to record
}

func errorMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// identityOf is the caller's identity: the verified client certificate's
// ("admin:alice"), or "local" when the API runs without TLS.
func identityOf(ctx context.Context) string {
	who, _ := ctx.Value(identityKey{}).(identified)
	if who.err != nil || who.id.Name == "" {
		return "local"
	}
	return who.id.String()
}

// subjectOf reads what a request acts on from its fields: a service or
// target, a host (name on the host methods, or host).
func subjectOf(method string, m proto.Message) (subject, host, service string) {
	r := m.ProtoReflect()
	str := func(name string) string {
		f := r.Descriptor().Fields().ByName(protoreflect.Name(name))
		if f == nil || f.Kind().String() != "string" || f.IsList() {
			return ""
		}
		return r.Get(f).String()
	}
	service = str("service")
	if t := str("target"); t != "" {
		subject, service = t, t
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
	return subject, host, service
}
