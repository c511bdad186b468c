package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// TestBracesInKeysOnCluster: a key that begins with '}' would make the hash
// tag empty and the lock's keys fall in different slots (CROSSSLOT): it is
// refused with ErrInvalid. Other braces work on a Cluster.
func TestBracesInKeysOnCluster(t *testing.T) {
	cl := testserver.StartRedisCluster(t)
	rdb := cl.Client(t)
	ctx := ctxTimeout(t, 20*time.Second)
	for name, l := range lockers(t, rdb) {
		t.Run(name, func(t *testing.T) {
			for _, key := range []string{"}", "}x", "}{x}"} {
				if _, err := l.TryObtain(ctx, key); !errors.Is(err, lock.ErrInvalid) {
					t.Errorf("TryObtain(%q) = %v, want ErrInvalid", key, err)
				}
			}
			for _, key := range []string{"a}b", "{x}", "x{y", "{", "a{b}c}d", uniqueKey(t) + "}"} {
				le, err := l.Obtain(ctx, key)
				if err != nil {
					t.Errorf("Obtain(%q) on a Cluster: %v", key, err)
					continue
				}
				if err := le.Release(ctx); err != nil {
					t.Errorf("Release(%q) on a Cluster: %v", key, err)
				}
			}
		})
	}
}

// TestTTLWholeMilliseconds: Redis keeps a lock for whole milliseconds; the
// lease must count the same TTL, so that Lost closes no later than the key
// expires. With a clock stopped at the acquisition and then moved to just
// past the whole-millisecond TTL (renewals cut off), the lease is lost.
func TestTTLWholeMilliseconds(t *testing.T) {
	srv := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr())
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	c := lock.New(rdb, lock.WithClock(clock))
	t.Cleanup(func() { c.Close() })
	ctx := ctxTimeout(t, 10*time.Second)
	l := mustObtain(t, ctx, c, uniqueKey(t), lock.WithTTL(300*time.Millisecond+900*time.Microsecond))
	proxy.SetBlackhole(true)
	t.Cleanup(func() { proxy.SetBlackhole(false) })
	now.Add(int64(300*time.Millisecond + 100*time.Microsecond)) // past Redis's 300 ms
	waitClosed(t, l.Lost(), 2*time.Second, "Lost once Redis's whole-millisecond TTL has passed")
}

// TestHolderOwnStaleEntryDropped: a call queued its waiter entry, its
// answer was lost, and the same call (the script resent) then acquired the
// free lock, its Queued flag unset: the entry must leave the queue, so that
// the release does not grant the lock to it (nobody would take it).
func TestHolderOwnStaleEntryDropped(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	node, _ := hashlock.NewNode("")
	k := node.Keys(key)
	keys := []string{k.Lock, k.Fence, k.Queue, k.Deadlines}
	acquire := lock.Scripts()["acquire.lua"]
	id := "c0ffee:1"
	waiter := id + "|5000|" + "owner-a"
	// acquire.lua's arguments: owner, TTL, waiter, fair, waiter bound,
	// request id.
	args := []any{"owner-a", 5000, waiter, "0", 5000, id}
	if err := rdb.HSet(ctx, k.Lock, "owner-b", 1).Err(); err != nil { // held by another
		t.Fatal(err)
	}
	if res, err := acquire.Eval().Run(ctx, rdb, keys, args...).Slice(); err != nil || res[0].(int64) != 0 {
		t.Fatalf("first run: %v %v, want not held (queued)", res, err)
	}
	if err := rdb.Del(ctx, k.Lock).Err(); err != nil { // the other hold expires
		t.Fatal(err)
	}
	if res, err := acquire.Eval().Run(ctx, rdb, keys, args...).Slice(); err != nil || res[0].(int64) != 1 {
		t.Fatalf("resent run: %v %v, want held", res, err)
	}
	c := newClient(t, nil)
	info, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Waiters) != 0 {
		t.Fatalf("queue %v after the call holds the lock, want empty", info.Waiters)
	}
	left, err := node.Release(ctx, hashlock.NewServer(rdb), key, hashlock.NodeRelease{Owner: "owner-a", Request: "r1", Level: id})
	if err != nil || left != 0 {
		t.Fatalf("Release: %d %v", left, err)
	}
	if info, err = c.Inspect(ctx, key); err != nil {
		t.Fatal(err)
	}
	if info.Held() || len(info.Waiters) != 0 {
		t.Fatalf("after the release: %+v, want free with an empty queue", info)
	}
}

// TestFailedQueueingLeaves: an attempt that queued its waiter but whose
// answer was lost (no retry) fails Obtain; the client takes the waiter out
// of the queue, so no later release grants the lock to a call that ended.
func TestFailedQueueingLeaves(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb, r := lossyRedis(t, &redis.Options{MaxRetries: -1})
	c := lock.New(rdb)
	t.Cleanup(func() { c.Close() })
	holder := newClient(t, nil)
	// One wait first: the client is subscribed, so its next Obtain queues
	// from its first attempt.
	key0 := uniqueKey(t)
	h0 := mustObtain(t, ctx, holder, key0)
	time.AfterFunc(50*time.Millisecond, func() { h0.Release(context.Background()) })
	l0 := mustObtain(t, ctx, c, key0)
	l0.Release(ctx)

	key := uniqueKey(t)
	h := mustObtain(t, ctx, holder, key)
	r.Arm(lock.Scripts()["acquire.lua"].Carried())
	if _, err := c.Obtain(ctx, key); err == nil {
		t.Fatal("Obtain succeeded although its only attempt's answer was lost")
	}
	wantLost(t, r)
	info, err := holder.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Waiters) != 0 {
		t.Fatalf("queue after the failed Obtain: %v, want empty", info.Waiters)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ = holder.Inspect(ctx, key); info.Held() {
		t.Fatalf("after the release: held by %v, want free", info.Owners)
	}
}

// TestReentryLeavesQueue: a call of owner O queued (the lock held by
// another), then O got the lock through another call, and this call's
// next attempt re-enters: its entry must leave the queue, or the release
// would grant the lock to a call that already returned.
func TestReentryLeavesQueue(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	node, _ := hashlock.NewNode("")
	k := node.Keys(key)
	keys := []string{k.Lock, k.Fence, k.Queue, k.Deadlines}
	acquire := lock.Scripts()["acquire.lua"]
	args := func(owner, id string) []any {
		return []any{owner, 5000, id + "|5000|" + owner, "1", 5000, id}
	}
	if err := rdb.HSet(ctx, k.Lock, "owner-x", 1).Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a:1", "b:1"} { // both calls of owner O queue (fair mode)
		if res, err := acquire.Eval().Run(ctx, rdb, keys, args("owner-o", id)...).Slice(); err != nil || res[0].(int64) != 0 {
			t.Fatalf("queueing %s: %v %v", id, res, err)
		}
	}
	if err := rdb.Del(ctx, k.Lock).Err(); err != nil { // x's hold ends
		t.Fatal(err)
	}
	for _, id := range []string{"a:1", "b:1"} { // a takes it, b re-enters
		if res, err := acquire.Eval().Run(ctx, rdb, keys, args("owner-o", id)...).Slice(); err != nil || res[0].(int64) != 1 {
			t.Fatalf("acquiring %s: %v %v", id, res, err)
		}
	}
	info, err := newClient(t, nil).Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Waiters) != 0 || info.Owners["owner-o"] != 2 {
		t.Fatalf("after a and b hold: %+v, want owner-o: 2 and an empty queue", info)
	}
}

// TestLostReplyForgotten: an acquisition whose answer is lost for good
// (retries off) fails, and leaves no level in Redis that no lease owns.
func TestLostReplyForgotten(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb, r := lossyRedis(t, &redis.Options{MaxRetries: -1})
	c := lock.New(rdb)
	t.Cleanup(func() { c.Close() })
	key := uniqueKey(t)
	r.Arm(lock.Scripts()["acquire.lua"].Carried())
	if _, err := c.TryObtain(ctx, key); err == nil {
		t.Fatal("TryObtain succeeded although its answer was lost")
	}
	wantLost(t, r)
	if got := owners(t, ctx, newClient(t, nil), key); len(got) != 0 {
		t.Fatalf("after the failed TryObtain: held by %v", got)
	}
}

// TestForceReleaseResent: ForceRelease whose reply is lost runs twice; the
// second run must not take the lock from the waiter the first passed it to.
func TestForceReleaseResent(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb, r := lossyRedis(t, nil)
	admin := lock.New(rdb)
	t.Cleanup(func() { admin.Close() })
	key := uniqueKey(t)
	holder, waiter := newClient(t, nil), newClient(t, nil)
	mustObtain(t, ctx, holder, key)
	got := make(chan lock.Lease, 1)
	go func() {
		l, err := waiter.Obtain(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueued(t, holder, key, 1)
	r.Arm(lock.Scripts()["force_release.lua"].Carried())
	if held, err := admin.ForceRelease(ctx, key); err != nil || !held {
		t.Fatalf("ForceRelease: %v %v", held, err)
	}
	wantLost(t, r)
	l := <-got
	if l == nil {
		t.FailNow()
	}
	owner := l.(interface{ Owner() string }).Owner()
	if o := owners(t, ctx, admin, key); o[owner] != 1 {
		t.Fatalf("after a resent ForceRelease: %v, want the waiter %s to hold", o, owner)
	}
}

// TestNotHeldAnswerLosesHold: an owner's attempt finds the key held by
// another owner while its own hold is live in the client: that hold is gone
// and is reported lost at once.
func TestNotHeldAnswerLosesHold(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), lock.NewOwner())
	c := newClient(t, nil)
	key := uniqueKey(t)
	l1 := mustObtain(t, ctx, c, key)
	if err := shared.Client(t).Del(ctx, lock.DefaultPrefix+"{"+key+"}").Err(); err != nil {
		t.Fatal(err)
	}
	mustObtain(t, ctxTimeout(t, 5*time.Second), newClient(t, nil), key) // another owner holds
	if _, err := c.TryObtain(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryObtain: %v", err)
	}
	waitClosed(t, l1.Lost(), 100*time.Millisecond, "the vanished hold's Lost")
}

// TestHandoffLostReplyLinerGone: a hand-off's answer is lost for good and
// the next in line's ctx ends before it could attempt: the level the
// hand-off gave its owner must be dropped, not left held for its TTL.
func TestHandoffLostReplyLinerGone(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb, r := lossyRedis(t, &redis.Options{MaxRetries: -1})
	c := lock.New(rdb)
	t.Cleanup(func() { c.Close() })
	key := uniqueKey(t)
	r.Delay = time.Second // the hand-off's answer is lost a second after it was sent
	first := mustObtain(t, ctx, c, key)
	lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Obtain(lctx, key)
		done <- err
	}()
	waitInLine(t, c, key, 1) // its ctx ends while the hand-off is under way
	r.Arm(lock.Scripts()["handoff.lua"].Carried())
	if err := first.Release(ctx); err == nil {
		t.Fatal("Release succeeded although the hand-off's answer was lost")
	}
	if err := <-done; !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("the liner: %v, want ErrNotObtained (its ctx ended)", err)
	}
	wantLost(t, r)
	if got := owners(t, ctx, newClient(t, nil), key); len(got) != 0 {
		t.Fatalf("after the liner gave up: held by %v, want free", got)
	}
}
