package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
)

// vanish deletes key's lock hash on every shared master (a failover, an
// eviction, a restart) and lets another client take and release the lock.
func vanish(t *testing.T, key string) {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Second)
	node, _ := hashlock.NewNode(redlock.DefaultPrefix)
	for _, r := range dial(t, addrsOf(shared)...) {
		if err := r.Del(ctx, node.Keys(key).Lock).Err(); err != nil {
			t.Fatal(err)
		}
	}
	l := mustObtain(t, ctx, newClient(t, nil), key)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestVanishedHoldOtherClientSameOwner: the owner takes the lock again
// through another client after its hold vanished from the masters. The
// first client's hold is lost at its next renewal, not renewed for ever
// in the second one's name.
func TestVanishedHoldOtherClientSameOwner(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), lock.NewOwner())
	a, b := newClient(t, nil), newClient(t, nil)
	key := uniqueKey(t)
	l1 := mustObtain(t, ctx, a, key, lock.WithTTL(300*time.Millisecond))
	vanish(t, key)
	// 1.5 s: the new hold must outlive a starved renewal (load 23 on 2
	// cores) for its Release to tell; 300 ms loses it after 200 ms.
	l2 := mustObtain(t, ctx, b, key, lock.WithTTL(1500*time.Millisecond))
	if l2.Token() <= l1.Token() {
		t.Fatalf("the new hold's token %d, want above %d", l2.Token(), l1.Token())
	}
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

// TestVanishedHoldLocalReentry: re-entry through the same Client takes no
// round trip, so it cannot see that the hold vanished: the re-entered
// lease carries the original token and is lost with the hold at the next
// renewal.
//
// The re-entry must come before that renewal: on a loaded host the
// renewal (every TTL/3) once ran between the deletion and the re-entry,
// which then rightly took a new hold. Such an attempt proves nothing and
// is made again with a new key, up to 5 times.
func TestVanishedHoldLocalReentry(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 30*time.Second), lock.NewOwner())
	c := newClient(t, nil)
	var l1, l2 lock.Lease
	for attempt := 1; ; attempt++ {
		key := uniqueKey(t)
		l1 = mustObtain(t, ctx, c, key, lock.WithTTL(600*time.Millisecond))
		vanish(t, key)
		l2 = mustObtain(t, ctx, c, key)
		if l2.Token() == l1.Token() {
			break
		}
		select {
		case <-l1.Lost(): // the renewal came first
		default:
			t.Fatalf("re-entry token %d, want the hold's %d (not lost)", l2.Token(), l1.Token())
		}
		if attempt == 5 {
			t.Fatalf("in 5 attempts, the hold's renewal always found it gone before the re-entry (TTL 600 ms)")
		}
		l2.Release(ctx)
	}
	waitClosed(t, l1.Lost(), time.Second, "the vanished hold's Lost (next renewal)")
	waitClosed(t, l2.Lost(), 10*time.Millisecond, "the re-entered lease's Lost")
	for _, l := range []lock.Lease{l2, l1} {
		if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("Release of a lost lease: %v, want ErrNotHeld", err)
		}
	}
}

// lossyMasters returns go-redis clients of the shared masters with the
// default options (retries included) and a ReplyLoser dialer each, with
// every script loaded.
func lossyMasters(t *testing.T) ([]redis.UniversalClient, []*testserver.ReplyLoser) {
	t.Helper()
	rdbs := make([]redis.UniversalClient, len(shared))
	losers := make([]*testserver.ReplyLoser, len(shared))
	for i, s := range shared {
		losers[i] = &testserver.ReplyLoser{}
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), Dialer: losers[i].Dial, ContextTimeoutEnabled: true})
		t.Cleanup(func() { r.Close() })
		if err := redlock.Preload(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		rdbs[i] = r
	}
	return rdbs, losers
}

// counts returns owner's hold count on every shared master.
func counts(t *testing.T, key, owner string) []string {
	t.Helper()
	out := make([]string, len(shared))
	for i, h := range holders(t, ctxTimeout(t, 5*time.Second), dial(t, addrsOf(shared)...), key) {
		out[i] = h[owner]
	}
	return out
}

// waitLost waits until r lost a reply, and for the resent command (a
// round decided by a quorum does not wait for it).
func waitLost(t *testing.T, r *testserver.ReplyLoser) {
	t.Helper()
	for end := time.Now().Add(2 * time.Second); r.Lost() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no reply was lost: the fault did not happen")
		}
	}
	time.Sleep(200 * time.Millisecond)
}

func allEqual(s []string, v string) bool {
	for _, x := range s {
		if x != v {
			return false
		}
	}
	return true
}

// TestLostRepliesRedlock: with go-redis's default retry, an acquisition
// and a hand-off whose reply is lost on one master run twice there; that
// master must hold one level, the releaser must see success, and every
// master must be free once the leases are released.
func TestLostRepliesRedlock(t *testing.T) {
	rdbs, losers := lossyMasters(t)
	// A long node timeout: the resent command must be awaited, not timed out.
	c, err := redlock.New(rdbs, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := ctxTimeout(t, 20*time.Second)
	key := uniqueKey(t)
	redlock.DecideScripts(ctx, c) // the calls carry what Carried says

	losers[0].Arm(redlock.Scripts()["acquire.lua"].Carried())
	first := mustObtain(t, ctx, c, key)
	waitLost(t, losers[0])
	owner := first.(interface{ Owner() string }).Owner()
	if got := counts(t, key, owner); !allEqual(got, "1") {
		t.Fatalf("hold counts after an acquisition resent on master 0: %v, want 1 everywhere", got)
	}

	next := make(chan lock.Lease, 1)
	go func() {
		l, err := c.Obtain(ctx, key)
		if err != nil {
			t.Error(err)
		}
		next <- l
	}()
	waitInLine(t, c, key, 1) // in line behind first
	losers[1].Arm(redlock.Scripts()["handoff.lua"].Carried())
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release that handed over, its reply resent on master 1: %v", err)
	}
	second := <-next
	if second == nil {
		t.FailNow()
	}
	waitLost(t, losers[1])
	owner2 := second.(interface{ Owner() string }).Owner()
	if got := counts(t, key, owner2); !allEqual(got, "1") {
		t.Fatalf("hold counts after a hand-off resent on master 1: %v, want 1 everywhere", got)
	}
	losers[2].Arm(redlock.Scripts()["release.lua"].Carried())
	if err := second.Release(ctx); err != nil {
		t.Fatalf("Release resent on master 2: %v", err)
	}
	waitLost(t, losers[2])
	if got := counts(t, key, owner2); !allEqual(got, "") {
		t.Fatalf("hold counts after both released: %v, want free everywhere", got)
	}
}
