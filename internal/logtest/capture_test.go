package logtest

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// fakeTB is a testing.TB whose output and cleanups the test sees.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex // protects out
	out      bytes.Buffer
	cleanups []func()
}

func (f *fakeTB) Output() io.Writer { return f }
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.out.Write(p)
}
func (f *fakeTB) lines() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.out.String()
}
func (f *fakeTB) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// TestCaptureRoutes: while a test captures, slog's default logger, the log
// package, go-redis's logger and Logger write to its output; a nested
// capture (a subtest) takes over until it ends, then the outer one again.
func TestCaptureRoutes(t *testing.T) {
	outer, inner := &fakeTB{TB: t}, &fakeTB{TB: t}
	Capture(outer)
	Capture(outer) // a second call changes nothing
	slog.Warn("renewal failed", "err", "zk: connection closed")
	log.Printf("zk: recv loop terminated")
	redisLogger{}.Printf(context.Background(), "redis: connection pool: failed to dial")
	Capture(inner)
	Logger("[mysql] ").Print("packets.go:58: unexpected EOF")
	inner.end()
	slog.Info("after the subtest")
	outer.end()
	if len(outer.cleanups) != 1 {
		t.Errorf("%d cleanups after two Captures, want 1", len(outer.cleanups))
	}

	got := outer.lines()
	for _, want := range []string{
		"level=WARN msg=\"renewal failed\" err=\"zk: connection closed\"\n",
		"level=INFO msg=\"zk: recv loop terminated\"\n",
		" redis: connection pool: failed to dial\n",
		"level=INFO msg=\"after the subtest\"\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("outer test's output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "mysql") {
		t.Errorf("the subtest's line reached the outer test:\n%s", got)
	}
	if got := inner.lines(); !strings.Contains(got, " [mysql] packets.go:58: unexpected EOF\n") || strings.Count(got, "\n") != 1 {
		t.Errorf("subtest's output: %q", got)
	}
	mu.Lock()
	n := len(tests)
	mu.Unlock()
	if n != 0 {
		t.Errorf("%d tests still capturing after their cleanups", n)
	}
}
