package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/semaphore"
)

var shared *testserver.Redis

type serverRun struct{ m *testing.M }

func (r serverRun) Run() int {
	var err error
	if shared, err = testserver.NewRedis(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.Close()
	os.Setenv("REDIS_ADDR", shared.Addr())
	defer func() {
		if zkSrv != nil {
			zkSrv.Close()
		}
	}()
	return r.m.Run()
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(serverRun{m},
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

var nameSeq atomic.Int64

func newName(t *testing.T) string { return fmt.Sprintf("%s-%d", t.Name(), nameSeq.Add(1)) }

// newClient returns a semaphore client with a Redis client of its own, as
// another process has; both closed when the test ends.
func newClient(t *testing.T, addr string, opts ...semaphore.Option) *semaphore.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c := semaphore.New(rdb, opts...)
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); rdb.Close() })
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// contend runs perClient goroutines on each acquirer (each a client of its
// own, as a process has) until d has passed, each acquiring, holding for
// hold and releasing; it fails t on a token issued twice or a goroutine
// that never got a permit, and returns the acquisitions and the most
// permits held at once.
func contend(t *testing.T, acquirers []func(context.Context) (lock.Lease, error), perClient int, hold, d time.Duration) (total, maxHeld int64) {
	t.Helper()
	ctx := ctxFor(t, d+30*time.Second)
	var held, most, n atomic.Int64
	var mu sync.Mutex
	tokens := map[int64]bool{}
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for _, acquire := range acquirers {
		for range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := 0
				for time.Now().Before(deadline) {
					p, err := acquire(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					h := held.Add(1)
					for m := most.Load(); h > m && !most.CompareAndSwap(m, h); m = most.Load() {
					}
					mu.Lock()
					if tokens[p.Token()] {
						t.Errorf("token %d issued twice", p.Token())
					}
					tokens[p.Token()] = true
					mu.Unlock()
					time.Sleep(hold)
					held.Add(-1)
					if err := p.Release(ctx); err != nil {
						t.Error(err)
						return
					}
					mine++
					n.Add(1)
				}
				if mine == 0 {
					t.Error("a goroutine never got a permit")
				}
			}()
		}
	}
	wg.Wait()
	return n.Load(), most.Load()
}

// fillAll acquires one permit from each acquirer in turn, holding them all,
// and releases them: that N holders can hold at once does not depend on
// how the goroutines of contend happen to be scheduled (on a loaded host
// a 1 ms hold may never overlap another).
func fillAll(t *testing.T, acquirers []func(context.Context) (lock.Lease, error)) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	var held []lock.Lease
	for i, acquire := range acquirers {
		p, err := acquire(ctx)
		if err != nil {
			t.Fatalf("permit %d of %d with %d held: %v", i+1, len(acquirers), len(held), err)
		}
		held = append(held, p)
	}
	for _, p := range held {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNeverMoreThanN: three clients' worth of goroutines (as three
// processes) contend for N = 3 permits; at no moment do more than 3 hold
// one, every goroutine gets permits, and every token is distinct; and 3
// clients can hold a permit each at once.
func TestNeverMoreThanN(t *testing.T) {
	name := newName(t)
	var acquirers []func(context.Context) (lock.Lease, error)
	for range 3 {
		c := newClient(t, shared.Addr(), semaphore.WithPermits(3))
		acquirers = append(acquirers, func(ctx context.Context) (lock.Lease, error) { return c.Acquire(ctx, name) })
	}
	fillAll(t, acquirers)
	total, most := contend(t, acquirers, 4, time.Millisecond, 2*time.Second)
	if most > 3 {
		t.Fatalf("%d permits held at once, N = 3", most)
	}
	t.Logf("%d acquisitions in 2 s by 12 goroutines on 3 clients", total)
}

// TestTryAcquireFull: with every permit held, TryAcquire fails at once with
// ErrNoPermit (lock.ErrNotObtained); a release makes one free.
func TestTryAcquireFull(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	name := newName(t)
	c := newClient(t, shared.Addr(), semaphore.WithPermits(2))
	a, _ := c.Acquire(ctx, name)
	b, _ := c.Acquire(ctx, name)
	if _, err := c.TryAcquire(ctx, name); !errors.Is(err, semaphore.ErrNoPermit) || !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryAcquire with both permits held: %v", err)
	}
	if n, h, err := c.Usage(ctx, name); err != nil || n != 2 || h != 2 {
		t.Fatalf("Usage = %d, %d, %v; want 2, 2", n, h, err)
	}
	a.Release(ctx)
	p, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if p.Token() <= b.Token() {
		t.Fatalf("token %d not above %d", p.Token(), b.Token())
	}
	if err := a.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Release: %v", err)
	}
	p.Release(ctx)
	b.Release(ctx)
}

// TestReleaseWakesWaiter: a waiter is woken by the release that frees a
// permit, long before its own timer (a third of the waiter timeout).
func TestReleaseWakesWaiter(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	name := newName(t)
	a := newClient(t, shared.Addr(), semaphore.WithWaiterTimeout(9*time.Second))
	b := newClient(t, shared.Addr(), semaphore.WithWaiterTimeout(9*time.Second))
	p, _ := a.Acquire(ctx, name)
	got := make(chan time.Time, 1)
	go func() {
		q, err := b.Acquire(ctx, name)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		q.Release(ctx)
	}()
	waitQueued(t, name, 1)
	released := time.Now()
	p.Release(ctx)
	at := <-got
	// The waiter's own next attempt is 3 s away (a third of its waiter
	// timeout): within 2 s (1 s left a starved host, load 23 on 2 cores,
	// too little room) it can only be the release's wake-up.
	if d := at.Sub(released); d > 2*time.Second {
		t.Fatalf("waiter took the permit %v after the release: not woken", d)
	}
}

// TestCrashedHolderPermitReturns: a holder whose process stops (its client
// closed, no release) keeps its permit only until the TTL runs out.
func TestCrashedHolderPermitReturns(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	name := newName(t)
	a := newClient(t, shared.Addr())
	p, _ := a.Acquire(ctx, name, lock.WithTTL(500*time.Millisecond))
	a.Close()
	<-p.Lost()
	if !errors.Is(p.Err(), lock.ErrLockLost) || !errors.Is(p.Err(), lock.ErrClosed) {
		t.Fatalf("permit Err after Close: %v", p.Err())
	}
	start := time.Now()
	q, err := newClient(t, shared.Addr()).Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("permit came back after %v, want about its 500ms TTL", d)
	}
	q.Release(ctx)
}

// TestPausedHolderSeesLost: a holder cut off from Redis (its renewals lost)
// knows its permit is gone before anyone else gets it: its deadline (Until:
// the send time of its last answered renewal plus the TTL, which Redis
// counts from the renewal's arrival) has passed when the other Acquire
// returns, and Lost closes soon after. Lost is closed by the watchdog's
// goroutine, which a loaded host may run some milliseconds after the
// deadline (it did, 3 ms after the other Acquire, under make test-stress);
// the deadline needs no goroutine.
func TestPausedHolderSeesLost(t *testing.T) {
	ctx := ctxFor(t, 15*time.Second)
	name := newName(t)
	proxy := testserver.StartProxy(t, shared.Addr())
	a := newClient(t, proxy.Addr())
	p, err := a.Acquire(ctx, name, lock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetBlackhole(true)
	until := p.Until()
	q, err := newClient(t, shared.Addr()).Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := time.Now()
	if u := p.Until(); !u.IsZero() && got.Before(u) {
		t.Fatalf("another holder got the permit %v before the cut-off holder's deadline", u.Sub(got))
	}
	if !until.IsZero() && got.Before(until) {
		t.Fatalf("another holder got the permit %v before the deadline the cut-off holder had when it was cut off", until.Sub(got))
	}
	select {
	case <-p.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the cut-off holder's Lost did not close within 5 s of another holder getting the permit")
	}
	q.Release(ctx)
	proxy.SetBlackhole(false)
}

// TestSetPermits: raising N wakes a waiter at once; lowering it takes
// effect as permits come back.
func TestSetPermits(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	name := newName(t)
	c := newClient(t, shared.Addr(), semaphore.WithWaiterTimeout(9*time.Second))
	p1, _ := c.Acquire(ctx, name) // N = 1 by default
	got := make(chan *semaphore.Permit, 1)
	go func() {
		p, err := c.Acquire(ctx, name)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	waitQueued(t, name, 1)
	if err := c.SetPermits(ctx, name, 2); err != nil {
		t.Fatal(err)
	}
	var p2 *semaphore.Permit
	select {
	case p2 = <-got:
	case <-time.After(2 * time.Second): // the waiter's own next attempt is 3 s away
		t.Fatal("raising N did not wake the waiter")
	}
	if err := c.SetPermits(ctx, name, 1); err != nil {
		t.Fatal(err)
	}
	p1.Release(ctx)
	if _, err := c.TryAcquire(ctx, name); !errors.Is(err, semaphore.ErrNoPermit) {
		t.Fatalf("TryAcquire with 1 of N=1 held: %v", err)
	}
	p2.Release(ctx)
	p3, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	p3.Release(ctx)
}

// TestCancelledWaiterLeaves: a waiter whose ctx ends leaves the queue, so
// it does not hold up the next one.
func TestCancelledWaiterLeaves(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	name := newName(t)
	c := newClient(t, shared.Addr(), semaphore.WithWaiterTimeout(9*time.Second))
	p, _ := c.Acquire(ctx, name)
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(wctx, name); !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with a short ctx: %v", err)
	}
	rdb := shared.NewClient()
	defer rdb.Close()
	if n := rdb.LLen(ctx, semaphore.DefaultPrefix+"{"+name+"}:q").Val(); n != 0 {
		t.Fatalf("%d waiters left in the queue", n)
	}
	p.Release(ctx)
	q, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire after the waiter left: %v", err)
	}
	q.Release(ctx)
}

// TestDo: lock.Do runs a function under a permit.
func TestDo(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	c := newClient(t, shared.Addr())
	name := newName(t)
	err := lock.Do(ctx, c, name, func(ctx context.Context) error {
		if _, h, _ := c.Usage(ctx, name); h != 1 {
			t.Errorf("%d permits held inside Do", h)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBadInput(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	rdb := shared.NewClient()
	defer rdb.Close()
	for name, c := range map[string]*semaphore.Client{
		"nil client":   semaphore.New(nil),
		"empty prefix": semaphore.New(rdb, semaphore.WithPrefix("")),
		"brace":        semaphore.New(rdb, semaphore.WithPrefix("a{")),
		"no permits":   semaphore.New(rdb, semaphore.WithPermits(0)),
		"short TTL":    semaphore.New(rdb, semaphore.WithDefaultTTL(time.Millisecond)),
	} {
		if !errors.Is(c.Err(), lock.ErrInvalid) {
			t.Errorf("%s: Err() = %v", name, c.Err())
		}
		if _, err := c.TryAcquire(ctx, "x"); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("%s: TryAcquire = %v", name, err)
		}
		c.Close()
	}
	c := newClient(t, shared.Addr())
	for _, name := range []string{"", "}x"} {
		if _, err := c.TryAcquire(ctx, name); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("name %q: %v", name, err)
		}
	}
	if _, err := c.TryAcquire(ctx, "x", lock.WithTTL(-time.Second)); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("negative TTL: %v", err)
	}
	if err := c.SetPermits(ctx, "x", -1); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("SetPermits(-1): %v", err)
	}
}

// waitQueued waits until name's queue holds n waiters.
func waitQueued(t *testing.T, name string, n int64) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr()})
	defer rdb.Close()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if q, err := rdb.LLen(context.Background(), semKeys(name)[3]).Result(); err != nil {
			t.Fatal(err)
		} else if q == n {
			return
		}
	}
	t.Fatalf("%d waiters not queued for %q", n, name)
}
