package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// TestLocalLineHotKey: goroutines of one client on one key line up in
// process: the read-modify-write in Redis loses no update, and each section
// costs exactly one acquisition and one release (no failed attempt, no
// queueing in Redis).
func TestLocalLineHotKey(t *testing.T) {
	const goroutines, rounds = 8, 40
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	rdb := shared.NewClient()
	t.Cleanup(func() { rdb.Close() })
	c := lock.New(rdb)
	t.Cleanup(func() { c.Close() })
	// Warm up before counting: the scripts may not be in Redis's cache yet
	// (EVALSHA, NOSCRIPT, then EVAL).
	if err := mustObtain(t, ctx, c, key).Release(ctx); err != nil {
		t.Fatal(err)
	}
	var evals testserver.EvalCounter
	rdb.AddHook(&evals)
	counter := key + ":n"
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				err := lock.Do(ctx, c, key, func(ctx context.Context) error {
					v, err := rdb.Get(ctx, counter).Int()
					if err != nil && !errors.Is(err, redis.Nil) {
						return err
					}
					return rdb.Set(ctx, counter, v+1, 0).Err()
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n, err := rdb.Get(ctx, counter).Int(); err != nil || n != goroutines*rounds {
		t.Fatalf("counter = %d, %v; want %d", n, err, goroutines*rounds)
	}
	// A hand-off is the release and the next acquisition in one script; only
	// a goroutine that finds nobody in line pays for its own acquisition.
	sections := int64(goroutines * rounds)
	if got := evals.N(); got > sections+2*goroutines {
		t.Fatalf("%d scripts run for %d sections: the line did not hand the lock over", got, sections)
	} else {
		t.Logf("%d scripts for %d sections", got, sections)
	}
}

// TestLocalLineLetsOtherClientsIn: while one client's goroutines keep a key
// busy by handing it over among themselves, another client's waiter still
// gets it: a hand-off with a live waiter of another client queued releases
// and wakes that waiter instead.
func TestLocalLineLetsOtherClientsIn(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	busy, other := newClient(t, nil), newClient(t, nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := lock.Do(ctx, busy, key, func(context.Context) error {
					time.Sleep(time.Millisecond)
					return nil
				}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	for range 5 {
		start := time.Now()
		l := mustObtain(t, ctx, other, key)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("the other client waited %v", d)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// TestLocalLineConnectionCuts: hand-offs and attempts whose connections are
// cut mid-flight (answers lost) never let two goroutines in, and the line
// keeps going once the connection is back.
func TestLocalLineConnectionCuts(t *testing.T) {
	srv := testserverRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr())
	ctx := ctxTimeout(t, 60*time.Second)
	key := uniqueKey(t)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	c := lock.New(rdb, lock.WithDefaultTTL(time.Second))
	t.Cleanup(func() { c.Close() })
	var inside, overlaps, sections, failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := lock.Do(ctx, c, key, func(context.Context) error {
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					time.Sleep(200 * time.Microsecond)
					inside.Add(-1)
					sections.Add(1)
					return nil
				})
				if err != nil {
					failures.Add(1)
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	for range 10 {
		time.Sleep(50 * time.Millisecond)
		proxy.Cut()
	}
	// Back to normal: sections go on.
	before := sections.Load()
	deadline := time.Now().Add(10 * time.Second)
	for sections.Load() < before+50 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping sections", overlaps.Load())
	}
	if sections.Load() < before+50 {
		t.Fatalf("only %d sections after the cuts (%d before)", sections.Load()-before, before)
	}
	t.Logf("%d sections, %d failed calls during 10 cuts", sections.Load(), failures.Load())
}

// TestLocalLineLostHoldLetsNextIn: a hold that is lost (its key deleted
// under it) gives up its place in line at once, so the next local waiter
// obtains the lock without the lost holder ever releasing.
func TestLocalLineLostHoldLetsNextIn(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	c := newClient(t, nil)
	// 1.5 s: the hold must still be there for ForceRelease to delete it;
	// with 300 ms, a renewal starved for 200 ms (load 23 on 2 cores) would
	// let it expire first.
	lost := mustObtain(t, ctx, c, key, lock.WithTTL(1500*time.Millisecond))
	got := make(chan error, 1)
	go func() {
		l, err := c.Obtain(ctx, key)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitInLine(t, c, key, 1)
	if ok, err := c.ForceRelease(ctx, key); err != nil || !ok {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	select {
	case <-lost.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the deleted hold is not reported lost")
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("next in line: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the next in line did not obtain the lock after the hold was lost")
	}
	if err := lost.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release of the lost lease: %v, want ErrNotHeld", err)
	}
}

// TestLocalLineCancelReentryTryClose: a waiter in line whose ctx ends
// leaves it (the line keeps working); the holder re-enters without waiting
// behind its own line; TryObtain does not wait in line; Close ends a wait
// in line with ErrClosed.
func TestLocalLineCancelReentryTryClose(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	c := newClient(t, nil)
	owner := lock.WithOwner(ctx, lock.NewOwner())
	l := mustObtain(t, owner, c, key)

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Obtain(short, key); !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Obtain with a short ctx: %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	inner := mustObtain(t, owner, c, key) // re-entry: not behind the line
	if inner.Token() != l.Token() {
		t.Fatalf("re-entry token %d, want %d", inner.Token(), l.Token())
	}
	if _, err := c.TryObtain(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryObtain of a held key: %v, want ErrNotObtained", err)
	}

	next := make(chan error, 1)
	go func() {
		l, err := c.Obtain(ctx, key)
		if err == nil {
			err = l.Release(ctx)
		}
		next <- err
	}()
	waitInLine(t, c, key, 1)
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-next:
		t.Fatalf("obtained while the outer level is held: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-next; err != nil {
		t.Fatalf("next in line after the release: %v", err)
	}

	// Close while in line.
	l = mustObtain(t, ctx, c, key)
	closed := make(chan error, 1)
	go func() {
		_, err := c.Obtain(ctx, key)
		closed <- err
	}()
	waitInLine(t, c, key, 1)
	c.Close()
	if err := <-closed; !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Obtain in line at Close: %v, want ErrClosed", err)
	}
	_ = l.Release(ctx)
}
