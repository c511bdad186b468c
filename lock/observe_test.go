package lock_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/locktest"
	"github.com/coordkit/coordkit/internal/logtest"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/watchdog"
)

// TestObservability: a real background failure (the Redis server killed
// while a lease is held) is logged (a renewal that failed, the lease lost,
// with key, owner and token) and reaches the metrics hooks, whose key is the
// label WithMetricsKey makes of it; without WithMetricsKey the hooks get "".
func TestObservability(t *testing.T) {
	for _, name := range []string{"Client", "Simple"} {
		t.Run(name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			logs, m := &logtest.Recorder{}, &locktest.MetricsRecorder{}
			opts := []lock.ClientOption{lock.WithLogger(slog.New(logs)), lock.WithMetrics(m),
				lock.WithMetricsKey(locktest.MetricsKey)}
			var l lock.Locker
			if name == "Client" {
				c := lock.New(srv.Client(t), opts...)
				t.Cleanup(func() { c.Close() })
				l = c
			} else {
				s := lock.NewSimple(srv.Client(t), opts...)
				t.Cleanup(func() { s.Close() })
				l = s
			}
			locktest.LossObserved(t, l, uniqueKey(t), logs, m, srv.Kill, watchdog.ErrExpired)
		})
	}
}

// TestMetricsKeyOptIn: without WithMetricsKey, the hooks get "" for the key.
func TestMetricsKeyOptIn(t *testing.T) {
	m := &locktest.MetricsRecorder{}
	c := newClient(t, nil, lock.WithMetrics(m), lock.WithLogger(slog.New(slog.DiscardHandler)))
	ctx := ctxTimeout(t, 5*time.Second)
	l := mustObtain(t, ctx, c, uniqueKey(t))
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	calls := m.Calls()
	if len(calls) != 3 {
		t.Fatalf("calls %q, want waited, released and held", calls)
	}
	for _, c := range calls {
		if c != "waited " && c != "held " && c != "released " {
			t.Errorf("call %q carries a key", c)
		}
	}
}

// TestConstructionErrors: New and NewSimple report bad arguments at once
// through Err, and the first call returns the same error.
func TestConstructionErrors(t *testing.T) {
	rdb := shared.Client(t)
	for name, opt := range map[string]lock.ClientOption{
		"empty prefix": lock.WithPrefix(""),
		"brace":        lock.WithPrefix("a{"),
		"short TTL":    lock.WithDefaultTTL(time.Millisecond),
	} {
		c, s := lock.New(rdb, opt), lock.NewSimple(rdb, opt)
		for _, x := range []struct {
			err error
			l   lock.Locker
		}{{c.Err(), c}, {s.Err(), s}} {
			if !errors.Is(x.err, lock.ErrInvalid) {
				t.Errorf("%s: Err() = %v, want ErrInvalid", name, x.err)
			}
			if _, err := x.l.TryObtain(context.Background(), "k"); err != x.err {
				t.Errorf("%s: TryObtain = %v, want Err()'s %v", name, err, x.err)
			}
		}
		c.Close()
		s.Close()
	}
	if err := lock.New(rdb).Err(); err != nil {
		t.Errorf("valid client: Err() = %v", err)
	}
}
