package api

import (
	"context"
	"encoding/json"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/service"
)

// What a viewer never reads (issue 36 N7). Every answer to a caller who
// may not read secrets passes through redact, whatever the method, so a
// new read path cannot forget it:
//   - env: each entry cut to its name (SECRET=hunter2 → SECRET);
//   - log_opts: every value emptied (splunk-token's is a credential);
//   - labels: the value of every secret label (SecretLabel) emptied;
//   - a health check's exec command replaced by HiddenCommand;
//   - an event's request text, which holds the request as JSON: the same
//     fields in it (a text cut at its bound, which cannot be read back,
//     is replaced whole by HiddenRequest).

// HiddenCommand stands for a health check's command in a viewer's answer
// (model.HiddenCommand).
const HiddenCommand = model.HiddenCommand

// HiddenRequest stands for an event's request text a viewer cannot be
// shown safely (cut at its bound, so not readable JSON).
const HiddenRequest = `{"hidden":"the request text is cut; viewers see it only whole"}`

// SecretLabel reports whether a label with key is secret
// (model.SecretLabel: its key holds a word such as secret, token or
// password, in any case). A secret in a label under another key is shown:
// put secrets in the environment, whose values viewers never see.
func SecretLabel(key string) bool { return model.SecretLabel(key) }

// mayReadSecrets: admins, local callers (no TLS), and agents, whose calls
// are authorized for their own host only and need the environment to
// start containers. Viewers and callers without a valid role may not.
func mayReadSecrets(ctx context.Context) bool {
	who, _ := ctx.Value(identityKey{}).(identified)
	return !who.tls || who.err == nil && (who.id.Role == pki.RoleAdmin || who.id.Role == pki.RoleAgent)
}

// redacted is m as a caller who may not read secrets sees it: a copy
// (m may share the cache's slices and maps), or m when nothing in it is
// secret.
func redacted(m proto.Message) proto.Message {
	c := proto.Clone(m)
	if !redact(c.ProtoReflect()) {
		return m
	}
	return c
}

// redact hides the secret fields of r in place, and reports whether it
// changed anything.
func redact(r protoreflect.Message) bool {
	changed := false
	var later []func() // field sets, after the Range over the fields
	defer func() {
		for _, f := range later {
			f()
		}
	}()
	r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch name := fd.Name(); {
		case name == "env" && fd.IsList() && fd.Kind() == protoreflect.StringKind:
			l := v.List()
			for i := range l.Len() {
				if s := l.Get(i).String(); service.EnvName(s) != s {
					l.Set(i, protoreflect.ValueOfString(service.EnvName(s)))
					changed = true
				}
			}
		case (name == "log_opts" || name == "labels") && fd.IsMap() && fd.MapValue().Kind() == protoreflect.StringKind:
			mp := v.Map()
			mp.Range(func(k protoreflect.MapKey, val protoreflect.Value) bool {
				if val.String() != "" && (name == "log_opts" || SecretLabel(k.String())) {
					mp.Set(k, protoreflect.ValueOfString(""))
					changed = true
				}
				return true
			})
		case name == "exec" && fd.IsList() && r.Descriptor().Name() == "HealthCheck":
			if l := v.List(); l.Len() > 0 && !(l.Len() == 1 && l.Get(0).String() == HiddenCommand) {
				l.Truncate(0)
				l.Append(protoreflect.ValueOfString(HiddenCommand))
				changed = true
			}
		case name == "request" && fd.Kind() == protoreflect.StringKind && !fd.IsList() && r.Descriptor().Name() == "Event":
			if s := v.String(); s != "" {
				if t := redactText(s); t != s {
					later = append(later, func() { r.Set(fd, protoreflect.ValueOfString(t)) })
					changed = true
				}
			}
		case fd.IsMap():
			if k := fd.MapValue().Kind(); k == protoreflect.MessageKind || k == protoreflect.GroupKind {
				v.Map().Range(func(_ protoreflect.MapKey, val protoreflect.Value) bool {
					changed = redact(val.Message()) || changed
					return true
				})
			}
		case fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind:
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				changed = redact(l.Get(i).Message()) || changed
			}
		default:
			changed = redact(v.Message()) || changed
		}
		return true
	})
	return changed
}

// redactText is an event's request text (a request as JSON, with proto
// field names) with the same fields hidden; HiddenRequest when it is not
// readable JSON (cut at state.MaxEventText).
func redactText(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return HiddenRequest
	}
	if !redactJSON(v, "") {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return HiddenRequest
	}
	return string(b)
}

// redactJSON hides the secret fields of a decoded JSON value in place; in
// is the name of the object holding v ("" at the top).
func redactJSON(v any, in string) bool {
	changed := false
	switch x := v.(type) {
	case map[string]any:
		for k, f := range x {
			switch {
			case k == "env":
				if l, ok := f.([]any); ok {
					for i, e := range l {
						if s, ok := e.(string); ok && service.EnvName(s) != s {
							l[i], changed = service.EnvName(s), true
						}
					}
				}
			case k == "log_opts" || k == "logOpts" || k == "labels":
				if mp, ok := f.(map[string]any); ok {
					for lk, lv := range mp {
						if lv != "" && (k != "labels" || SecretLabel(lk)) {
							mp[lk], changed = "", true
						}
					}
				}
			case k == "exec" && in == "health":
				if l, ok := f.([]any); ok && len(l) > 0 {
					x[k], changed = []any{HiddenCommand}, true
				}
			default:
				changed = redactJSON(f, k) || changed
			}
		}
	case []any:
		for _, e := range x {
			changed = redactJSON(e, in) || changed
		}
	}
	return changed
}

// redactor is the interceptor that passes every answer to a caller who
// may not read secrets through redacted.
type redactor struct{}

func (redactor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if err != nil || resp == nil || mayReadSecrets(ctx) {
			return resp, err
		}
		if m, ok := resp.Any().(proto.Message); ok {
			if c := redacted(m); c != m {
				// Into the answer's own message: its fields are set
				// anew, the cache's slices and maps are not touched.
				proto.Reset(m)
				proto.Merge(m, c)
			}
		}
		return resp, nil
	}
}

func (redactor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (redactor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if mayReadSecrets(ctx) {
			return next(ctx, conn)
		}
		return next(ctx, redactedConn{conn})
	}
}

// redactedConn sends each message of a stream redacted.
type redactedConn struct{ connect.StreamingHandlerConn }

func (c redactedConn) Send(msg any) error {
	if m, ok := msg.(proto.Message); ok {
		msg = redacted(m)
	}
	return c.StreamingHandlerConn.Send(msg)
}
