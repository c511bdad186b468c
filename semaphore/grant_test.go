package semaphore_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/semaphore"
)

// semKeys returns the keys of a semaphore of the default prefix, in
// acquire.lua's order: holders, fence, limit, queue, deadlines, tokens.
func semKeys(name string) []string {
	h := semaphore.DefaultPrefix + "{" + name + "}"
	return []string{h, h + ":fence", h + ":limit", h + ":q", h + ":qt", h + ":tok"}
}

// queueDead queues a waiter as a client's Acquire does, for a process that
// then vanishes: it never calls again, never reads its messages, never
// leaves. Its grant TTL is grant, its waiter timeout 20 s (so that only
// the grant's expiry can give its permit back).
func queueDead(t *testing.T, ctx context.Context, rdb redis.Scripter, name, id string, grant time.Duration) {
	t.Helper()
	res, err := semaphore.Scripts()["acquire.lua"].Eval().Run(ctx, rdb, semKeys(name), id, 30_000, 1, "1", 20_000,
		grant.Milliseconds()).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != 0 || res[2] != 1 {
		t.Fatalf("the dead waiter's acquisition answered %v, want queued", res)
	}
}

// TestGrantedDeadWaiterPermitReturns: a release hands its permit to the
// first waiter at once; a waiter that vanished after queueing never takes
// it, and the permit comes back when the grant expires (not after the
// permit TTL), to the next waiter.
func TestGrantedDeadWaiterPermitReturns(t *testing.T) {
	ctx := ctxFor(t, 20*time.Second)
	name := newName(t)
	holder := newClient(t, shared.Addr())
	p, err := holder.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	rdb := shared.Client(t)
	// 1.5 s: the grant must outlast the checks below; 400 ms left a
	// starved host (load 23 on 2 cores) too little room.
	const grant = 1500 * time.Millisecond
	queueDead(t, ctx, rdb, name, "deadclient:1", grant)
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The release granted the permit to the dead waiter: held, not free.
	if _, err := rdb.ZScore(ctx, semKeys(name)[0], "deadclient:1").Result(); err != nil {
		t.Fatalf("the first waiter's permit after the release: %v, want granted", err)
	}
	if q, _ := rdb.LLen(ctx, semKeys(name)[3]).Result(); q != 0 {
		t.Fatalf("%d waiters queued after the grant, want 0", q)
	}
	other := newClient(t, shared.Addr())
	if _, err := other.TryAcquire(ctx, name); !errors.Is(err, semaphore.ErrNoPermit) {
		t.Fatalf("TryAcquire while the permit is granted: %v, want ErrNoPermit", err)
	}
	start := time.Now()
	q, err := other.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	t.Logf("the dead waiter's permit came back after %v", d.Round(time.Millisecond))
	if d > grant+2*time.Second { // far below the permit's TTL (30 s)
		t.Fatalf("the granted permit came back after %v, want about its grant TTL %v", d, grant)
	}
	if _, h, _ := other.Usage(ctx, name); h != 1 {
		t.Fatalf("%d permits held, want 1", h)
	}
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLeaveGivesGrantBack: a waiter that leaves (its ctx ended) after a
// release granted it the permit, before it took it, gives the permit back
// at once, to the next waiter.
func TestLeaveGivesGrantBack(t *testing.T) {
	ctx := ctxFor(t, 20*time.Second)
	name := newName(t)
	holder := newClient(t, shared.Addr())
	p, err := holder.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	rdb := shared.Client(t)
	queueDead(t, ctx, rdb, name, "goneclient:1", 10*time.Second)
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	k := semKeys(name)
	err = semaphore.Scripts()["leave.lua"].Eval().Run(ctx, rdb, []string{k[0], k[2], k[3], k[4], k[5], k[1]},
		"goneclient:1", 1, semaphore.DefaultPrefix+"wake:", "goneclient:1|10000").Err()
	if err != nil {
		t.Fatal(err)
	}
	q, err := newClient(t, shared.Addr()).TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire after the granted waiter left: %v, want the permit back", err)
	}
	q.Release(ctx)
}

// TestGrantOutlivesLostMessage: a waiter whose grant message is lost (its
// Pub/Sub connection killed just before the release, and its client's
// dials refused until it has the permit, so that go-redis cannot subscribe
// again before the message is sent; its call-in goes over the connection
// its pool keeps) calls in within half
// of the grant's TTL and takes the permit: it keeps its turn. Before, it
// called in after a third of its waiter timeout (10 s here) against a
// 3 s grant: the grant expired untaken, the waiter queued behind it took
// the permit, and the first one queued again at the end. (The grant was
// 600 ms against a 6 s waiter timeout: a call-in due within 300 ms, which
// a loaded host's stall can miss; 3 s against 30 s keeps the ratio.)
func TestGrantOutlivesLostMessage(t *testing.T) {
	ctx := ctxFor(t, 60*time.Second)
	name := newName(t)
	holder := newClient(t, shared.Addr())
	p, err := holder.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var refuse atomic.Bool
	rdbFirst := redis.NewClient(&redis.Options{Addr: shared.Addr(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if refuse.Load() {
				return nil, errors.New("test: dials refused while the grant message is sent")
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	first := semaphore.New(rdbFirst, semaphore.WithWaiterTimeout(30*time.Second))
	t.Cleanup(func() { refuse.Store(false); first.Close(); rdbFirst.Close() })
	second := newClient(t, shared.Addr())
	order := make(chan string, 2)
	errs := make(chan error, 2)
	acquire := func(c *semaphore.Client, who string, opts ...lock.Option) {
		q, err := c.Acquire(ctx, name, opts...)
		if err != nil {
			errs <- err
			return
		}
		order <- who
		if who == "first" {
			refuse.Store(false)
		}
		time.Sleep(20 * time.Millisecond)
		errs <- q.Release(ctx)
	}
	go acquire(first, "first", lock.WithTTL(3*time.Second))
	waitQueued(t, name, 1)
	go acquire(second, "second")
	waitQueued(t, name, 2)
	rdb := shared.Client(t)
	// Every Pub/Sub connection: go-redis subscribes again, and a message
	// published meanwhile is lost; the first waiter's cannot until it has
	// its permit.
	refuse.Store(true)
	if err := rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := <-order; got != "first" {
		t.Fatalf("the waiter queued second took the permit first: the first one's grant expired before it called in")
	}
}
