package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

func TestLoss(t *testing.T) {
	tests := []struct {
		name  string
		fault func(t *testing.T, srv *testserver.Redis, key string)
	}{
		{"key deleted by hand", func(t *testing.T, srv *testserver.Redis, key string) {
			if err := srv.Client(t).Del(context.Background(), lock.DefaultPrefix+"{"+key+"}").Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"server restarted without data", func(t *testing.T, srv *testserver.Redis, key string) {
			if err := srv.Restart(false); err != nil {
				t.Fatal(err)
			}
		}},
		{"server paused past the TTL", func(t *testing.T, srv *testserver.Redis, key string) {
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(700 * time.Millisecond)
			if err := srv.Resume(); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			key := uniqueKey(t)
			a := newClient(t, srv)
			ctx := ctxTimeout(t, 30*time.Second)
			obtained := make(chan int64, 1)
			var cause error
			var lost time.Time
			done := make(chan error, 1)
			go func() {
				done <- lock.Do(ctx, a, key, func(ctx context.Context) error {
					l, err := a.TryObtain(ctx, key) // the token, by re-entry
					if err != nil {
						return err
					}
					obtained <- l.Token()
					<-ctx.Done()
					lost = time.Now()
					cause = context.Cause(ctx)
					l.Release(context.Background())
					return ctx.Err()
				}, lock.WithTTL(300*time.Millisecond))
			}()
			var token int64
			select {
			case token = <-obtained:
			case err := <-done:
				t.Fatalf("Do: %v", err)
			}
			began := time.Now()
			tt.fault(t, srv, key)
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Do's function not cancelled after the loss")
			}
			if !errors.Is(err, lock.ErrLockLost) || !errors.Is(cause, lock.ErrLockLost) {
				t.Fatalf("Do = %v, cause %v; want ErrLockLost", err, cause)
			}
			if d := lost.Sub(began); d > 5*time.Second {
				t.Fatalf("loss noticed after %v", d)
			}
			b := newClient(t, srv)
			l := mustObtain(t, ctx, b, key)
			if l.Token() <= token {
				t.Fatalf("next holder's token %d not above %d", l.Token(), token)
			}
			l.Release(ctx)
		})
	}
}

func TestForceRelease(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	key := uniqueKey(t)
	a, b := newClient(t, nil), newClient(t, nil)
	// 1.5 s: a's hold must outlive the wait for b to queue, whatever the
	// host's load; with 150 ms a starved renewal lets it expire first, and
	// ForceRelease finds nothing to release.
	la := mustObtain(t, ctx, a, key, lock.WithTTL(1500*time.Millisecond))
	got := make(chan lock.Lease, 1)
	go func() {
		l, err := b.Obtain(ctx, key, lock.WithTTL(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueued(t, a, key, 1)
	ok, err := b.ForceRelease(ctx, key)
	if err != nil || !ok {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	lb := <-got
	waitClosed(t, la.Lost(), 3*time.Second, "former holder's Lost")
	if lb.Token() <= la.Token() {
		t.Fatalf("token %d not above %d", lb.Token(), la.Token())
	}
	if err := la.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("former holder's release: %v", err)
	}
	lb.Release(ctx)
	if ok, err := b.ForceRelease(ctx, key); ok || err != nil {
		t.Fatalf("ForceRelease of a free lock = %v, %v", ok, err)
	}
}

// waitQueued waits until key's queue holds n waiters.
func waitQueued(t testing.TB, c *lock.Client, key string, n int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		info, err := c.Inspect(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Waiters) == n {
			return
		}
	}
	t.Fatalf("%d waiters not queued for %q", n, key)
}

// waitInLine waits until n goroutines of c wait in its local line for key.
func waitInLine(t testing.TB, c *lock.Client, key string, n int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if lock.InLine(c, key) == n {
			return
		}
	}
	t.Fatalf("%d goroutines not in line for %q", n, key)
}
