package redlock_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
)

// TestReleaseAfterDeadlineUnconfirmed: a holder whose process was stopped
// past its hold's deadline, and whose release then reaches no quorum, is
// told that the hold is lost: Release's error matches lock.ErrNotHeld and
// Lost is closed, for the outermost level and for an inner one. (Found by
// the chaos checker: redlock, long profile, seed 13. A client paused past
// its TTL resumed, finished its critical section and released; two masters
// did not answer in time, and it was told only "not confirmed by a quorum",
// never that three other clients had held the lock meanwhile.) Here the
// stop is the client's clock jumping past the deadline before the
// watchdog's goroutine runs, and two of three masters are paused.
func TestReleaseAfterDeadlineUnconfirmed(t *testing.T) {
	rs := testserver.StartRedisMasters(t, 3)
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	c := newClient(t, rs, redlock.WithClock(clock), redlock.WithNodeTimeout(50*time.Millisecond))
	ctx := ctxTimeout(t, 30*time.Second)
	const ttl = 10 * time.Second

	for _, inner := range []bool{false, true} {
		skew.Store(0)
		key := uniqueKey(t)
		octx := lock.WithOwner(ctx, lock.NewOwner()) // one owner: the second Obtain re-enters
		outer := mustObtain(t, octx, c, key, lock.WithTTL(ttl))
		l := outer
		if inner {
			l = mustObtain(t, octx, c, key, lock.WithTTL(ttl))
		}
		if !inner {
			rs[0].Pause()
			rs[1].Pause()
		}
		skew.Store(int64(ttl + time.Second))
		err := l.Release(ctx)
		if !inner {
			rs[0].Resume()
			rs[1].Resume()
		}
		if !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("inner=%v: Release after the deadline: %v, want an error matching lock.ErrNotHeld", inner, err)
		}
		select {
		case <-l.Lost():
		default:
			t.Fatalf("inner=%v: Lost not closed when Release returned", inner)
		}
		if err := lock.LostCause(l); !errors.Is(err, lock.ErrLockLost) {
			t.Fatalf("inner=%v: the lease's cause %v, want lock.ErrLockLost", inner, err)
		}
		if inner {
			outer.Release(ctx) // the masters still hold it: the fake clock alone moved
		}
	}
}

// TestValidityLeavesDrift: a lease is trusted for TTL − elapsed − drift
// from the start of its round, with drift = TTL·0.01 + 2 ms (the Redlock
// paper's allowance for clocks that run at different rates), never for the
// whole TTL. The Client's clock stands still during the round (elapsed is
// zero), so Until is exactly the round's start + TTL − drift; the expected
// drift is written out here, not taken from Drift, which it checks too.
func TestValidityLeavesDrift(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := newClient(t, nil, redlock.WithClock(func() time.Time { return t0 }))
	ctx := ctxTimeout(t, 30*time.Second)
	for _, tt := range []struct{ ttl, drift time.Duration }{
		{time.Second, 12 * time.Millisecond},
		{30 * time.Second, 302 * time.Millisecond},
	} {
		if got := redlock.Drift(tt.ttl); got != tt.drift {
			t.Errorf("Drift(%v) = %v, want %v", tt.ttl, got, tt.drift)
		}
		l := mustObtain(t, ctx, c, uniqueKey(t), lock.WithTTL(tt.ttl))
		until := l.(lock.LeaseStatus).Until()
		if want := t0.Add(tt.ttl - tt.drift); !until.Equal(want) {
			t.Errorf("TTL %v: trusted until %v after the round's start, want %v (TTL − drift)", tt.ttl, until.Sub(t0), want.Sub(t0))
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
