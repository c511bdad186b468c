package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// lossyRW returns an RW on lossyRedis with default client options
// (go-redis retries included), so that a command whose reply is lost runs
// twice.
func lossyRW(t *testing.T) (*lock.RW, *testserver.ReplyLoser) {
	t.Helper()
	rdb, r := lossyRedis(t, nil)
	rw := lock.NewRW(rdb)
	if err := rw.Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rw.Close() })
	return rw, r
}

// rwFree fails the test unless another owner can take key's write side at
// once (nobody holds either side), and releases it.
func rwFree(t *testing.T, ctx context.Context, key, after string) {
	t.Helper()
	w, err := newRW(t).Write().TryObtain(lock.WithOwner(ctx, lock.NewOwner()), key)
	if err != nil {
		t.Fatalf("%s: another owner's TryObtain of the write side: %v, want the lock free", after, err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// rwHeld fails the test unless key is held: another owner's TryObtain of
// the write side finds it taken.
func rwHeld(t *testing.T, ctx context.Context, key, after string) {
	t.Helper()
	w, err := newRW(t).Write().TryObtain(lock.WithOwner(ctx, lock.NewOwner()), key)
	if err == nil {
		w.Release(ctx)
		t.Fatalf("%s: the lock is free, want it still held", after)
	}
	if !errors.Is(err, lock.ErrNotObtained) {
		t.Fatal(err)
	}
}

// rwLevels returns the hold counts of key's RW hash: "w" for the writer's,
// "r:<owner>" for a reader's.
func rwLevels(t *testing.T, ctx context.Context, key string) map[string]string {
	t.Helper()
	h, err := shared.Client(t).HGetAll(ctx, lock.DefaultPrefix+"rw:{"+key+"}").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for f, v := range h {
		switch {
		case f == "wc":
			out["w"] = v
		case len(f) > 2 && f[:2] == "r:":
			out[f] = v
		}
	}
	return out
}

// TestRWLostReplyReadRelease: a reader re-enters, then the inner release's
// reply is lost and go-redis sends it again. The resend must not drop the
// outer level: the lock stays held at level 1, and the inner Release
// reports success.
func TestRWLostReplyReadRelease(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), lock.NewOwner())
	owner, _ := lock.OwnerFrom(ctx)
	rw, r := lossyRW(t)
	key := uniqueKey(t)
	outer := mustObtain(t, ctx, rw.Read(), key)
	inner := mustObtain(t, ctx, rw.Read(), key)
	r.Arm(lock.Scripts()["rw_release.lua"].Carried())
	if err := inner.Release(ctx); err != nil {
		t.Fatalf("inner Release whose reply was lost and resent: %v, want nil", err)
	}
	wantLost(t, r)
	if got := rwLevels(t, ctx, key); got["r:"+owner] != "1" {
		t.Fatalf("after the inner release: levels %v, want r:%s = 1", got, owner)
	}
	rwHeld(t, ctx, key, "after the inner release")
	if err := outer.Release(ctx); err != nil {
		t.Fatalf("outer Release: %v", err)
	}
	rwFree(t, ctx, key, "after both releases")
}

// TestRWLostReplyWriteRelease: the same for the write side.
func TestRWLostReplyWriteRelease(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), lock.NewOwner())
	rw, r := lossyRW(t)
	key := uniqueKey(t)
	outer := mustObtain(t, ctx, rw.Write(), key)
	inner := mustObtain(t, ctx, rw.Write(), key)
	r.Arm(lock.Scripts()["rw_release.lua"].Carried())
	if err := inner.Release(ctx); err != nil {
		t.Fatalf("inner Release whose reply was lost and resent: %v, want nil", err)
	}
	wantLost(t, r)
	if got := rwLevels(t, ctx, key); got["w"] != "1" {
		t.Fatalf("after the inner release: levels %v, want w = 1", got)
	}
	rwHeld(t, ctx, key, "after the inner release")
	r.Arm(lock.Scripts()["rw_release.lua"].Carried())
	if err := outer.Release(ctx); err != nil {
		t.Fatalf("outer Release whose reply was lost and resent: %v, want nil (it freed the lock)", err)
	}
	wantLost(t, r)
	rwFree(t, ctx, key, "after both releases")
}

// TestRWLostReplyWriteAcquire: a write acquisition's reply is lost and
// go-redis sends it again; the resend must not count a second level, so
// that the lease's one Release frees the lock.
func TestRWLostReplyWriteAcquire(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rw, r := lossyRW(t)
	key := uniqueKey(t)
	r.Arm(lock.Scripts()["rw_acquire.lua"].Carried())
	w := mustObtain(t, ctx, rw.Write(), key)
	wantLost(t, r)
	if got := rwLevels(t, ctx, key); got["w"] != "1" {
		t.Fatalf("after one Obtain whose reply was lost: levels %v, want w = 1", got)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	rwFree(t, ctx, key, "after the only release")
}

// TestRWLostReplyReadAcquire: the same for a read acquisition, fresh and
// re-entered.
func TestRWLostReplyReadAcquire(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), lock.NewOwner())
	owner, _ := lock.OwnerFrom(ctx)
	rw, r := lossyRW(t)
	key := uniqueKey(t)
	r.Arm(lock.Scripts()["rw_acquire.lua"].Carried())
	outer := mustObtain(t, ctx, rw.Read(), key)
	wantLost(t, r)
	lost := r.Lost()
	r.Arm(lock.Scripts()["rw_acquire.lua"].Carried())
	inner := mustObtain(t, ctx, rw.Read(), key)
	if r.Lost() == lost {
		t.Fatal("the re-entry's reply was not lost: the fault did not happen")
	}
	if got := rwLevels(t, ctx, key); got["r:"+owner] != "2" {
		t.Fatalf("after two Obtains whose replies were lost: levels %v, want r:%s = 2", got, owner)
	}
	for _, l := range []lock.Lease{inner, outer} {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	rwFree(t, ctx, key, "after both releases")
}

// TestRWLostReplyDowngrade: the writer takes the read side (a downgrade)
// and that acquisition's reply is lost and resent; one read release must
// drop the read side, so that after the write release the lock is free.
func TestRWLostReplyDowngrade(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), lock.NewOwner())
	owner, _ := lock.OwnerFrom(ctx)
	rw, r := lossyRW(t)
	key := uniqueKey(t)
	w := mustObtain(t, ctx, rw.Write(), key)
	r.Arm(lock.Scripts()["rw_acquire.lua"].Carried())
	rd := mustObtain(t, ctx, rw.Read(), key)
	wantLost(t, r)
	if got := rwLevels(t, ctx, key); got["r:"+owner] != "1" || got["w"] != "1" {
		t.Fatalf("after the downgrade whose reply was lost: levels %v, want w = 1, r:%s = 1", got, owner)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatalf("write Release: %v", err)
	}
	// Downgraded: other readers may enter, a writer may not.
	other, err := newRW(t).Read().TryObtain(lock.WithOwner(ctx, lock.NewOwner()), key)
	if err != nil {
		t.Fatalf("another reader after the downgrade: %v", err)
	}
	other.Release(ctx)
	rwHeld(t, ctx, key, "after the write release of a downgraded hold")
	r.Arm(lock.Scripts()["rw_release.lua"].Carried())
	if err := rd.Release(ctx); err != nil {
		t.Fatalf("read Release whose reply was lost and resent: %v, want nil", err)
	}
	wantLost(t, r)
	rwFree(t, ctx, key, "after the read release")
}

// TestRWLostReplyRenew: a renewal whose reply is lost and resent keeps the
// hold held and renewed, on both sides.
func TestRWLostReplyRenew(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), lock.NewOwner())
	rw, r := lossyRW(t)
	for _, side := range []struct {
		name string
		l    lock.Locker
	}{{"write", rw.Write()}, {"read", rw.Read()}} {
		key := uniqueKey(t) + side.name
		// A 1 s TTL: with 300 ms, a renewal starved past the lease's end
		// on a loaded host (load 23 on 2 cores) would lose the lease for
		// that reason alone, as TestLostReplyRenewAndLeave did.
		l := mustObtain(t, ctx, side.l, key, lock.WithTTL(time.Second))
		lost := r.Lost()
		r.Arm(lock.Scripts()["rw_renew.lua"].Carried())
		time.Sleep(1200 * time.Millisecond) // past a renewal, and past the TTL
		if r.Lost() == lost {
			t.Fatalf("%s: no renewal's reply was lost: the fault did not happen", side.name)
		}
		select {
		case <-l.Lost():
			t.Fatalf("%s: lease lost after a renewal whose reply was lost and resent: %v", side.name, lock.LostCause(l))
		default:
		}
		rwHeld(t, ctx, key, side.name+": after the renewal")
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%s: Release: %v", side.name, err)
		}
		rwFree(t, ctx, key, side.name+": after the release")
	}
}

// TestRWStaleReleaseKeepsNewHold: a write hold deleted behind its owner's
// back, then taken again by the same owner: the old lease's renewal and
// Release name a level the new hold does not have, so the old lease is
// lost (ErrNotHeld) and its Release answers ErrNotHeld, leaving the new
// hold alone (before levels were recorded, the renewal went on and the
// Release dropped the new hold's only level, freeing the lock).
func TestRWStaleReleaseKeepsNewHold(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), lock.NewOwner())
	rw := newRW(t)
	key := uniqueKey(t)
	// 1.5 s: the loss must be found by a renewal (ErrNotHeld), not by a
	// renewal starved past a 300 ms lease's end (expired).
	old := mustObtain(t, ctx, rw.Write(), key, lock.WithTTL(1500*time.Millisecond))
	shared.Client(t).Del(ctx, lock.DefaultPrefix+"rw:{"+key+"}")
	cur := mustObtain(t, ctx, rw.Write(), key)
	if cur.Token() <= old.Token() {
		t.Fatalf("the new hold's token %d, not above the old one's %d", cur.Token(), old.Token())
	}
	waitClosed(t, old.Lost(), 3*time.Second, "Lost of the deleted hold, its owner holding the key again")
	if err := lock.LostCause(old); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("cause %v, want lock.ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release of the deleted hold: %v, want lock.ErrNotHeld", err)
	}
	rwHeld(t, ctx, key, "after the old lease's release")
	if err := cur.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rwFree(t, ctx, key, "after the new lease's release")
}
