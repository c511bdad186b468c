package semaphore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/semaphore"
)

// TestReleaseExpiredUnswept: a permit whose expiry has passed on Redis's
// clock (here its score is moved into the past, as a jump of the Redis
// host's clock does) but that no script has swept yet is not held: its
// Release returns lock.ErrNotHeld, as its doc says, not nil.
func TestReleaseExpiredUnswept(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	name := newName(t)
	c := newClient(t, shared.Addr())
	p, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr()})
	defer rdb.Close()
	holders := semaphore.DefaultPrefix + "{" + name + "}"
	if n, err := rdb.ZAddXX(ctx, holders, redis.Z{Score: 1, Member: p.ID()}).Result(); err != nil || n != 0 {
		t.Fatalf("ZADD XX of the permit's expiry: %d, %v", n, err)
	}
	if s, err := rdb.ZScore(ctx, holders, p.ID()).Result(); err != nil || s != 1 {
		t.Fatalf("the permit's expiry is %v, %v; want 1 (still in the set, not swept)", s, err)
	}
	if err := p.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release of a permit expired on Redis's clock = %v, want lock.ErrNotHeld", err)
	}
	if _, h, _ := c.Usage(ctx, name); h != 0 {
		t.Fatalf("%d permits held after the release", h)
	}
	q, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire after the expired permit's release: %v", err)
	}
	q.Release(context.WithoutCancel(ctx))
}

// TestReleaseAfterDeadlineUnanswered: a holder whose process was stopped
// past its permit's deadline, and whose release Redis then does not
// answer, is told that the permit is lost (the rule package lock's leases
// follow): Release's error matches lock.ErrNotHeld and Lost is closed. The
// stop is the client's clock jumping past the deadline before the
// watchdog's goroutine runs; Redis is paused, with go-redis's default
// options. Before the deadline the same failure stays a plain error and
// the permit is not reported lost.
func TestReleaseAfterDeadlineUnanswered(t *testing.T) {
	srv := testserver.StartRedis(t)
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	c := semaphore.New(srv.Client(t), semaphore.WithClock(clock), semaphore.WithPermits(2))
	defer c.Close()
	ctx := ctxFor(t, 60*time.Second)
	const ttl = 10 * time.Second
	release := func(p *semaphore.Permit) error {
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := p.Release(rctx)
		cancel()
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		return err
	}
	name := newName(t)
	p, err := c.TryAcquire(ctx, name, lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	skew.Store(int64(ttl + time.Second))
	if err := release(p); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release after the deadline, Redis paused: %v, want an error matching lock.ErrNotHeld", err)
	}
	select {
	case <-p.Lost():
	default:
		t.Fatal("Lost not closed when Release returned")
	}
	if err := p.Err(); !errors.Is(err, lock.ErrLockLost) || !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("the permit's Err = %v, want lock.ErrLockLost and lock.ErrNotHeld", err)
	}

	skew.Store(0)
	q, err := c.TryAcquire(ctx, name, lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if err := release(q); err == nil || errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release before the deadline, Redis paused: %v, want a Redis error that is not lock.ErrNotHeld", err)
	}
	select {
	case <-q.Lost():
		t.Fatal("Lost closed by a release that failed before the deadline")
	default:
	}
}
