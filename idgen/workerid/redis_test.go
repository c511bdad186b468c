package workerid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newRedisLeaser(t *testing.T, r *testserver.Redis, opts ...workerid.Option) *workerid.RedisLeaser {
	t.Helper()
	l, err := workerid.NewRedis(r.Client(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func release(t *testing.T, l *workerid.Lease) {
	t.Helper()
	t.Cleanup(func() { l.Release(context.Background()) })
}

// waitLost waits up to d for the lease to be lost.
func waitLost(t *testing.T, l *workerid.Lease, d time.Duration) {
	t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(d):
		t.Fatalf("lease %d not lost within %v", l.ID(), d)
	}
}

func TestRedisConcurrentLeasesAreDistinct(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := ctxT(t, 30*time.Second)
	const n = 20
	ids := make(chan int64, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() { // each with its own client, as 20 processes would
			defer wg.Done()
			l, err := workerid.NewRedis(r.Client(t))
			if err != nil {
				t.Error(err)
				return
			}
			lease, err := l.Lease(ctx, "orders")
			if err != nil {
				t.Error(err)
				return
			}
			release(t, lease)
			ids <- lease.ID()
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[int64]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("worker ID %d leased twice", id)
		}
		seen[id] = true
	}
	// Lowest free first: exactly 0..19.
	for id := range int64(n) {
		if !seen[id] {
			t.Fatalf("worker ID %d not leased; got %v", id, seen)
		}
	}
	holders, err := newRedisLeaser(t, r).List(ctx, "orders")
	if err != nil || len(holders) != n {
		t.Fatalf("List: %d holders, %v", len(holders), err)
	}
	if holders[0].Host == "" || holders[0].PID == 0 || holders[0].TTL <= 0 {
		t.Fatalf("holder record incomplete: %+v", holders[0])
	}
}

func TestRedisKeyDeletedStopsGenerator(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := ctxT(t, 30*time.Second)
	// A TTL of 3 s, renewed every second: with a shorter one, a loaded
	// host's stall can expire the lease before the first Next.
	lr := newRedisLeaser(t, r, workerid.WithTTL(3*time.Second))
	lease, err := lr.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	release(t, lease)
	sf, err := lease.NewSnowflake(ctx, idgen.LayoutWorker10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sf.Next(); err != nil {
		t.Fatal(err)
	}
	// An operator deletes the key: the next renewal answers "not held".
	r.Client(t).Del(ctx, "coordkit:worker:{svc}:0")
	waitLost(t, lease, 6*time.Second)
	if _, err := sf.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
		t.Fatalf("Next after loss: want ErrLeaseLost, got %v", err)
	}
	if !errors.Is(lease.Err(), workerid.ErrReleased) && lease.Err() == nil {
		t.Fatal("lost lease reports no cause")
	}
	// The ID is free for a new process.
	again, err := newRedisLeaser(t, r).Lease(ctx, "svc")
	if err != nil || again.ID() != 0 {
		t.Fatalf("re-lease: id %v, %v", again, err)
	}
	release(t, again)
}

func TestRedisServerDownLosesLeaseBeforeKeyExpires(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := ctxT(t, 30*time.Second)
	ttl := 900 * time.Millisecond
	lease, err := newRedisLeaser(t, r, workerid.WithTTL(ttl)).Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	release(t, lease)
	sf, err := lease.NewSnowflake(ctx, idgen.Layout{})
	if err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	defer r.Resume()
	waitLost(t, lease, 3*ttl)
	// Lost about when the key's own expiry could free the ID (its deadline
	// is at most ttl after the pause), not at a renewal's read timeout
	// (3 s); 200 ms past it left a starved host (load 23 on 2 cores), whose
	// watchdog goroutine runs late, too little room.
	if since := time.Since(paused); since > ttl+1100*time.Millisecond {
		t.Fatalf("lease lost %v after the pause, key TTL %v", since, ttl)
	}
	if _, err := sf.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
		t.Fatalf("Next after loss: want ErrLeaseLost, got %v", err)
	}
}

func TestRedisReleaseStopsGeneratorAndFreesID(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := ctxT(t, 30*time.Second)
	lr := newRedisLeaser(t, r)
	lease, err := lr.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	sf, err := lease.NewSnowflake(ctx, idgen.Layout{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sf.Next(); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); !errors.Is(err, workerid.ErrReleased) {
		t.Fatalf("second Release: %v", err)
	}
	if _, err := sf.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
		t.Fatalf("Next after Release: want ErrLeaseLost, got %v", err)
	}
	if n, _ := r.Client(t).Exists(ctx, "coordkit:worker:{svc}:0").Result(); n != 0 {
		t.Fatal("key left after Release")
	}
	// Release saved the high-water mark.
	mark, err := lease.HighWater().Load(ctx)
	if err != nil || mark.IsZero() {
		t.Fatalf("high-water mark after Release: %v, %v", mark, err)
	}
}

func TestRedisClockBehindHighWaterIsRefused(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := ctxT(t, 30*time.Second)
	lr := newRedisLeaser(t, r)
	lease, err := lr.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	sf, err := lease.NewSnowflake(ctx, idgen.Layout{})
	if err != nil {
		t.Fatal(err)
	}
	last, _ := sf.Next()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The same worker ID restarts on a host whose clock is 2 s behind.
	lease2, err := lr.Lease(ctx, "svc")
	if err != nil || lease2.ID() != lease.ID() {
		t.Fatalf("re-lease: %v, %v", lease2, err)
	}
	release(t, lease2)
	behind := func() time.Time { return time.Now().Add(-2 * time.Second) }
	_, err = lease2.NewSnowflake(ctx, idgen.Layout{}, idgen.WithClock(behind))
	var cb *idgen.ClockBackwardsError
	if !errors.As(err, &cb) || cb.Behind < time.Second {
		t.Fatalf("clock 2 s behind the mark: want *ClockBackwardsError, got %v", err)
	}
	// With a clock that is right, IDs continue above the last one.
	sf2, err := lease2.NewSnowflake(ctx, idgen.Layout{})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := sf2.Next(); err != nil || id <= last {
		t.Fatalf("after restart: %d (last %d), %v", id, last, err)
	}
}

func TestRedisExhausted(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := ctxT(t, 30*time.Second)
	lr := newRedisLeaser(t, r, workerid.WithMax(2))
	for range 3 {
		l, err := lr.Lease(ctx, "tiny")
		if err != nil {
			t.Fatal(err)
		}
		release(t, l)
	}
	_, err := lr.Lease(ctx, "tiny")
	var ex *workerid.ExhaustedError
	if !errors.As(err, &ex) || !errors.Is(err, workerid.ErrExhausted) || !strings.Contains(err.Error(), `"tiny"`) {
		t.Fatalf("want ExhaustedError naming the service, got %v", err)
	}
}

func TestRedisBadInput(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := ctxT(t, 30*time.Second)
	if _, err := workerid.NewRedis(nil); !errors.Is(err, workerid.ErrInvalid) {
		t.Errorf("nil client: %v", err)
	}
	for name, opt := range map[string]workerid.Option{
		"negative max": workerid.WithMax(-1),
		"tiny ttl":     workerid.WithTTL(time.Millisecond),
		"zero ttl":     workerid.WithTTL(0),
		"empty prefix": workerid.WithPrefix(""),
	} {
		if _, err := workerid.NewRedis(r.Client(t), opt); !errors.Is(err, workerid.ErrInvalid) {
			t.Errorf("%s: want ErrInvalid, got %v", name, err)
		}
	}
	lr := newRedisLeaser(t, r, workerid.WithMax(2000))
	for _, svc := range []string{"", "a{b}", "a b"} {
		if _, err := lr.Lease(ctx, svc); !errors.Is(err, workerid.ErrInvalid) {
			t.Errorf("service %q: want ErrInvalid, got %v", svc, err)
		}
	}
	// A maximum of 2000 does not fit 10 worker bits.
	lease, err := lr.Lease(ctx, "wide")
	if err != nil {
		t.Fatal(err)
	}
	release(t, lease)
	if _, err := lease.NewSnowflake(ctx, idgen.LayoutWorker10); !errors.Is(err, workerid.ErrInvalid) {
		t.Errorf("max out of the layout's range: want ErrInvalid, got %v", err)
	}
	// A corrupted high-water mark is an error, not a silent reset.
	r.Client(t).Set(ctx, fmt.Sprintf("coordkit:worker:{wide}:hw:%d", lease.ID()), "garbage", 0)
	if _, err := lease.NewSnowflake(ctx, idgen.LayoutSonyflake); err == nil || !strings.Contains(err.Error(), "not a number") {
		t.Errorf("corrupted mark: %v", err)
	}
	if err := lease.HighWater().Store(ctx, time.Now()); err == nil {
		t.Error("Store over a corrupted mark succeeded")
	}
}

func TestRedisCluster(t *testing.T) {
	c := testserver.StartRedisCluster(t)
	ctx := ctxT(t, 30*time.Second)
	lr, err := workerid.NewRedis(c.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	a, err := lr.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	release(t, a)
	b, err := lr.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	release(t, b)
	if a.ID() == b.ID() {
		t.Fatal("same ID twice on a cluster")
	}
	sf, err := b.NewSnowflake(ctx, idgen.Layout{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sf.Next(); err != nil {
		t.Fatal(err)
	}
}
