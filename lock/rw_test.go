package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/lock"
)

func newRW(t *testing.T, opts ...lock.ClientOption) *lock.RW {
	t.Helper()
	rdb := shared.Client(t)
	rw := lock.NewRW(rdb, opts...)
	if err := rw.Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rw.Close() })
	return rw
}

// TestRWCrashedReaderExpires: a reader whose process stopped (its client
// closed: no more renewals) keeps its share only until its own TTL, even
// while another reader renews the lock; then a writer gets in.
func TestRWCrashedReaderExpires(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	key := uniqueKey(t)
	crashed := lock.NewRW(shared.Client(t))
	if _, err := crashed.Read().Obtain(ctx, key, lock.WithTTL(600*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	crashed.Close()
	live := newRW(t)
	// The live reader renews at 500 ms, within the crashed reader's 600 ms,
	// and keeps its share through a starved second (load 23 on 2 cores):
	// with 300 ms, a renewal starved for 200 ms would lose it.
	r, err := live.Read().Obtain(ctx, key, lock.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(900 * time.Millisecond) // live renews; the crashed reader's share runs out
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// At once, not within a time bound: the crashed reader's share is gone
	// in Redis's time, whatever this process's scheduling.
	w, err := newRW(t).Write().TryObtain(ctx, key)
	if err != nil {
		t.Fatalf("writer after the last live reader left: %v", err)
	}
	w.Release(ctx)
}

// TestRWWriterLostOnVanish: the write hold deleted behind the writer's
// back (ForceRelease-like: the hash deleted) is reported lost at the next
// renewal, and a reader gets in.
func TestRWWriterLostOnVanish(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	key := uniqueKey(t)
	rw := newRW(t)
	// 1.5 s: the renewal that finds the hold gone (at 500 ms) must answer
	// before the lease's end; with 150 ms, a renewal starved under load
	// (make test-stress, two CPU burners) lost it as expired instead.
	w, err := rw.Write().Obtain(ctx, key, lock.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	shared.Client(t).Del(ctx, lock.DefaultPrefix+"rw:{"+key+"}")
	waitClosed(t, w.Lost(), 3*time.Second, "Lost of a vanished write hold")
	if err := lock.LostCause(w); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("cause %v, want lock.ErrNotHeld", err)
	}
	r, err := newRW(t).Read().TryObtain(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	r.Release(ctx)
	if err := w.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release of the lost write hold: %v", err)
	}
}

// TestRWReentryAfterVanishLosesAtOnce: the owner's write hold vanishes from
// Redis (deleted, as a failover or an eviction would), and the owner takes
// the write side again through the same RW: Redis gives it a new hold with
// a larger token, and the old level is reported lost by the time that
// Obtain returns (as Client does), not at its next renewal, 10 s away. The
// chaos checker's rw backend found the gap (reentry-token after
// lock-delete): the outer section went on believing it held the key with
// its old token.
func TestRWReentryAfterVanishLosesAtOnce(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), "owner-a")
	key := uniqueKey(t)
	rw := newRW(t)
	outer, err := rw.Write().Obtain(ctx, key, lock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := shared.Client(t).Del(ctx, lock.DefaultPrefix+"rw:{"+key+"}").Err(); err != nil {
		t.Fatal(err)
	}
	inner, err := rw.Write().Obtain(ctx, key, lock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if inner.Token() <= outer.Token() {
		t.Fatalf("the new hold's token %d, want above the vanished one's %d", inner.Token(), outer.Token())
	}
	select {
	case <-outer.Lost():
	default:
		t.Fatal("the vanished level's Lost still open when the owner's new acquisition returned")
	}
	if err := lock.LostCause(outer); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("cause %v, want lock.ErrNotHeld", err)
	}
	if err := inner.(interface{ Err() error }).Err(); err != nil {
		t.Fatalf("the new hold: %v", err)
	}
	if err := outer.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release of the vanished level: %v, want ErrNotHeld", err)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatalf("Release of the new hold: %v", err)
	}
	// A re-entry that finds its hold in Redis joins it: nothing is lost.
	a, err := rw.Write().Obtain(ctx, key, lock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := rw.Write().Obtain(ctx, key, lock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if a.Token() != b.Token() || a.(interface{ Err() error }).Err() != nil {
		t.Fatalf("re-entry: tokens %d and %d, outer %v", a.Token(), b.Token(), a.(interface{ Err() error }).Err())
	}
	b.Release(ctx)
	a.Release(ctx)
}

// TestRWDo: lock.Do on either side, nested Do re-entering.
func TestRWDo(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rw := newRW(t)
	key := uniqueKey(t)
	err := lock.Do(ctx, rw.Write(), key, func(ctx context.Context) error {
		return lock.Do(ctx, rw.Read(), key, func(ctx context.Context) error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Read().TryObtain(ctx, ""); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("empty key: %v", err)
	}
}
