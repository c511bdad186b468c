package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// TestReleaseAfterDeadlineUnanswered: a holder whose process was stopped
// past its lease's deadline, and whose release Redis then does not answer,
// is told that the lease is lost: Release's error matches lock.ErrNotHeld
// and Lost is closed (redlock's TestReleaseAfterDeadlineUnconfirmed, which
// the chaos checker found, on one server), for Client, Simple and RW
// leases. The stop is the client's clock jumping past the deadline before
// the watchdog's goroutine runs; Redis is paused, with the client options a
// user gets by default. Before the deadline the same failure stays a plain
// error, and a retried release still frees the lock.
func TestReleaseAfterDeadlineUnanswered(t *testing.T) {
	srv := testserver.StartRedis(t)
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	rdb := srv.Client(t)
	c := lock.New(rdb, lock.WithClock(clock))
	defer c.Close()
	s := lock.NewSimple(rdb, lock.WithClock(clock))
	defer s.Close()
	rw := lock.NewRW(rdb, lock.WithClock(clock))
	defer rw.Close()
	ctx := ctxTimeout(t, 60*time.Second)
	const ttl = 10 * time.Second

	release := func(l lock.Lease) error {
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := l.Release(rctx)
		cancel()
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		return err
	}
	for _, k := range []struct {
		name string
		l    lock.Locker
	}{{"Client", c}, {"Simple", s}, {"RW write", rw.Write()}, {"RW read", rw.Read()}} {
		t.Run(k.name, func(t *testing.T) {
			skew.Store(0)
			l := mustObtain(t, ctx, k.l, uniqueKey(t), lock.WithTTL(ttl))
			skew.Store(int64(ttl + time.Second))
			err := release(l)
			if !errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("Release after the deadline, Redis paused: %v, want an error matching lock.ErrNotHeld", err)
			}
			select {
			case <-l.Lost():
			default:
				t.Fatal("Lost not closed when Release returned")
			}
			if err := lock.LostCause(l); !errors.Is(err, lock.ErrLockLost) {
				t.Fatalf("the lease's cause %v, want lock.ErrLockLost", err)
			}

			skew.Store(0)
			key := uniqueKey(t)
			l = mustObtain(t, ctx, k.l, key, lock.WithTTL(ttl))
			err = release(l)
			if err == nil || errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("Release before the deadline, Redis paused: %v, want a Redis error that is not ErrNotHeld", err)
			}
			select {
			case <-l.Lost():
				t.Fatal("Lost closed by a release that failed before the deadline")
			default:
			}
			l.Release(ctx) // the retry (RW: its hold expires after its TTL otherwise)
			if l2, err := k.l.TryObtain(ctx, key, lock.WithTTL(ttl)); err != nil {
				if k.name != "RW write" && k.name != "RW read" {
					t.Fatalf("the key after the retried release: %v", err)
				}
			} else {
				l2.Release(ctx)
			}
		})
	}
}
