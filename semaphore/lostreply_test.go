package semaphore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/semaphore"
)

// lossyClient is a semaphore client whose connections can lose a
// script's reply after the script ran; go-redis (default options) then
// sends it again, so it runs twice.
func lossyClient(t *testing.T, opts ...semaphore.Option) (*semaphore.Client, *testserver.ReplyLoser) {
	t.Helper()
	r := &testserver.ReplyLoser{}
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), Dialer: r.Dial})
	for _, s := range semaphore.Scripts() {
		if err := s.Load(context.Background(), rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := semaphore.New(rdb, opts...)
	t.Cleanup(func() { c.Close(); rdb.Close() })
	return c, r
}

// TestLostReplyAcquire: the acquisition of the last free permit runs
// twice; the second run must find the permit its first run took, not
// queue behind it (which would leave an orphan permit until its TTL).
func TestLostReplyAcquire(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	name := newName(t)
	c, r := lossyClient(t)
	r.Arm(semaphore.Scripts()["acquire.lua"].Hash())
	p, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire whose reply was lost and resent: %v", err)
	}
	if r.Lost() == 0 {
		t.Fatal("no reply was lost")
	}
	if _, h, _ := c.Usage(ctx, name); h != 1 {
		t.Fatalf("%d permits held after one acquisition", h)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
	q.Release(ctx)
}

// TestLostReplyRelease: the release runs twice; the caller is told it
// released, not lock.ErrNotHeld.
func TestLostReplyRelease(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	c, r := lossyClient(t)
	p, err := c.TryAcquire(ctx, newName(t))
	if err != nil {
		t.Fatal(err)
	}
	r.Arm(semaphore.Scripts()["release.lua"].Hash())
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release whose reply was lost and resent: %v, want nil", err)
	}
	if r.Lost() == 0 {
		t.Fatal("no reply was lost")
	}
	if err := p.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Release: %v", err)
	}
}

// TestLostReplyForGoodLeaves: a waiting acquisition whose reply is lost for
// good (retries off) fails, but it ran and queued its waiter; the failed
// call takes the waiter out again, so the next release does not grant the
// permit to a call that already returned.
func TestLostReplyForGoodLeaves(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	name := newName(t)
	holder := newClient(t, shared.Addr())
	p, err := holder.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	r := &testserver.ReplyLoser{}
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), Dialer: r.Dial, MaxRetries: -1})
	for _, s := range semaphore.Scripts() {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := semaphore.New(rdb)
	t.Cleanup(func() { c.Close(); rdb.Close() })
	r.Arm(semaphore.Scripts()["acquire.lua"].Hash())
	if _, err := c.Acquire(ctx, name); err == nil {
		t.Fatal("Acquire succeeded although its reply was lost")
	}
	if r.Lost() == 0 {
		t.Fatal("no reply was lost")
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := newClient(t, shared.Addr()).TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v, want the permit (no waiter left to grant it to)", err)
	}
	q.Release(ctx)
}
