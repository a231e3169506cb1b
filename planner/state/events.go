package state

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinfold/pinfold/planner/model"
)

// EventsPrefix holds the event log: outside Prefix, so the store's cache
// and watch never carry it.
const EventsPrefix = "/pinfold/events/v1/"

// Event is one change to the cluster, who asked for it and how it ended.
type Event struct {
	// ID orders events: the time in nanoseconds (20 digits), then the
	// writing planner's marker and a sequence number.
	ID       string    `json:"id"`
	Time     time.Time `json:"time"`
	Identity string    `json:"identity"` // the client certificate's name; "local" without TLS; "planner" for its own moves
	Kind     string    `json:"kind"`     // Deploy, Resize, DrainHost, Heal, Move, Refused, …
	Subject  string    `json:"subject"`  // the service, instance or host acted on
	Host     string    `json:"host,omitempty"`
	Service  string    `json:"service,omitempty"`
	// ServiceExact: Service is the name a request gave for a service (a
	// deploy's or a scale's): that service only, never an instance of
	// another although shaped like one (a refused deploy of
	// web-0123456789 is no event of web's). Unset, Service is a service's
	// name or a request's target, an instance ID or a service name (events
	// written before the field have it unset).
	ServiceExact bool   `json:"service_exact,omitempty"`
	Request      string `json:"request,omitempty"` // the request as JSON, cut at MaxEventText
	Outcome      string `json:"outcome"`           // "ok", or the error, cut at MaxEventText
}

// Bounds on one event, whoever writes it: every field is cut (Clipped),
// so that an event takes at most about 5.5 KB of memory while queued and
// of etcd once written, and a batch of MaxEventsPerCommit stays well under
// etcd's 1.5 MiB request limit whatever callers send (60 refused calls
// with 4 MB names once took the planner to 2.1 GB and its events past
// etcd's limit, issue 26 N1).
const (
	// MaxEventText bounds an event's request and outcome texts.
	MaxEventText = 2 << 10
	// MaxEventField bounds each of its other fields (identity, kind,
	// subject, host, service): above the longest valid name (253 bytes).
	MaxEventField = 256
)

// MaxEventsPerCommit bounds the events written in one transaction (etcd's
// default limit is 128 operations).
const MaxEventsPerCommit = 100

// eventKey is the key of the event with ID id.
func eventKey(id string) string { return EventsPrefix + id }

// NewEventID is an event ID for time t from this store (seq numbers
// events written in the same nanosecond).
func (s *Store) NewEventID(t time.Time, seq int64) string {
	return fmt.Sprintf("%020d-%s-%d", t.UnixNano(), s.id[:8], seq)
}

// PutEvents writes events in transactions of at most MaxEventsPerCommit.
func (s *Store) PutEvents(ctx context.Context, evs []Event) error {
	for len(evs) > 0 {
		n := min(len(evs), MaxEventsPerCommit)
		ops := make([]clientv3.Op, 0, n)
		for _, ev := range evs[:n] {
			ev = ev.Clipped()
			b, err := json.Marshal(ev)
			if err != nil {
				return fmt.Errorf("state: event %s: %w", ev.ID, err)
			}
			ops = append(ops, clientv3.OpPut(eventKey(ev.ID), string(b)))
		}
		if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("state: write %d events: %w", n, err)
		}
		evs = evs[n:]
	}
	return nil
}

// PutEvent writes ev, cut to its bounds (Clipped), with the change: the
// event of a committed change is in etcd the moment the change is, never
// lost with a planner killed after it answered (issue 26 N10). Its ID must
// be set (Store.NewEventID).
func (c *Change) PutEvent(ev Event) {
	ev = ev.Clipped()
	c.put(eventKey(ev.ID), ev)
}

// Clipped is ev with every field cut to its bound (MaxEventField;
// MaxEventText for the request and outcome).
func (ev Event) Clipped() Event {
	for _, f := range []*string{&ev.ID, &ev.Identity, &ev.Kind, &ev.Subject, &ev.Host, &ev.Service} {
		*f = clipTo(*f, MaxEventField)
	}
	ev.Request, ev.Outcome = clipTo(ev.Request, MaxEventText), clipTo(ev.Outcome, MaxEventText)
	return ev
}

// clipTo is s cut to at most n bytes, on a rune boundary, ending in "…"
// when cut.
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Events returns up to limit events after the one with ID after ("": from
// the oldest kept), oldest first, that keep accepts (nil: all). It reads at
// most scan events to find them (the filter's cost is bounded).
func (s *Store) Events(ctx context.Context, after string, limit, scan int, keep func(Event) bool) ([]Event, error) {
	from := EventsPrefix
	if after != "" {
		from = eventKey(after) + "\x00"
	}
	return s.scanEvents(ctx, from, false, limit, scan, keep)
}

// LatestEvents returns the newest limit events that keep accepts (nil:
// all), oldest first, reading at most scan events back from the newest.
func (s *Store) LatestEvents(ctx context.Context, limit, scan int, keep func(Event) bool) ([]Event, error) {
	out, err := s.scanEvents(ctx, EventsPrefix, true, limit, scan, keep)
	slices.Reverse(out)
	return out, err
}

// scanEvents reads the events from the key from to the end of the log
// (newest first when newest), a page at a time, until limit of them keep
// accepts or scan were read.
func (s *Store) scanEvents(ctx context.Context, from string, newest bool, limit, scan int, keep func(Event) bool) ([]Event, error) {
	end := clientv3.GetPrefixRangeEnd(EventsPrefix)
	order := clientv3.SortAscend
	if newest {
		order = clientv3.SortDescend
	}
	var out []Event
	for scanned := 0; scanned < scan && len(out) < limit; {
		page := min(500, scan-scanned)
		resp, err := s.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(int64(page)), clientv3.WithSort(clientv3.SortByKey, order))
		if err != nil {
			return nil, fmt.Errorf("state: read events: %w", err)
		}
		for _, kv := range resp.Kvs {
			scanned++
			var ev Event
			if json.Unmarshal(kv.Value, &ev) != nil {
				continue
			}
			if keep == nil || keep(ev) {
				if out = append(out, ev); len(out) == limit {
					break
				}
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		last := string(resp.Kvs[len(resp.Kvs)-1].Key)
		if newest {
			end = last
		} else {
			from = last + "\x00"
		}
	}
	return out, nil
}

// PruneEvents deletes events older than before (zero: none by age) and the
// oldest beyond keep (0: no count limit), and reports how many it deleted.
func (s *Store) PruneEvents(ctx context.Context, keep int, before time.Time) (int, error) {
	deleted := 0
	if !before.IsZero() {
		resp, err := s.cli.Delete(ctx, EventsPrefix, clientv3.WithRange(EventsPrefix+fmt.Sprintf("%020d", before.UnixNano())))
		if err != nil {
			return 0, fmt.Errorf("state: prune events before %s: %w", before.Format(time.RFC3339), err)
		}
		deleted += int(resp.Deleted)
	}
	if keep <= 0 {
		return deleted, nil
	}
	count, err := s.cli.Get(ctx, EventsPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return deleted, fmt.Errorf("state: count events: %w", err)
	}
	over := int(count.Count) - keep
	if over <= 0 {
		return deleted, nil
	}
	// The key just past the oldest `over` events ends the range deleted.
	resp, err := s.cli.Get(ctx, EventsPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(over)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) == 0 {
		return deleted, err
	}
	last := string(resp.Kvs[len(resp.Kvs)-1].Key)
	del, err := s.cli.Delete(ctx, EventsPrefix, clientv3.WithRange(last+"\x00"))
	if err != nil {
		return deleted, fmt.Errorf("state: prune events to the newest %d: %w", keep, err)
	}
	return deleted + int(del.Deleted), nil
}

// EventMatches is a filter on service and host ("": any).
func EventMatches(service, host string) func(Event) bool {
	if service == "" && host == "" {
		return nil
	}
	return func(ev Event) bool {
		// The service's own events, and those of its instances (an
		// instance named as a call's target is its Service; a host's
		// events have none, whatever the host's name);
		// never another service whose name only begins the same (issue
		// 36: --service sec7 listed sec7-x's), nor a name a request gave
		// as a service's, shaped like an instance of this one (issue 36:
		// --service web listed the refused deploy of web-0123456789).
		return (service == "" || ev.Service == service || !ev.ServiceExact && model.IsInstanceOf(ev.Service, service)) &&
			(host == "" || ev.Host == host)
	}
}
