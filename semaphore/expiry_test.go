package semaphore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
