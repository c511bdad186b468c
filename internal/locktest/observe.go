package locktest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/logtest"
	"github.com/coordkit/coordkit/lock"
)

// MetricsRecorder keeps the hooks' calls as "hook key" strings and the
// errors they carried.
type MetricsRecorder struct {
	lock.NopMetrics
	mu    sync.Mutex
	calls []string
	errs  map[string][]error
}

func (m *MetricsRecorder) add(hook, key string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, hook+" "+key)
	if m.errs == nil {
		m.errs = map[string][]error{}
	}
	m.errs[hook] = append(m.errs[hook], err)
}
func (m *MetricsRecorder) Waited(k string, _ time.Duration, err error) { m.add("waited", k, err) }
func (m *MetricsRecorder) Held(k string, _ time.Duration)              { m.add("held", k, nil) }
func (m *MetricsRecorder) Renewed(k string, err error)                 { m.add("renewed", k, err) }
func (m *MetricsRecorder) Lost(k string, cause error)                  { m.add("lost", k, cause) }
func (m *MetricsRecorder) Released(k string, err error)                { m.add("released", k, err) }

// Calls returns the hooks' calls so far, as "hook key".
func (m *MetricsRecorder) Calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.calls...)
}

// Get returns the errors the calls of hook carried.
func (m *MetricsRecorder) Get(hook string) []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]error(nil), m.errs[hook]...)
}

// MetricsKey is the key function LossObserved expects the client to be
// built with: every key is reported as "orders".
func MetricsKey(string) string { return "orders" }

// LossObserved obtains key with l (built with logs as its logger, m as its
// metrics hooks and MetricsKey), calls fail (a real failure: a server
// killed), waits until the lease is lost and releases it, and checks what
// was logged and reported: a Warn "renewal failed", a Warn "lease lost"
// with key, owner and token and a cause matching lock.ErrLockLost and
// cause, and the hooks' calls, each with the mapped key: one obtain, at
// least one failed renewal, one loss, one release with Release's error.
func LossObserved(t testing.TB, l lock.Locker, key string, logs *logtest.Recorder, m *MetricsRecorder, fail func(), cause error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := l.Obtain(ctx, key, lock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatalf("Obtain(%q): %v", key, err)
	}
	fail()
	select {
	case <-lease.Lost():
	case <-time.After(15 * time.Second):
		t.Fatal("lease not lost within 15 s of the failure")
	}
	rerr := lease.Release(ctx)
	if rerr == nil {
		t.Fatal("Release after the failure succeeded")
	}

	r, attrs, ok := logs.Find("lease lost")
	if !ok || r.Level != slog.LevelWarn {
		t.Fatalf("no Warn record \"lease lost\" (%v)", r)
	}
	if attrs["key"] != key || attrs["token"] != lease.Token() || attrs["owner"] == "" {
		t.Errorf("lease lost record's attributes: %v", attrs)
	}
	if c, _ := attrs["cause"].(error); !errors.Is(c, lock.ErrLockLost) || !errors.Is(c, cause) {
		t.Errorf("lease lost cause %v, want lock.ErrLockLost and %v", attrs["cause"], cause)
	}
	if r, _, ok := logs.Find("renewal failed"); !ok || r.Level != slog.LevelWarn {
		t.Errorf("no Warn record \"renewal failed\"")
	}

	for _, c := range m.Calls() {
		if !strings.HasSuffix(c, " orders") {
			t.Errorf("hook call %q without the mapped key", c)
		}
	}
	if w := m.Get("waited"); len(w) != 1 || w[0] != nil {
		t.Errorf("waited: %v", w)
	}
	if lost := m.Get("lost"); len(lost) != 1 || !errors.Is(lost[0], lock.ErrLockLost) {
		t.Errorf("lost: %v", lost)
	}
	failed := 0
	for _, err := range m.Get("renewed") {
		if err != nil {
			failed++
		}
	}
	if failed == 0 {
		t.Errorf("no failed renewal reported")
	}
	if rel := m.Get("released"); len(rel) != 1 || rel[0] != rerr {
		t.Errorf("released: %v, want Release's %v", rel, rerr)
	}
}
