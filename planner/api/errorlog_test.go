package api

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServerErrorLogSampled: 1,000 server lines in one second write
// ServerLogLinesPerSecond, and the next second's first line says how
// many were left out. Control: lines a second apart are all written.
func TestServerErrorLogSampled(t *testing.T) {
	for _, tc := range []struct {
		name      string
		step      time.Duration
		n, wantIn int
	}{
		{"a flood", time.Microsecond, 1000, ServerLogLinesPerSecond},
		{"control: a second apart", time.Second, 20, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
			s := &sampledLines{h: slog.NewTextHandler(&buf, nil), now: func() time.Time { return now }}
			for range tc.n {
				_, _ = s.Write([]byte("http: TLS handshake error from 127.0.0.1:1: EOF\n"))
				now = now.Add(tc.step)
			}
			now = now.Add(time.Second)
			_, _ = s.Write([]byte("last\n"))
			out := buf.String()
			if got := strings.Count(out, "TLS handshake error"); got != tc.wantIn {
				t.Errorf("%d of %d lines written, want %d", got, tc.n, tc.wantIn)
			}
			if left := tc.n - tc.wantIn; left > 0 && !strings.Contains(out, "lines="+strconv.Itoa(left)) {
				t.Errorf("no line says %d were left out:\n%s", left, out)
			}
		})
	}
}
