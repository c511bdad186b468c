package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// vanish deletes key's lock hash, as a failover, an eviction, a restart
// or ForceRelease would, and lets another client take and release it.
func vanish(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	if err := shared.Client(t).Del(ctx, lock.DefaultPrefix+"{"+key+"}").Err(); err != nil {
		t.Fatal(err)
	}
	other := newClient(t, nil)
	l := mustObtain(t, ctxTimeout(t, 5*time.Second), other, key) // not ctx: its owner is not the other's
	if o, _ := lock.OwnerFrom(ctx); l.(interface{ Owner() string }).Owner() == o {
		t.Fatal("the other client obtained as the same owner")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestVanishedHoldNotRevived: owner O holds L1; the hold vanishes from
// Redis and another client takes and releases the lock; O obtains again.
// That is a new hold: L1 is lost at once, the new lease has a new token,
// and the levels Redis counts are the levels the client counts.
func TestVanishedHoldNotRevived(t *testing.T) {
	for _, try := range []bool{false, true} {
		name := map[bool]string{false: "Obtain", true: "TryObtain"}[try]
		t.Run(name, func(t *testing.T) {
			ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), lock.NewOwner())
			owner, _ := lock.OwnerFrom(ctx)
			c := newClient(t, nil)
			key := uniqueKey(t)
			l1 := mustObtain(t, ctx, c, key)
			vanish(t, ctx, key)
			obtain := c.Obtain
			if try {
				obtain = c.TryObtain
			}
			l2, err := obtain(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			waitClosed(t, l1.Lost(), 100*time.Millisecond, "the vanished hold's Lost")
			if err := l1.(interface{ Err() error }).Err(); !errors.Is(err, lock.ErrLockLost) || !errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("L1.Err() = %v, want ErrLockLost and ErrNotHeld", err)
			}
			if l2.Token() <= l1.Token() {
				t.Fatalf("new hold's token %d, want above the vanished one's %d", l2.Token(), l1.Token())
			}
			select {
			case <-l2.Lost():
				t.Fatal("the new hold is lost")
			default:
			}
			if got := owners(t, ctx, c, key); got[owner] != 1 {
				t.Fatalf("Redis counts %v, want %s: 1", got, owner)
			}
			// The vanished lease's release drops nothing of the new hold.
			if err := l1.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("releasing the vanished lease: %v, want ErrNotHeld", err)
			}
			if got := owners(t, ctx, c, key); got[owner] != 1 {
				t.Fatalf("after releasing the vanished lease: %v, want %s: 1", got, owner)
			}
			other := newClient(t, nil)
			if _, err := other.TryObtain(ctxTimeout(t, time.Second), key); !errors.Is(err, lock.ErrNotObtained) {
				t.Fatalf("another client while the new hold is held: %v", err)
			}
			if err := l2.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if got := owners(t, ctx, c, key); len(got) != 0 {
				t.Fatalf("after the new lease was released: held by %v", got)
			}
		})
	}
}

// TestVanishedHoldNestedDo: the nested Do the docs recommend, after the
// outer hold vanished: the outer function's ctx is cancelled with
// ErrLockLost at once.
func TestVanishedHoldNestedDo(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), lock.NewOwner())
	c := newClient(t, nil)
	key := uniqueKey(t)
	var cause error
	err := lock.Do(ctx, c, key, func(outer context.Context) error {
		vanish(t, ctx, key)
		// The inner Do holds a new hold; its ctx, made from the outer one,
		// ends with the outer hold's loss, so it may report ErrLockLost.
		if err := lock.Do(outer, c, key, func(context.Context) error { return nil }); err != nil && !errors.Is(err, lock.ErrLockLost) {
			return err
		}
		select {
		case <-outer.Done():
			cause = context.Cause(outer)
		case <-time.After(100 * time.Millisecond):
		}
		return nil
	})
	if err != nil && !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Do: %v", err)
	}
	if !errors.Is(cause, lock.ErrLockLost) {
		t.Fatalf("outer ctx's cause %v, want ErrLockLost", cause)
	}
}

// TestVanishedHoldOtherClientSameOwner: the same owner takes the lock again
// through another client (another process of one service). The first
// client's hold is lost at its next renewal, not renewed for ever.
func TestVanishedHoldOtherClientSameOwner(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), lock.NewOwner())
	a, b := newClient(t, nil), newClient(t, nil)
	key := uniqueKey(t)
	l1 := mustObtain(t, ctx, a, key, lock.WithTTL(300*time.Millisecond))
	vanish(t, ctx, key)
	// 1.5 s: the new hold must outlive a starved renewal (load 23 on 2
	// cores) for its Release to tell; 300 ms loses it after 200 ms.
	l2 := mustObtain(t, ctx, b, key, lock.WithTTL(1500*time.Millisecond))
	waitClosed(t, l1.Lost(), time.Second, "the vanished hold's Lost (next renewal)")
	time.Sleep(150 * time.Millisecond)
	select {
	case <-l2.Lost():
		t.Fatal("the new hold is lost")
	default:
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOlderHoldRestored: Redis restarts from a snapshot taken while the
// owner held an earlier hold of the key; the owner's live hold (a later
// one, with a larger token) is gone from Redis, the earlier one is back.
// The owner's next re-entry gets the earlier hold's token: the live hold
// must be reported lost at once, not at its next renewal, and the Obtain
// must not return a lease with the earlier hold's (smaller) token.
func TestOlderHoldRestored(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := lock.WithOwner(ctxTimeout(t, 20*time.Second), lock.NewOwner())
	c := newClient(t, srv)
	key := uniqueKey(t)
	old := mustObtain(t, ctx, c, key, lock.WithTTL(20*time.Second))
	snap, err := srv.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Release(ctx); err != nil {
		t.Fatal(err)
	}
	live := mustObtain(t, ctx, c, key, lock.WithTTL(20*time.Second)) // renewed only every 6.7 s
	if err := srv.RestartFromSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if again, err := c.TryObtain(tctx, key, lock.WithTTL(20*time.Second)); err == nil {
		t.Fatalf("TryObtain returned a lease with token %d while Redis holds the owner's older hold", again.Token())
	}
	waitClosed(t, live.Lost(), 100*time.Millisecond, "the live hold's Lost once Redis answered an older hold")
	if err := lock.LostCause(live); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("live hold's cause %v, want lock.ErrNotHeld", err)
	}
}
