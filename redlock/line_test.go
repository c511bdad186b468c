package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
)

// TestLocalLineHotKey: 12 goroutines of one Client on one key with 3
// masters line up in process: no lost update, and each section costs one
// hand-off per master (the release that gives the lock to the next in
// line), no failed or split round. (A 100 ms node timeout: with the
// default 20 ms, a CI run under load saw two masters answer a hand-off
// later than that, and the library rightly reported no quorum.)
func TestLocalLineHotKey(t *testing.T) {
	const masters = 3
	var evals testserver.EvalCounter
	c := countedClient(t, masters, &evals, redlock.WithNodeTimeout(100*time.Millisecond))
	counter := dial(t, shared[0].Addr())[0]
	before := evals.N()
	sections := exclusion(t, counter, []lock.Locker{c}, 12, time.Second, nil)
	// Renewals (every TTL/3 = 10 s) do not happen in 1 s; a few rounds
	// raise the masters' fencing counters to the largest (raise_fence.lua)
	// until they agree; the first section acquires, the last releases.
	t.Logf("%d scripts", evals.N()-before)
	if n, want := evals.N()-before, masters*sections+20; n > want {
		t.Fatalf("%d scripts for %d sections, want at most %d", n, sections, want)
	}
}

// TestLocalLineLostHoldLetsNextIn: a hold lost (its key deleted on every
// master) gives the line's front to the next goroutine without a release.
func TestLocalLineLostHoldLetsNextIn(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	c := newClient(t, shared[:3], redlock.WithDefaultTTL(300*time.Millisecond))
	first := mustObtain(t, ctx, c, key)
	got := make(chan error, 1)
	go func() {
		l, err := c.Obtain(ctx, key)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitInLine(t, c, key, 1) // the second goroutine waits in line
	node, _ := hashlock.NewNode(redlock.DefaultPrefix)
	k := node.Keys(key)
	for _, r := range dial(t, addrsOf(shared[:3])...) {
		r.Del(ctx, k.Lock)
	}
	waitClosed(t, first.Lost(), 2*time.Second, "first lease lost")
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the next in line did not get the lock after the hold was lost")
	}
	if err := first.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("release of the lost lease: %v, want ErrNotHeld", err)
	}
}

// TestLocalLineCancelAndReentry: a goroutine whose ctx ends while it waits
// in line returns ErrNotObtained with the ctx's error and leaves the line;
// re-entry by the holding owner does not wait behind the line; Close wakes
// the goroutines in line with ErrClosed.
func TestLocalLineCancelAndReentry(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	c, err := redlock.New(dial(t, addrsOf(shared[:3])...), redlock.WithNodeTimeout(testNodeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	octx := lock.WithOwner(ctx, lock.NewOwner())
	held := mustObtain(t, octx, c, key)

	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Obtain(wctx, key); !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Obtain in line past its deadline = %v", err)
	}
	inner, err := c.Obtain(octx, key) // re-entry: at once
	if err != nil {
		t.Fatal(err)
	}
	if inner.Token() != held.Token() {
		t.Fatalf("re-entry token %d, want %d", inner.Token(), held.Token())
	}
	inner.Release(ctx)

	waiting := make(chan error, 1)
	go func() {
		_, err := c.Obtain(ctx, key)
		waiting <- err
	}()
	waitInLine(t, c, key, 1)
	c.Close()
	select {
	case err := <-waiting:
		if !errors.Is(err, lock.ErrClosed) {
			t.Fatalf("Obtain in line at Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the goroutine in line")
	}
	held.Release(ctx) // Close lost it; the masters free it after its TTL
}
