package state

import (
	"context"
	"log/slog"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog is a zap core that writes etcd's logs (the embedded server's
// and the client's) through the daemon's slog logger, as component=etcd,
// so they share its format, level and destination. etcd's error stack
// traces are dropped (the message and fields say what failed).
type zapToSlog struct {
	log    *slog.Logger
	min    zapcore.Level
	fields []zapcore.Field
}

// newZapLogger is a zap logger over log at min and above.
func newZapLogger(log *slog.Logger, min zapcore.Level) *zap.Logger {
	return zap.New(&zapToSlog{log: log.With("component", "etcd"), min: min})
}

func (c *zapToSlog) Enabled(l zapcore.Level) bool { return l >= c.min }

func (c *zapToSlog) With(fs []zapcore.Field) zapcore.Core {
	return &zapToSlog{log: c.log, min: c.min, fields: append(c.fields[:len(c.fields):len(c.fields)], fs...)}
}

func (c *zapToSlog) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *zapToSlog) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(c.fields[:len(c.fields):len(c.fields)], fs...) {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+1)
	for k, v := range enc.Fields {
		if k == "stacktrace" {
			continue
		}
		attrs = append(attrs, slog.Any(k, v))
	}
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	level := slogLevel(e.Level)
	if errText, _ := enc.Fields["error"].(string); level == slog.LevelError && closing(errText) {
		level = slog.LevelDebug // its listeners closing under a clean shutdown
	}
	c.log.LogAttrs(context.Background(), level, strings.TrimSpace(e.Message), attrs...)
	return nil
}

// closing reports whether an etcd error is only its servers or listeners
// being closed (Close of the embedded etcd), not a failure.
func closing(errText string) bool {
	return strings.Contains(errText, "use of closed network connection") || strings.Contains(errText, "http: Server closed") ||
		strings.Contains(errText, "grpc: the server has been stopped")
}

func (c *zapToSlog) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l >= zapcore.WarnLevel:
		return slog.LevelWarn
	case l >= zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// zapLevel reads etcd's level names (debug, info, warn, error, panic,
// fatal); unknown ones are error.
func zapLevel(name string) zapcore.Level {
	var l zapcore.Level
	if err := l.UnmarshalText([]byte(name)); err != nil {
		return zapcore.ErrorLevel
	}
	return l
}
