package workerid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
)

// conn is a leaser on a connection of its own, as another process has.
type conn struct {
	workerid.Leaser
	// delay holds every byte between this connection and the server for d.
	delay func(d time.Duration)
	// lose makes the server drop a lease taken through this connection
	// (Redis: its key is deleted; ZooKeeper: its session expires; SQL: its
	// row expires).
	lose func(t *testing.T, l *workerid.Lease)
}

// backend is a server kind; start gives a subtest its own server (for
// ZooKeeper: a root of its own on the package's server) and returns a
// function that opens conns to it.
type backend struct {
	name  string
	start func(t *testing.T) func(opts ...workerid.Option) conn
}

// backends returns a Redis, a ZooKeeper, a MariaDB and a PostgreSQL
// backend: the behaviour of a Lease lives in lease.go and must be the same
// over all.
func backends() []backend {
	return append([]backend{
		{"redis", func(t *testing.T) func(opts ...workerid.Option) conn {
			r := testserver.StartRedis(t)
			return func(opts ...workerid.Option) conn {
				t.Helper()
				p := testserver.StartProxy(t, r.Addr())
				rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
				t.Cleanup(func() { rdb.Close() })
				l, err := workerid.NewRedis(rdb, opts...)
				if err != nil {
					t.Fatal(err)
				}
				return conn{
					Leaser: l,
					delay:  p.SetLatency,
					lose: func(t *testing.T, l *workerid.Lease) {
						t.Helper()
						key := fmt.Sprintf("coordkit:worker:{%s}:%d", l.Service(), l.ID())
						if err := r.Client(t).Del(context.Background(), key).Err(); err != nil {
							t.Fatal(err)
						}
					},
				}
			}
		}},
		{"zookeeper", func(t *testing.T) func(opts ...workerid.Option) conn {
			// A root of each run's own: marks stored by an earlier run
			// (-count=N) must not move this one's generators.
			root := fmt.Sprintf("/test/%s_%d", strings.ReplaceAll(t.Name(), "/", "_"), zkRun.Add(1))
			return func(opts ...workerid.Option) conn {
				t.Helper()
				l, c := zkLeaser(t, append(opts[:len(opts):len(opts)], workerid.WithRoot(root))...)
				return conn{
					Leaser: l,
					delay: func(d time.Duration) {
						for _, p := range c.Proxies() {
							p.SetLatency(d)
						}
					},
					lose: func(t *testing.T, _ *workerid.Lease) {
						t.Helper()
						if err := c.Expire(); err != nil {
							t.Fatal(err)
						}
					},
				}
			}
		}},
	}, sqlBackend(sqlDBs()[0]), sqlBackend(sqlDBs()[1]))
}

// zkRun numbers the ZooKeeper backends started by this test binary.
var zkRun atomic.Int64

// stepClock is a wall clock that moves on by step at every reading.
type stepClock struct {
	mu   sync.Mutex // protects t
	t    time.Time
	step time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	c.t = c.t.Add(c.step)
	return t
}

// TestLeaseOneGenerator is issue 15, item 6: a lease has one generator; a
// second NewSnowflake on the same worker ID is refused, because two
// generators issuing in the same tick return the same IDs.
func TestLeaseOneGenerator(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			lease, err := b.start(t)().Lease(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			release(t, lease)
			frozen := func() time.Time { return time.UnixMilli(1_800_000_000_000) }
			sf, err := lease.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock(frozen))
			if err != nil {
				t.Fatal(err)
			}
			sf2, err := lease.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock(frozen))
			if err == nil {
				a, _ := sf.Next()
				b, _ := sf2.Next()
				t.Fatalf("second NewSnowflake on worker %d succeeded; first IDs %d and %d", lease.ID(), a, b)
			}
			if !errors.Is(err, workerid.ErrGeneratorExists) || sf2 != nil {
				t.Fatalf("second NewSnowflake = %v, %v; want ErrGeneratorExists", sf2, err)
			}
			// The first generator is unaffected.
			if _, err := sf.Next(); err != nil {
				t.Fatal(err)
			}
			// After Release, NewSnowflake says the lease is gone.
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := lease.NewSnowflake(ctx, idgen.LayoutWorker10); !errors.Is(err, workerid.ErrReleased) {
				t.Fatalf("NewSnowflake after Release = %v, want ErrReleased", err)
			}
		})
	}
}

// TestLeaseFailedNewSnowflakeDoesNotCount: a NewSnowflake that fails (here:
// a clock behind the stored mark) leaves the lease free for another one.
func TestLeaseFailedNewSnowflakeDoesNotCount(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			lease, err := b.start(t)().Lease(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			release(t, lease)
			if err := lease.HighWater().Store(ctx, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if _, err := lease.NewSnowflake(ctx, idgen.LayoutWorker10); !errors.Is(err, idgen.ErrClockBackwards) {
				t.Fatalf("clock an hour behind the mark: %v", err)
			}
			later := func() time.Time { return time.Now().Add(2 * time.Hour) }
			if _, err := lease.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock(later)); err != nil {
				t.Fatalf("NewSnowflake after a failed one: %v", err)
			}
		})
	}
}

// issueUntilError takes IDs from sf until Next fails, and returns them with
// the error; started is closed after the first 100.
func issueUntilError(sf *idgen.Snowflake, started chan<- struct{}) <-chan issued {
	done := make(chan issued, 1)
	go func() {
		var r issued
		for {
			id, err := sf.Next()
			if err != nil {
				r.err = err
				done <- r
				return
			}
			r.ids = append(r.ids, id)
			if len(r.ids) == 100 {
				close(started)
			}
		}
	}()
	return done
}

type issued struct {
	ids []int64
	err error
}

// reissued takes IDs from sf until one is above every ID in before, and
// counts those that were in before.
func reissued(t *testing.T, sf *idgen.Snowflake, before []int64) int {
	t.Helper()
	seen := make(map[int64]bool, len(before))
	last := int64(0)
	for _, id := range before {
		seen[id] = true
		last = max(last, id)
	}
	again := 0
	for {
		id, err := sf.Next()
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			again++
		}
		if id > last {
			return again
		}
	}
}

// TestLeaseReleaseStopsGeneratorBeforeSavingMark is issue 15, item 4: Release
// must stop the generator, then save its mark, then free the ID, so that the
// ID's next holder, starting at the saved mark, issues nothing the first
// holder issued, even with a clock that runs ahead while the save is slow.
func TestLeaseReleaseStopsGeneratorBeforeSavingMark(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			open := b.start(t)
			ca := open()
			a, err := ca.Lease(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			// Every reading of A's clock is a millisecond later: each ID
			// starts a tick, and IDs issued during the save run ahead of it.
			clock := &stepClock{t: time.Now().Truncate(time.Millisecond), step: time.Millisecond}
			sf, err := a.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			started := make(chan struct{})
			done := issueUntilError(sf, started)
			<-started
			ca.delay(20 * time.Millisecond) // the save and the release take a while
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if !errors.Is(r.err, idgen.ErrLeaseLost) || !errors.Is(r.err, workerid.ErrReleased) {
				t.Fatalf("Next during Release: %v, want ErrLeaseLost and ErrReleased", r.err)
			}
			if _, err := sf.Next(); !errors.Is(err, idgen.ErrLeaseLost) || !errors.Is(err, workerid.ErrReleased) {
				t.Fatalf("Next after Release: %v, want ErrLeaseLost and ErrReleased", err)
			}

			b, err := open().Lease(ctx, "svc")
			if err != nil || b.ID() != a.ID() {
				t.Fatalf("re-lease: %v, %v", b, err)
			}
			release(t, b)
			mark, err := b.HighWater().Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sfB, err := b.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock((&stepClock{t: mark, step: time.Millisecond}).Now))
			if err != nil {
				t.Fatal(err)
			}
			if n := reissued(t, sfB, r.ids); n > 0 {
				last := idgen.LayoutWorker10.Decompose(r.ids[len(r.ids)-1]).Time
				t.Fatalf("%d IDs issued by both holders of worker %d: the first issued %d, the last at %v, above the saved mark %v",
					n, a.ID(), len(r.ids), last, mark)
			}
		})
	}
}

// TestLeaseLossWritesFinalMark is issue 15, item 4: after a loss the lease
// stops its generator and stores its final mark (Store only raises a mark,
// so this cannot lower a successor's), so that a successor whose clock is
// behind the lost holder's last ID, within its borrow, starts above it.
func TestLeaseLossWritesFinalMark(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			open := b.start(t)
			// No periodic checkpoint; Redis renews every 300 ms (ZooKeeper
			// ignores the TTL).
			opts := []workerid.Option{workerid.WithCheckpoint(time.Hour), workerid.WithTTL(900 * time.Millisecond)}
			ca := open(opts...)
			a, err := ca.Lease(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			release(t, a)
			t1 := time.Now().Truncate(time.Millisecond)
			sf, err := a.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock((&stepClock{t: t1, step: time.Millisecond}).Now))
			if err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for range 100 { // at t1 .. t1+99ms
				id, err := sf.Next()
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			ca.lose(t, a)
			waitLost(t, a, 10*time.Second)
			if _, err := sf.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
				t.Fatalf("Next after the loss: %v", err)
			}
			want := sf.HighWater()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				mark, err := a.HighWater().Load(ctx)
				if err == nil && !mark.Before(want) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no final mark after the loss: stored %v (%v), the generator's is %v", mark, err, want)
				}
			}

			b, err := open(opts...).Lease(ctx, "svc")
			if err != nil || b.ID() != a.ID() {
				t.Fatalf("re-lease: %v, %v", b, err)
			}
			release(t, b)
			// The successor's clock reads t1: behind the lost holder's last
			// ID by 99 ms, within its borrow.
			sfB, err := b.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock((&stepClock{t: t1, step: time.Millisecond}).Now), idgen.WithBorrow(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if n := reissued(t, sfB, ids); n > 0 {
				t.Fatalf("the successor reissued %d of the lost holder's %d IDs", n, len(ids))
			}
		})
	}
}
