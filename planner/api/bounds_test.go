package api

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// unreachedPlanner is a Planner none of whose calls may be reached: any
// call but these panics, which the handler answers as an internal error.
type unreachedPlanner struct{ Planner }

func (unreachedPlanner) Params() alloc.Params                                  { return alloc.DefaultParams() }
func (unreachedPlanner) Record(state.Event)                                    {}
func (unreachedPlanner) RecordFailed(state.Event, func() string, string, bool) {}
func (unreachedPlanner) RecordUnchanged(state.Event, string, bool)             {}
func (unreachedPlanner) Panicked(where string, v any) error {
	return fmt.Errorf("%s reached the planner: %v", where, v)
}

// boundedFields walks the request messages of every method: for each
// string, bytes, list or map field, the method and the path of fields
// from the request down to it.
func boundedFields() map[protoreflect.FullName]struct {
	method protoreflect.MethodDescriptor
	path   []protoreflect.FieldDescriptor
} {
	out := map[protoreflect.FullName]struct {
		method protoreflect.MethodDescriptor
		path   []protoreflect.FieldDescriptor
	}{}
	sd := pinfoldv1.File_pinfold_v1_planner_proto.Services().Get(0)
	var walk func(md protoreflect.MethodDescriptor, msg protoreflect.MessageDescriptor, path []protoreflect.FieldDescriptor)
	walk = func(md protoreflect.MethodDescriptor, msg protoreflect.MessageDescriptor, path []protoreflect.FieldDescriptor) {
		for i := range msg.Fields().Len() {
			fd := msg.Fields().Get(i)
			p := append(slices.Clone(path), fd)
			switch {
			case fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap():
				walk(md, fd.Message(), p)
			case fd.IsList() || fd.IsMap() || fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind:
				if _, seen := out[fd.FullName()]; !seen {
					out[fd.FullName()] = struct {
						method protoreflect.MethodDescriptor
						path   []protoreflect.FieldDescriptor
					}{md, p}
				}
			}
		}
	}
	for i := range sd.Methods().Len() {
		md := sd.Methods().Get(i)
		walk(md, md.Input(), nil)
	}
	return out
}

// TestEveryRequestFieldIsBounded: requestBounds names every string, bytes,
// list and map field of every request, and nothing else.
func TestEveryRequestFieldIsBounded(t *testing.T) {
	t.Parallel()
	fields := boundedFields()
	for name := range fields {
		if _, ok := requestBounds[name]; !ok {
			t.Errorf("%s has no bound in requestBounds", name)
		}
	}
	for name := range requestBounds {
		if _, ok := fields[name]; !ok {
			t.Errorf("requestBounds names %s, no request field", name)
		}
	}
}

// TestRequestFieldBounds: for every bounded field, a request one byte (or
// one entry) over the bound is refused as invalid_argument naming the
// field and the bound, before the planner is reached, and what the error
// repeats of the value is clipped (a 3 MB agent version was stored and
// served, issue 26 N6; names, lists and maps were limited only by the
// request's 4 MiB).
func TestRequestFieldBounds(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(Handler(unreachedPlanner{}, Options{}))
	t.Cleanup(srv.Close)
	fields := boundedFields()
	for _, name := range slices.Sorted(func(yield func(protoreflect.FullName) bool) {
		for n := range requestBounds {
			if !yield(n) {
				return
			}
		}
	}) {
		b, f := requestBounds[name], fields[name]
		if f.method == nil {
			continue // TestEveryRequestFieldIsBounded says so
		}
		for _, dim := range []string{"bytes", "count"} {
			limit := map[string]int{"bytes": b.bytes, "count": b.count}[dim]
			if limit == 0 {
				continue
			}
			t.Run(fmt.Sprintf("%s/%s/%s", f.method.Name(), name.Name(), dim), func(t *testing.T) {
				t.Parallel()
				mt, err := protoregistry.GlobalTypes.FindMessageByName(f.method.Input().FullName())
				if err != nil {
					t.Fatal(err)
				}
				m := mt.New()
				r := m
				for _, fd := range f.path[:len(f.path)-1] {
					r = r.Mutable(fd).Message()
				}
				over(t, r, f.path[len(f.path)-1], dim, limit)
				body, err := protojson.Marshal(m.Interface())
				if err != nil {
					t.Fatal(err)
				}
				code, msg := call(t, srv.URL, f.method, body)
				want := fmt.Sprintf("want at most %d", limit)
				if code != "invalid_argument" || !strings.Contains(msg, string(name.Name())) || !strings.Contains(msg, want) {
					t.Errorf("%s with %s over its bound: %s %.300q; want invalid_argument naming %s and %q", f.method.Name(), name.Name(), code, msg, name.Name(), want)
				}
				if len(msg) > 1000 {
					t.Errorf("the error repeats %d bytes", len(msg))
				}
			})
		}
	}
}

// over sets fd of r one byte or one entry over limit.
func over(t *testing.T, r protoreflect.Message, fd protoreflect.FieldDescriptor, dim string, limit int) {
	t.Helper()
	long := strings.Repeat("x", limit+1)
	scalar := func(fd protoreflect.FieldDescriptor, i int, big bool) protoreflect.Value {
		switch fd.Kind() {
		case protoreflect.StringKind:
			if big {
				return protoreflect.ValueOfString(long)
			}
			return protoreflect.ValueOfString(fmt.Sprintf("k%d", i))
		case protoreflect.BytesKind:
			return protoreflect.ValueOfBytes([]byte(long))
		case protoreflect.Int32Kind:
			return protoreflect.ValueOfInt32(int32(i))
		case protoreflect.Int64Kind:
			return protoreflect.ValueOfInt64(int64(i))
		case protoreflect.DoubleKind:
			return protoreflect.ValueOfFloat64(0)
		}
		t.Fatalf("no value of kind %s", fd.Kind())
		return protoreflect.Value{}
	}
	switch {
	case fd.IsList():
		l := r.Mutable(fd).List()
		if dim == "bytes" {
			l.Append(scalar(fd, 0, true))
			return
		}
		for i := range limit + 1 {
			if fd.Kind() == protoreflect.MessageKind {
				l.Append(l.NewElement()) // a list of messages: its count
				continue
			}
			l.Append(scalar(fd, i, false))
		}
	case fd.IsMap():
		mp := r.Mutable(fd).Map()
		if dim == "bytes" {
			mp.Set(scalar(fd.MapKey(), 0, true).MapKey(), scalar(fd.MapValue(), 0, false))
			return
		}
		for i := range limit + 1 {
			mp.Set(scalar(fd.MapKey(), i, false).MapKey(), scalar(fd.MapValue(), i, false))
		}
	default:
		r.Set(fd, scalar(fd, 0, true))
	}
}

// call posts a JSON request to method (a server stream goes in Connect's
// envelope) and returns the Connect error code and message ("" when none).
func call(t *testing.T, url string, md protoreflect.MethodDescriptor, body []byte) (code, msg string) {
	t.Helper()
	ct := "application/json"
	if md.IsStreamingServer() {
		ct = "application/connect+json"
		env := make([]byte, 5, 5+len(body))
		binary.BigEndian.PutUint32(env[1:], uint32(len(body)))
		body = append(env, body...)
	}
	resp, err := http.Post(url+"/"+string(md.Parent().FullName())+"/"+string(md.Name()), ct, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if md.IsStreamingServer() {
		for len(b) >= 5 { // the last envelope is the end of the stream
			n := binary.BigEndian.Uint32(b[1:5])
			if b[0]&2 != 0 {
				b = b[5 : 5+n]
				var end struct {
					Error struct{ Code, Message string } `json:"error"`
				}
				if err := json.Unmarshal(b, &end); err != nil {
					t.Fatal(err)
				}
				return end.Error.Code, end.Error.Message
			}
			b = b[5+n:]
		}
		return "", ""
	}
	var e struct{ Code, Message string }
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%s: %v: %.300s", md.Name(), err, b)
	}
	return e.Code, e.Message
}
