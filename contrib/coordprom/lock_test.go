package coordprom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/contrib/coordprom"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
	"github.com/coordkit/coordkit/watchdog"
	"github.com/coordkit/coordkit/zklock"
)

// prefix is the WithMetricsKey of the tests: a key's part before the first ':'.
func prefix(key string) string {
	p, _, _ := strings.Cut(key, ":")
	return p
}

var quiet = slog.New(slog.DiscardHandler)

// newLockClient returns a lock client on rdb reporting to a new LockMetrics
// of backend "redis" on reg; the client is closed when the test ends.
func newLockClient(t *testing.T, reg prometheus.Registerer, rdb redis.UniversalClient) *lock.Client {
	t.Helper()
	m, err := coordprom.NewLockMetrics(reg, coordprom.WithBackend("redis"))
	if err != nil {
		t.Fatal(err)
	}
	c := lock.New(rdb, lock.WithMetrics(m), lock.WithMetricsKey(prefix), lock.WithLogger(quiet))
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLockClient: a lock.Client on a real Redis reports through the
// adapter: an Obtain and its Release, a TryObtain and an Obtain on a held
// key, a second Release, and a lease lost because its key was deleted.
func TestLockClient(t *testing.T) {
	reg := prometheus.NewRegistry()
	rdb := shared.Client(t)
	c := newLockClient(t, reg, rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := "orders:" + uniqueKey(t)

	l, err := c.Obtain(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryObtain(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryObtain on a held key: %v, want ErrNotObtained", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = c.Obtain(wctx, key)
	wcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Obtain until a deadline on a held key: %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}

	// A lease whose key is deleted: its next renewal (TTL/3) finds it not
	// held. 1.5 s: with 300 ms, a renewal starved for 200 ms (load 23 on 2
	// cores) would lose the lease as expired before the deletion told.
	lost := "orders:" + uniqueKey(t)
	l, err = c.Obtain(ctx, lost, lock.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, lock.DefaultPrefix+"{"+lost+"}").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not lost 5 s after its key was deleted")
	}
	redisLabels := func(kv ...string) map[string]string {
		m := map[string]string{"backend": "redis", "key": "orders"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	eventually(t, 2*time.Second, "loss counted", func() bool {
		n, _, _ := sample(t, reg, "coordkit_lock_lost_total", redisLabels("reason", "not_held"))
		return n == 1
	})
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release of a lost lease: %v, want ErrNotHeld", err)
	}

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"coordkit_lock_obtain_seconds", redisLabels("result", "ok"), 2},
		{"coordkit_lock_obtain_seconds", redisLabels("result", "not_obtained"), 1},
		{"coordkit_lock_obtain_seconds", redisLabels("result", "canceled"), 1},
		{"coordkit_lock_held_seconds", redisLabels(), 2},
		{"coordkit_lock_renewals_total", redisLabels("result", "error"), 1},
	} {
		if got := count(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	// The canceled wait lasted its 50 ms; the first hold at least 70 ms.
	if _, sum, _ := sample(t, reg, "coordkit_lock_obtain_seconds", redisLabels("result", "canceled")); sum < 0.045 || sum > 5 {
		t.Errorf("canceled wait observed as %v s, want about 0.05", sum)
	}
	if _, sum, _ := sample(t, reg, "coordkit_lock_held_seconds", redisLabels()); sum < 0.065 {
		t.Errorf("holds observed as %v s in all, want at least 0.07", sum)
	}
	// The counters, whole: one series per label set, the unbounded keys
	// collapsed into "orders" by WithMetricsKey.
	want := `
# HELP coordkit_lock_lost_total Leases lost, by reason (expired, not_held, max_hold, closed, session_expired, other).
# TYPE coordkit_lock_lost_total counter
coordkit_lock_lost_total{backend="redis",key="orders",reason="not_held"} 1
# HELP coordkit_lock_releases_total Release calls, by result (ok, not_held, error).
# TYPE coordkit_lock_releases_total counter
coordkit_lock_releases_total{backend="redis",key="orders",result="not_held"} 2
coordkit_lock_releases_total{backend="redis",key="orders",result="ok"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"coordkit_lock_lost_total", "coordkit_lock_releases_total"); err != nil {
		t.Error(err)
	}
}

// TestLockLossReasons: leases lost to real causes are counted under their
// reason: renewals failing until the TTL passed (Redis killed), the
// maximum hold time, the client's Close.
func TestLockLossReasons(t *testing.T) {
	for _, tc := range []struct {
		reason string
		ttl    time.Duration
		opts   []lock.Option
		lose   func(srv *testserver.Redis, c *lock.Client)
	}{
		{"expired", 300 * time.Millisecond, nil, func(srv *testserver.Redis, _ *lock.Client) { srv.Kill() }},
		// MaxHold well within the TTL: a renewal starved under load cannot
		// expire the lease first (150 ms and 100 ms could).
		{"max_hold", 3 * time.Second, []lock.Option{lock.WithMaxHold(time.Second)}, func(*testserver.Redis, *lock.Client) {}},
		{"closed", time.Second, nil, func(_ *testserver.Redis, c *lock.Client) { c.Close() }},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			reg := prometheus.NewRegistry()
			c := newLockClient(t, reg, srv.Client(t))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			key := "jobs:" + uniqueKey(t)
			l, err := c.Obtain(ctx, key, append(tc.opts, lock.WithTTL(tc.ttl))...)
			if err != nil {
				t.Fatal(err)
			}
			tc.lose(srv, c)
			select {
			case <-l.Lost():
			case <-time.After(10 * time.Second):
				t.Fatal("lease not lost within 10 s")
			}
			want := map[string]string{"backend": "redis", "key": "jobs", "reason": tc.reason}
			eventually(t, 2*time.Second, "loss counted as "+tc.reason, func() bool {
				n, _, _ := sample(t, reg, "coordkit_lock_lost_total", want)
				return n == 1
			})
			if n := testutil.CollectAndCount(reg, "coordkit_lock_lost_total"); n != 1 {
				t.Errorf("%d loss series, want 1", n)
			}
		})
	}
}

// TestLockClassification: every result and reason the adapter tells apart,
// from errors as the backends build them (wrapped, joined).
func TestLockClassification(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := coordprom.NewLockMetrics(reg, coordprom.WithBackend("test"))
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name, label, value string
		call               func()
	}{
		{"coordkit_lock_obtain_seconds", "result", "ok", func() { m.Waited("k", time.Millisecond, nil) }},
		{"coordkit_lock_obtain_seconds", "result", "not_obtained", func() {
			m.Waited("k", time.Millisecond, errors.Join(redlock.ErrNoQuorum, lock.ErrNotObtained))
		}},
		{"coordkit_lock_obtain_seconds", "result", "canceled", func() {
			m.Waited("k", time.Millisecond, errors.Join(lock.ErrNotObtained, context.Canceled))
		}},
		{"coordkit_lock_obtain_seconds", "result", "canceled", func() {
			m.Waited("k", time.Millisecond, errors.Join(lock.ErrNotObtained, context.DeadlineExceeded))
		}},
		{"coordkit_lock_obtain_seconds", "result", "error", func() { m.Waited("k", time.Millisecond, boom) }},
		{"coordkit_lock_renewals_total", "result", "ok", func() { m.Renewed("k", nil) }},
		{"coordkit_lock_renewals_total", "result", "error", func() { m.Renewed("k", boom) }},
		{"coordkit_lock_lost_total", "reason", "expired", func() {
			m.Lost("k", fmt.Errorf("%w: %w", lock.ErrLockLost, fmt.Errorf("%w: %w", watchdog.ErrExpired, boom)))
		}},
		{"coordkit_lock_lost_total", "reason", "max_hold", func() { m.Lost("k", watchdog.ErrMaxHold) }},
		{"coordkit_lock_lost_total", "reason", "not_held", func() {
			m.Lost("k", fmt.Errorf("%w: %w", lock.ErrNotHeld, watchdog.ErrNotHeld))
		}},
		{"coordkit_lock_lost_total", "reason", "not_held", func() { m.Lost("k", watchdog.ErrNotHeld) }},
		{"coordkit_lock_lost_total", "reason", "closed", func() { m.Lost("k", zklock.ErrClosed) }},
		{"coordkit_lock_lost_total", "reason", "session_expired", func() {
			m.Lost("k", fmt.Errorf("%w: %w", lock.ErrLockLost, zklock.ErrSessionExpired))
		}},
		{"coordkit_lock_lost_total", "reason", "other", func() { m.Lost("k", boom) }},
		{"coordkit_lock_releases_total", "result", "ok", func() { m.Released("k", nil) }},
		{"coordkit_lock_releases_total", "result", "not_held", func() { m.Released("k", lock.ErrNotHeld) }},
		{"coordkit_lock_releases_total", "result", "error", func() { m.Released("k", boom) }},
	} {
		labels := map[string]string{"backend": "test", "key": "k", tc.label: tc.value}
		before, _, _ := sample(t, reg, tc.name, labels)
		tc.call()
		if after, _, _ := sample(t, reg, tc.name, labels); after != before+1 {
			t.Errorf("%s{%s=%q}: %v after %v, want one more", tc.name, tc.label, tc.value, after, before)
		}
	}
	// A key that is not UTF-8 (lock keys are any string) is reported, not a panic.
	m.Released("bad\xff", nil)
	if n := count(t, reg, "coordkit_lock_releases_total", map[string]string{"key": "bad\uFFFD", "result": "ok"}); n != 1 {
		t.Errorf("release of a non-UTF-8 key counted %v times", n)
	}
}

// TestLockBackends: two lock clients in one process, a Redis hash lock and
// a Redlock, each with an adapter of its own backend on the same registry,
// report side by side; a second adapter for the same backend is refused and
// leaves the first one's metrics in place.
func TestLockBackends(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newLockClient(t, reg, shared.Client(t))
	rm, err := coordprom.NewLockMetrics(reg, coordprom.WithBackend("redlock"))
	if err != nil {
		t.Fatalf("second backend: %v", err)
	}
	var masters []redis.UniversalClient
	for _, srv := range testserver.StartRedisMasters(t, 3) {
		masters = append(masters, srv.Client(t))
	}
	rl, err := redlock.New(masters, redlock.WithMetrics(rm), redlock.WithLogger(quiet), redlock.WithNodeTimeout(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, l := range []lock.Locker{c, rl} {
		lease, err := l.Obtain(ctx, uniqueKey(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, backend := range []string{"redis", "redlock"} {
		// No WithMetricsKey on these clients: the key label is "".
		labels := map[string]string{"backend": backend, "result": "ok"}
		if n := count(t, reg, "coordkit_lock_releases_total", labels); n != 1 {
			t.Errorf("releases of %s: %v, want 1", backend, n)
		}
	}

	_, err = coordprom.NewLockMetrics(reg, coordprom.WithBackend("redis"))
	if are := (prometheus.AlreadyRegisteredError{}); !errors.As(err, &are) {
		t.Fatalf("same backend again: %v, want a prometheus.AlreadyRegisteredError", err)
	}
	if n := testutil.CollectAndCount(reg, "coordkit_lock_releases_total"); n != 2 {
		t.Errorf("%d release series after the refused registration, want 2", n)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestInvalid: invalid arguments are errors matching ErrInvalid or the
// registry's own, never panics, and register nothing.
func TestInvalid(t *testing.T) {
	reg := prometheus.NewRegistry()
	for name, f := range map[string]func() error{
		"nil registerer":       func() error { _, err := coordprom.NewLockMetrics(nil); return err },
		"nil registerer (ids)": func() error { _, err := coordprom.NewIDMetrics(nil); return err },
		"decreasing buckets": func() error {
			_, err := coordprom.NewLockMetrics(reg, coordprom.WithWaitBuckets([]float64{1, 0.5}))
			return err
		},
		"no buckets": func() error {
			_, err := coordprom.NewLockMetrics(reg, coordprom.WithHeldBuckets(nil))
			return err
		},
		"equal buckets (ids)": func() error {
			_, err := coordprom.NewIDMetrics(reg, coordprom.WithWaitBuckets([]float64{1, 1}))
			return err
		},
	} {
		if err := f(); !errors.Is(err, coordprom.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// A constant label that clashes with a variable one: the registry refuses it.
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"key": "x"}, reg)
	if _, err := coordprom.NewLockMetrics(wrapped); err == nil {
		t.Error("constant label key accepted")
	}
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
		t.Errorf("after the failures, the registry has %d families (err %v), want none", len(mfs), err)
	}
}
