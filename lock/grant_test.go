package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// Grants (internal/redisfn/lua/lock/queue.lua): the outermost release gives the lock to the first
// live queued waiter of a Client, which takes it from the Pub/Sub message,
// or from its next attempt if the message is lost, or gives it back when
// it leaves.

// TestGrantTakenFromMessage: the release makes the waiter's owner the
// holder at once; the waiter returns with the grant's token, without an
// acquisition of its own, and its watchdog renews the short grant TTL to
// the lease's TTL.
func TestGrantTakenFromMessage(t *testing.T) {
	// The waiter timeout, and so the grant's TTL: b's queue entry must be
	// called in, and the grant renewed, within a third of it. 300 ms left
	// 200 ms to a starved process (load 23 on 2 cores); 1.5 s leaves 1 s,
	// below the lease's 3 s so that the grant's TTL stays told apart.
	const bound = 1500 * time.Millisecond
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	a := newClient(t, nil)
	var evals testserver.EvalCounter
	rdb := shared.Client(t)
	rdb.AddHook(&evals)
	b := lock.New(rdb, lock.WithWaiterTimeout(bound))
	t.Cleanup(func() { b.Close() })

	la := mustObtain(t, ctx, a, key)
	type res struct {
		l   lock.Lease
		err error
	}
	got := make(chan res, 1)
	owner := lock.NewOwner()
	go func() {
		l, err := b.Obtain(lock.WithOwner(ctx, owner), key, lock.WithTTL(3*time.Second))
		got <- res{l, err}
	}()
	waitQueued(t, a, key, 1)
	before := evals.N()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := a.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Owners[owner] != 1 || len(info.Owners) != 1 || !strings.Contains(info.Granted, "|"+owner) {
		t.Fatalf("after the release: %+v, want %s granted", info, owner)
	}
	if info.TTL > bound {
		t.Fatalf("grant TTL %v, want at most the waiter timeout %v", info.TTL, bound)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Release(ctx)
	if r.l.Token() != info.Token || r.l.Token() <= la.Token() {
		t.Fatalf("token %d, granted %d, previous holder %d", r.l.Token(), info.Token, la.Token())
	}
	if n := evals.N() - before; n > 1 { // at most the renewal of the short grant
		t.Fatalf("the granted waiter sent %d scripts to take the lock", n)
	}
	// Past the grant's TTL: the watchdog renewed it to the lease's TTL.
	time.Sleep(bound + 300*time.Millisecond)
	select {
	case <-r.l.Lost():
		t.Fatalf("granted lease lost: %v", r.l.(interface{ Err() error }).Err())
	default:
	}
	info, err = a.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Owners[owner] != 1 || info.TTL <= bound {
		t.Fatalf("past the grant's TTL: %+v, want held by %s with the lease's TTL", info, owner)
	}
}

// TestGrantTakenByNextAttempt: a waiter that gets no message (a polling
// waiter in fair mode, never subscribed) takes the grant at its next
// attempt, as one hold level, and its release frees the lock.
func TestGrantTakenByNextAttempt(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	a := newClient(t, nil, lock.WithFair())
	b := newClient(t, nil, lock.WithFair())
	la := mustObtain(t, ctx, a, key)
	got := make(chan error, 1)
	owner := lock.NewOwner()
	var lb lock.Lease
	go func() {
		var err error
		lb, err = b.Obtain(lock.WithOwner(ctx, owner), key, lock.WithRetry(func(int) time.Duration { return 300 * time.Millisecond }))
		got <- err
	}()
	waitQueued(t, a, key, 1)
	la.Release(ctx)
	if info, _ := a.Inspect(ctx, key); info.Granted == "" || info.Owners[owner] != 1 {
		t.Fatalf("after the release: %+v, want a grant to %s", info, owner)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	info, err := a.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Owners[owner] != 1 || info.Granted != "" || lb.Token() != info.Token {
		t.Fatalf("taken: %+v, token %d; want one level, no grant left", info, lb.Token())
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := a.Inspect(ctx, key); info.Held() {
		t.Fatalf("after the release: %+v, want free", info)
	}
}

// TestGrantGivenBack: a waiter granted the lock that gives up before taking
// it gives the grant back; the lock passes to the next waiter.
func TestGrantGivenBack(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	a := newClient(t, nil, lock.WithFair())
	b := newClient(t, nil, lock.WithFair())
	c := newClient(t, nil, lock.WithFair())
	la := mustObtain(t, ctx, a, key)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bOwner := lock.NewOwner()
	bDone := make(chan error, 1)
	go func() { // polls every 10 s: it sees no grant before its ctx ends
		_, err := b.Obtain(lock.WithOwner(bctx, bOwner), key, lock.WithRetry(func(int) time.Duration { return 10 * time.Second }))
		bDone <- err
	}()
	waitQueued(t, a, key, 1)
	cGot := make(chan error, 1)
	go func() {
		l, err := c.Obtain(ctx, key)
		if err == nil {
			err = l.Release(ctx)
		}
		cGot <- err
	}()
	waitQueued(t, a, key, 2)
	la.Release(ctx)
	if info, _ := a.Inspect(ctx, key); info.Owners[bOwner] != 1 {
		t.Fatalf("after the release: %+v, want granted to b", info)
	}
	cancel()
	if err := <-bDone; !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("b: %v, want ErrNotObtained and context.Canceled", err)
	}
	select {
	case err := <-cGot:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second): // c would otherwise wait for its timer (≥ 1.6 s) or more
		t.Fatal("the grant b gave back did not pass to c")
	}
}

// TestGrantToVanishedWaiter: a queued waiter whose process is gone (no
// Pub/Sub, no attempts) is granted the lock; the grant expires after the
// waiter's grant TTL (at most its waiter timeout) and the next waiter gets
// the lock. The queue entry is written by hand, as a crashed client left it.
func TestGrantToVanishedWaiter(t *testing.T) {
	const bound = 300 * time.Millisecond
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	a := newClient(t, nil, lock.WithWaiterTimeout(bound))
	b := newClient(t, nil, lock.WithWaiterTimeout(bound))
	la := mustObtain(t, ctx, a, key)
	rdb := shared.Client(t)
	k := hashlock.Node{}.Keys(key)
	ghost := "0ghostclient:1|300|ghost-owner"
	deadline := float64(time.Now().Add(10 * time.Second).UnixMilli())
	if err := rdb.ZAdd(ctx, k.Deadlines, redis.Z{Score: deadline, Member: ghost}).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.RPush(ctx, k.Queue, ghost)
	got := make(chan time.Time, 1)
	go func() {
		l, err := b.Obtain(ctx, key)
		got <- time.Now()
		if err != nil {
			t.Error(err)
			return
		}
		l.Release(ctx)
	}()
	waitQueued(t, a, key, 2)
	released := time.Now()
	la.Release(ctx)
	if info, _ := a.Inspect(ctx, key); info.Owners["ghost-owner"] != 1 {
		t.Fatalf("after the release: %+v, want granted to the ghost", info)
	}
	select {
	case at := <-got:
		// The grant lasts 300 ms; b calls in every 100 ms. At most 2 s
		// later (not 600 ms: a starved process, load 23 on 2 cores), far
		// below the ghost's 10 s deadline.
		if d := at.Sub(released); d < bound-50*time.Millisecond || d > bound+2*time.Second {
			t.Fatalf("next waiter obtained %v after the release, grant %v", d, bound)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the ghost's grant did not expire")
	}
}

// TestGrantOutlivesPoll: a fair waiter that gets no message (a polling
// waiter, or one whose message was lost) calls in within half of a grant's
// TTL, so that a grant made to it right after one of its attempts is still
// there at its next: it keeps its turn. Before, it called in only after
// min(the holder's PTTL, a third of the waiter timeout), 2 s here against
// a 600 ms grant: the grant expired untaken, and the waiter behind it took
// the lock first while the one before queued again at the end.
func TestGrantOutlivesPoll(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	a := newClient(t, nil, lock.WithFair())
	b := newClient(t, nil, lock.WithFair(), lock.WithWaiterTimeout(6*time.Second))
	c := newClient(t, nil, lock.WithFair())
	la := mustObtain(t, ctx, a, key, lock.WithTTL(3*time.Second))
	order := make(chan string, 2)
	errs := make(chan error, 2)
	obtain := func(cl *lock.Client, name string, opts ...lock.Option) {
		l, err := cl.Obtain(ctx, key, opts...)
		if err != nil {
			errs <- err
			return
		}
		order <- name
		time.Sleep(20 * time.Millisecond)
		errs <- l.Release(ctx)
	}
	go obtain(b, "first", lock.WithTTL(600*time.Millisecond), lock.WithRetry(func(int) time.Duration { return 2 * time.Second }))
	waitQueued(t, a, key, 1)
	go obtain(c, "second", lock.WithRetry(func(int) time.Duration { return 20 * time.Millisecond }))
	waitQueued(t, a, key, 2)
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := <-order; got != "first" {
		t.Fatalf("the waiter queued second was served first: the first one's grant expired before it called in")
	}
}
