// Package logtest holds the tests' log helpers: Recorder, a slog.Handler
// that records what a client logs, for the tests of every package that
// takes WithLogger; and Capture, which routes what libraries log through
// the process-wide loggers (slog's default, the log package, go-redis's
// logger) to the output of the test that runs, not to stderr.
package logtest

import (
	"context"
	"log/slog"
	"sync"
)

// Recorder is a slog.Handler that keeps every record.
type Recorder struct {
	mu  sync.Mutex
	got []slog.Record
}

func (h *Recorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *Recorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.got = append(h.got, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *Recorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *Recorder) WithGroup(string) slog.Handler      { return h }

// Records returns the records kept so far.
func (h *Recorder) Records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.got...)
}

// Find returns the first record with msg, and its attributes by key.
func (h *Recorder) Find(msg string) (slog.Record, map[string]any, bool) {
	for _, r := range h.Records() {
		if r.Message == msg {
			return r, Attrs(r), true
		}
	}
	return slog.Record{}, nil, false
}

// Attrs returns a record's attributes by key.
func Attrs(r slog.Record) map[string]any {
	attrs := map[string]any{}
	r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.Any(); return true })
	return attrs
}
