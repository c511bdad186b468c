package etcdlock_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/etcd/etcdlock"
	"github.com/coordkit/coordkit/lock"
)

// recMetrics records the hooks' calls.
type recMetrics struct {
	lock.NopMetrics
	mu       sync.Mutex
	waited   []error
	held     []time.Duration
	renewed  int
	lost     []error
	released []error
	keys     map[string]bool
}

func (m *recMetrics) Waited(key string, _ time.Duration, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waited = append(m.waited, err)
	m.keys[key] = true
}

func (m *recMetrics) Held(key string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held = append(m.held, d)
}

func (m *recMetrics) Renewed(string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.renewed++
}

func (m *recMetrics) Lost(_ string, cause error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lost = append(m.lost, cause)
}

func (m *recMetrics) Released(_ string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.released = append(m.released, err)
}

func (m *recMetrics) snapshot() recMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	return recMetrics{waited: append([]error(nil), m.waited...), held: append([]time.Duration(nil), m.held...),
		renewed: m.renewed, lost: append([]error(nil), m.lost...), released: append([]error(nil), m.released...)}
}

// TestMetrics: the lock.Metrics hooks see every acquisition (mutex and
// read-write sides), every Release, a hold's end once (its release or
// its loss), the keep-alives, and a loss with its cause.
func TestMetrics(t *testing.T) {
	cli := dial(t, server.Endpoints()...)
	m := &recMetrics{keys: map[string]bool{}}
	c := newClient(t, cli, etcdlock.WithMetrics(m), etcdlock.WithMetricsKey(func(k string) string { return "label:" + k[:1] }))
	other := newClient(t, cli)
	ctx := ctxFor(t, 30*time.Second)

	l := obtain(t, c, ctx, "k")
	time.Sleep(20 * time.Millisecond)
	release(t, l)
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
	held := obtain(t, other, ctx, "k")
	if _, err := c.TryObtain(ctx, "k"); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryObtain of a held key: %v, want ErrNotObtained", err)
	}
	release(t, held)
	r := obtain(t, c.Read(), ctx, "rw")
	release(t, r)

	s := m.snapshot()
	if len(s.waited) != 3 || s.waited[0] != nil || !errors.Is(s.waited[1], lock.ErrNotObtained) || s.waited[2] != nil {
		t.Errorf("Waited: %v, want nil, ErrNotObtained, nil", s.waited)
	}
	if len(s.held) != 2 || s.held[0] < 20*time.Millisecond {
		t.Errorf("Held: %v, want 2, the first at least 20ms", s.held)
	}
	if len(s.released) != 3 || s.released[0] != nil || !errors.Is(s.released[1], lock.ErrNotHeld) || s.released[2] != nil {
		t.Errorf("Released: %v, want nil, ErrNotHeld, nil", s.released)
	}
	m.mu.Lock()
	if len(m.keys) != 2 || !m.keys["label:k"] || !m.keys["label:r"] {
		t.Errorf("labels %v, want label:k and label:r", m.keys)
	}
	m.mu.Unlock()

	// A hold across keep-alives (every T/6), then lost with the Client.
	l = obtain(t, c, ctx, "k")
	deadline := time.Now().Add(ttl)
	for m.snapshot().renewed == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if m.snapshot().renewed == 0 {
		t.Errorf("no Renewed within the TTL %v (keep-alives every T/6)", ttl)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !closed(l.Lost()) {
		t.Fatal("Close did not close Lost")
	}
	s = m.snapshot() // Close waits for the keeper, which reports the loss
	if len(s.lost) != 1 || !errors.Is(s.lost[0], lock.ErrLockLost) || !errors.Is(s.lost[0], lock.ErrClosed) {
		t.Errorf("Lost: %v, want one matching ErrLockLost and ErrClosed", s.lost)
	}
	if len(s.held) != 3 {
		t.Errorf("Held after the loss: %d calls, want 3", len(s.held))
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("release of the lost hold: %v, want ErrNotHeld", err)
	}
	if s = m.snapshot(); len(s.held) != 3 || len(s.released) != 4 {
		t.Errorf("after the lost hold's release: Held %d, Released %d calls, want 3 and 4", len(s.held), len(s.released))
	}
}
