package api

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// ServerLogLinesPerSecond bounds the lines the HTTP server writes to the
// planner's log (failed TLS handshakes, one per connection): a flood of
// connections wrote one WARN line each (attack review: 40,990 lines).
const ServerLogLinesPerSecond = 10

// ServerErrorLog is the HTTP server's ErrorLog: its lines at WARN through
// h, at most ServerLogLinesPerSecond a second; the first line of the next
// second says how many were left out.
func ServerErrorLog(h slog.Handler) *log.Logger {
	return log.New(&sampledLines{h: h, now: time.Now}, "", 0)
}

type sampledLines struct {
	h   slog.Handler
	now func() time.Time

	mu      sync.Mutex
	second  time.Time
	written int
	dropped int
}

func (s *sampledLines) Write(p []byte) (int, error) {
	now := s.now()
	s.mu.Lock()
	if sec := now.Truncate(time.Second); !sec.Equal(s.second) {
		if s.dropped > 0 {
			r := slog.NewRecord(now, slog.LevelWarn, "server log lines left out", 0)
			r.AddAttrs(slog.Int("lines", s.dropped), slog.Int("at_most_per_second", ServerLogLinesPerSecond))
			_ = s.h.Handle(context.Background(), r)
		}
		s.second, s.written, s.dropped = sec, 0, 0
	}
	if s.written >= ServerLogLinesPerSecond {
		s.dropped++
		s.mu.Unlock()
		return len(p), nil
	}
	s.written++
	s.mu.Unlock()
	r := slog.NewRecord(now, slog.LevelWarn, strings.TrimSuffix(string(p), "\n"), 0)
	_ = s.h.Handle(context.Background(), r)
	return len(p), nil
}
