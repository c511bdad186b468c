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
// past its hold's deadline, and whose release Redis then does not answer,
// is told that the hold is lost: Release's error matches lock.ErrNotHeld
// and Lost is closed (redlock's TestReleaseAfterDeadlineUnconfirmed, which
// the chaos checker found, on one server). The stop is the client's clock
// jumping past the deadline before the watchdog's goroutine runs; Redis is
// paused, with the client options a user gets by default.
func TestReleaseAfterDeadlineUnanswered(t *testing.T) {
	srv := testserver.StartRedis(t)
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	c := newClient(t, srv, lock.WithClock(clock))
	ctx := ctxTimeout(t, 30*time.Second)
	const ttl = 10 * time.Second
	l := mustObtain(t, ctx, c, uniqueKey(t), lock.WithTTL(ttl))

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	skew.Store(int64(ttl + time.Second))
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := l.Release(rctx)
	cancel()
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
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

	// Before the deadline the same failure is only a failure: the hold may
	// still be held, and a retry gets the first attempt's answer.
	skew.Store(0)
	l = mustObtain(t, ctx, c, uniqueKey(t), lock.WithTTL(ttl))
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	err = l.Release(rctx)
	cancel()
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err == nil || errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release before the deadline, Redis paused: %v, want a Redis error that is not ErrNotHeld", err)
	}
	select {
	case <-l.Lost():
		t.Fatal("Lost closed by a release that failed before the deadline")
	default:
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("the retried release: %v", err)
	}
}
