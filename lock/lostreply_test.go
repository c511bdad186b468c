package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// lossyRedis returns a go-redis client of the shared server with opts
// (default options if nil) and a ReplyLoser dialer. Every script is loaded
// first, so that EVALSHA runs the script on the first try.
func lossyRedis(t *testing.T, opts *redis.Options) (redis.UniversalClient, *testserver.ReplyLoser) {
	t.Helper()
	r := &testserver.ReplyLoser{}
	if opts == nil {
		opts = &redis.Options{}
	}
	opts.Addr, opts.Dialer = shared.Addr(), r.Dial
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	for _, s := range lock.Scripts() {
		if err := s.Preload(context.Background(), rdb); err != nil {
			t.Fatal(err)
		}
	}
	return rdb, r
}

// lossyClient returns a lock Client on lossyRedis with default options
// (go-redis retries included).
func lossyClient(t *testing.T) (*lock.Client, *testserver.ReplyLoser) {
	t.Helper()
	rdb, r := lossyRedis(t, nil)
	c := lock.New(rdb)
	t.Cleanup(func() { c.Close() })
	return c, r
}

// owners returns the owners and hold counts of key's lock.
func owners(t *testing.T, ctx context.Context, c *lock.Client, key string) map[string]int64 {
	t.Helper()
	info, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return info.Owners
}

func wantLost(t *testing.T, r *testserver.ReplyLoser) {
	t.Helper()
	if r.Lost() == 0 {
		t.Fatal("no reply was lost: the fault did not happen")
	}
}

// TestLostReplyFreshAcquisition: the acquisition runs twice; the second
// run must not count a second level that no lease owns.
func TestLostReplyFreshAcquisition(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c, r := lossyClient(t)
	key := uniqueKey(t)
	r.Arm(lock.Scripts()["acquire.lua"].Carried())
	l := mustObtain(t, ctx, c, key)
	wantLost(t, r)
	owner := l.(interface{ Owner() string }).Owner()
	if got := owners(t, ctx, c, key); got[owner] != 1 {
		t.Fatalf("after one Obtain whose reply was lost: %v, want %s: 1", got, owner)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := owners(t, ctx, c, key); len(got) != 0 {
		t.Fatalf("after the only lease was released: held by %v", got)
	}
}

// TestLostReplyReentry: the same for a re-entry.
func TestLostReplyReentry(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), lock.NewOwner())
	owner, _ := lock.OwnerFrom(ctx)
	c, r := lossyClient(t)
	key := uniqueKey(t)
	outer := mustObtain(t, ctx, c, key)
	r.Arm(lock.Scripts()["acquire.lua"].Carried())
	inner := mustObtain(t, ctx, c, key)
	wantLost(t, r)
	if inner.Token() != outer.Token() {
		t.Fatalf("re-entry token %d, want the hold's %d", inner.Token(), outer.Token())
	}
	if got := owners(t, ctx, c, key); got[owner] != 2 {
		t.Fatalf("after two levels: %v, want %s: 2", got, owner)
	}
	for _, l := range []lock.Lease{inner, outer} {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	if got := owners(t, ctx, c, key); len(got) != 0 {
		t.Fatalf("after both leases were released: held by %v", got)
	}
}

// TestLostReplyRelease: the outermost release runs twice; it freed the
// lock, so Release must not answer ErrNotHeld.
func TestLostReplyRelease(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c, r := lossyClient(t)
	key := uniqueKey(t)
	l := mustObtain(t, ctx, c, key)
	r.Arm(lock.Scripts()["release.lua"].Carried())
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release whose reply was lost and resent: %v, want nil (it released the lock)", err)
	}
	wantLost(t, r)
	if got := owners(t, ctx, c, key); len(got) != 0 {
		t.Fatalf("after Release: held by %v", got)
	}
}

// TestLostReplyHandoff: the local line's hand-off runs twice. The releaser
// must see success, the next in line must hold exactly one level, and the
// lock must be free once both released.
func TestLostReplyHandoff(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c, r := lossyClient(t)
	key := uniqueKey(t)
	first := mustObtain(t, ctx, c, key)
	next := make(chan lock.Lease, 1)
	go func() {
		l, err := c.Obtain(ctx, key)
		if err != nil {
			t.Error(err)
		}
		next <- l
	}()
	waitInLine(t, c, key, 1) // the second goroutine lines up behind the first
	r.Arm(lock.Scripts()["handoff.lua"].Carried())
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release that handed over, whose reply was lost and resent: %v, want nil", err)
	}
	wantLost(t, r)
	second := <-next
	if second == nil {
		t.FailNow()
	}
	if second.Token() <= first.Token() {
		t.Fatalf("token %d after %d", second.Token(), first.Token())
	}
	owner := second.(interface{ Owner() string }).Owner()
	if got := owners(t, ctx, c, key); len(got) != 1 || got[owner] != 1 {
		t.Fatalf("after the hand-off: %v, want %s: 1", got, owner)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if got := owners(t, ctx, c, key); len(got) != 0 {
		t.Fatalf("after both released: held by %v", got)
	}
}

// TestLostReplyRenewAndLeave: renew.lua and leave.lua run twice without
// harm: the hold stays held and renewed, a waiter that left is gone.
func TestLostReplyRenewAndLeave(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c, r := lossyClient(t)
	key := uniqueKey(t)
	// A 1 s TTL: with 300 ms, a renewal starved past the lease's end on a
	// loaded host (load 23 on 2 cores) lost the lease for that reason.
	l := mustObtain(t, ctx, c, key, lock.WithTTL(time.Second))
	r.Arm(lock.Scripts()["renew.lua"].Carried())
	time.Sleep(1200 * time.Millisecond) // past a renewal, and past the TTL
	wantLost(t, r)
	select {
	case <-l.Lost():
		t.Fatal("lease lost after a renewal whose reply was lost and resent")
	default:
	}
	waiter, r2 := lossyClient(t) // another client: its waiter queues in Redis
	wctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	r2.Arm(lock.Scripts()["leave.lua"].Carried())
	if _, err := waiter.Obtain(wctx, key); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Obtain of a held lock: %v", err)
	}
	cancel()
	wantLost(t, r2)
	other := newClient(t, nil)
	info, err := other.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Waiters) != 0 || !info.Held() {
		t.Fatalf("after the waiter left: %+v", info)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLostReplySimple: Simple's obtain and release, each resent after a lost
// reply: the resent obtain holds (it does not wait for its own key to
// expire), the resent release reports success.
func TestLostReplySimple(t *testing.T) {
	ctx := ctxTimeout(t, 5*time.Second)
	rdb, r := lossyRedis(t, nil)
	s := lock.NewSimple(rdb, lock.WithDefaultTTL(20*time.Second))
	t.Cleanup(func() { s.Close() })
	key := uniqueKey(t)
	r.Arm(lock.Scripts()["simple_obtain.lua"].Carried())
	l, err := s.Obtain(ctx, key)
	if err != nil {
		t.Fatalf("Obtain whose reply was lost and resent: %v", err)
	}
	wantLost(t, r)
	r.Arm(lock.Scripts()["simple_release.lua"].Carried())
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release whose reply was lost and resent: %v, want nil", err)
	}
	other := lock.NewSimple(shared.Client(t))
	defer other.Close()
	l2, err := other.TryObtain(ctx, key)
	if err != nil {
		t.Fatalf("TryObtain after the release: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestHandoffErrorReleaseAgain: a hand-off whose answer is lost for good
// (retries off) fails the Release; the next in line finds out by its own
// attempt and holds, and the Release called again reports success.
func TestHandoffErrorReleaseAgain(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb, r := lossyRedis(t, &redis.Options{MaxRetries: -1})
	c := lock.New(rdb)
	t.Cleanup(func() { c.Close() })
	key := uniqueKey(t)
	first := mustObtain(t, ctx, c, key)
	next := make(chan lock.Lease, 1)
	go func() {
		l, err := c.Obtain(ctx, key)
		if err != nil {
			t.Error(err)
		}
		next <- l
	}()
	waitInLine(t, c, key, 1)
	r.Arm(lock.Scripts()["handoff.lua"].Carried())
	if err := first.Release(ctx); err == nil {
		t.Fatal("Release succeeded although the hand-off's answer was lost")
	}
	second := <-next
	if second == nil {
		t.FailNow()
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release again after the hand-off happened: %v, want nil", err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := owners(t, ctx, c, key); len(got) != 0 {
		t.Fatalf("after both released: held by %v", got)
	}
}
