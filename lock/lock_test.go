package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// exclusion runs goroutines on every locker, each repeatedly taking key and
// doing a non-atomic read-modify-write of a counter in Redis (GET, sleep,
// SET) for d, and checks that no increment was lost and no two sections
// overlapped.
func exclusion(t *testing.T, rdb redis.UniversalClient, lockers []lock.Locker, goroutines int, d time.Duration) {
	t.Helper()
	key := uniqueKey(t)
	counter := "{" + key + "}:counter"
	ctx := ctxTimeout(t, d+30*time.Second)
	stop := time.Now().Add(d)
	var inside, overlaps, sections atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*len(lockers))
	for _, l := range lockers {
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					err := lock.Do(ctx, l, key, func(ctx context.Context) error {
						if inside.Add(1) != 1 {
							overlaps.Add(1)
						}
						defer inside.Add(-1)
						n, err := rdb.Get(ctx, counter).Int64()
						if err != nil && !errors.Is(err, redis.Nil) {
							return err
						}
						time.Sleep(100 * time.Microsecond)
						if err := rdb.Set(ctx, counter, n+1, 0).Err(); err != nil {
							return err
						}
						sections.Add(1)
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := rdb.Get(ctx, counter).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if overlaps.Load() != 0 {
		t.Errorf("%d overlapping critical sections", overlaps.Load())
	}
	if got != sections.Load() {
		t.Errorf("counter = %d after %d sections", got, sections.Load())
	}
	if sections.Load() < int64(len(lockers)) {
		t.Errorf("only %d sections", sections.Load())
	}
	t.Logf("%d sections in %v", sections.Load(), d)
}

func TestMutualExclusion(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			var opts []lock.ClientOption
			if fair {
				opts = append(opts, lock.WithFair())
			}
			exclusion(t, shared.Client(t), []lock.Locker{newClient(t, nil, opts...), newClient(t, nil, opts...)}, 32, 2*time.Second)
		})
	}
}

func TestMutualExclusionCluster(t *testing.T) {
	cl := testserver.StartRedisCluster(t)
	exclusion(t, cl.Client(t), []lock.Locker{newClient(t, cl), newClient(t, cl)}, 8, time.Second)
}

func TestMutualExclusionSentinel(t *testing.T) {
	s := testserver.StartRedisSentinel(t)
	exclusion(t, s.Client(t), []lock.Locker{newClient(t, s), newClient(t, s)}, 8, time.Second)
}

func TestReentrancy(t *testing.T) {
	c := newClient(t, nil)
	key := uniqueKey(t)
	ctx := ctxTimeout(t, 10*time.Second)
	var tokens []int64
	var depth func(ctx context.Context, n int) error
	depth = func(ctx context.Context, n int) error {
		return lock.Do(ctx, c, key, func(ctx context.Context) error {
			l, err := c.TryObtain(ctx, key) // re-enters as well
			if err != nil {
				return fmt.Errorf("TryObtain at depth %d: %w", n, err)
			}
			tokens = append(tokens, l.Token())
			if err := l.Release(ctx); err != nil {
				return err
			}
			info, err := c.Inspect(ctx, key)
			if err != nil {
				return err
			}
			owner, _ := lock.OwnerFrom(ctx)
			if info.Owners[owner] != int64(n) {
				return fmt.Errorf("depth %d: hold count %v", n, info.Owners)
			}
			// Another owner cannot enter.
			if _, err := c.TryObtain(context.Background(), key); !errors.Is(err, lock.ErrNotObtained) {
				return fmt.Errorf("foreign TryObtain at depth %d: %v", n, err)
			}
			if n < 3 {
				return depth(ctx, n+1)
			}
			return nil
		})
	}
	if err := depth(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for _, tok := range tokens[1:] {
		if tok != tokens[0] {
			t.Fatalf("tokens on re-entry differ: %v", tokens)
		}
	}
	info, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Held() {
		t.Fatalf("still held after the outermost Do: %+v", info)
	}
	l := mustObtain(t, ctx, c, key)
	if l.Token() <= tokens[0] {
		t.Fatalf("fresh token %d not above %d", l.Token(), tokens[0])
	}
	l.Release(ctx)
}

func TestReleaseNotHeld(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	key := uniqueKey(t)
	a, b := newClient(t, nil), newClient(t, nil)
	la := mustObtain(t, ctx, a, key, lock.WithTTL(100*time.Millisecond))
	a.Close() // a's lease is no longer renewed and expires
	lb := mustObtain(t, ctx, b, key)
	if err := la.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("release by the former owner: %v, want ErrNotHeld", err)
	}
	if _, err := a.TryObtain(ctx, key); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("TryObtain after Close: %v, want ErrClosed", err)
	}
	if info, _ := b.Inspect(ctx, key); !info.Held() {
		t.Fatal("the foreign release freed the lock")
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lb.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
}

func TestExpiresWhenHolderVanishes(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	key := uniqueKey(t)
	a, b := newClient(t, nil), newClient(t, nil)
	la := mustObtain(t, ctx, a, key, lock.WithTTL(200*time.Millisecond))
	a.Close()
	waitClosed(t, la.Lost(), time.Second, "Lost after Close")
	begin := time.Now()
	lb := mustObtain(t, ctx, b, key)
	if d := time.Since(begin); d > 2*time.Second {
		t.Fatalf("obtained %v after the holder vanished, TTL 200 ms", d)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token %d not above %d", lb.Token(), la.Token())
	}
	lb.Release(ctx)
}

func TestWatchdogKeepsLock(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	key := uniqueKey(t)
	a, b := newClient(t, nil), newClient(t, nil)
	// A 3 s TTL, renewed every third of it: 300 ms failed beside two CPU
	// burners and other builds (load 23 on 2 cores), a renewal starved
	// past the lease's end, and 1 s leaves a stalled test process only
	// 670 ms. 7 s is more than two TTLs, so the lock outlives its first
	// lease only by renewals.
	l := mustObtain(t, ctx, a, key, lock.WithTTL(3*time.Second))
	for end := time.Now().Add(7 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if _, err := b.TryObtain(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("other client: %v, want ErrNotObtained", err)
		}
		select {
		case <-l.Lost():
			t.Fatal("lease lost while the watchdog renews it")
		default:
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMaxHold(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	key := uniqueKey(t)
	c := newClient(t, nil)
	begin := time.Now()
	// A 1 s TTL: with 100 ms, a watchdog starved past the lease's end
	// (a run of this package beside other builds, load 17-19 on 2 cores) lost
	// it at 117 ms, before MaxHold.
	l := mustObtain(t, ctx, c, key, lock.WithTTL(time.Second), lock.WithMaxHold(2*time.Second))
	waitClosed(t, l.Lost(), 5*time.Second, "Lost after MaxHold")
	if d := time.Since(begin); d < 2*time.Second {
		t.Fatalf("lost after %v, before MaxHold", d)
	}
	if err := l.(interface{ Err() error }).Err(); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Err = %v", err)
	}
	l2 := mustObtain(t, ctx, newClient(t, nil), key)
	l2.Release(ctx)
}
