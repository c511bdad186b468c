package workerid_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
)

// leaser is what RedisLeaser and ZKLeaser have in common.
type leaser interface {
	Lease(ctx context.Context, service string) (*workerid.Lease, error)
}

// conn is a leaser on a connection of its own, as another process has.
type conn struct {
	leaser
	// delay holds every byte between this connection and the server for d.
	delay func(d time.Duration)
	// lose makes the server drop a lease taken through this connection
	// (Redis: its key is deleted; ZooKeeper: its session expires).
	lose func(t *testing.T, l *workerid.Lease)
}

// backend is a server kind; start gives a subtest its own server (for
// ZooKeeper: a root of its own on the package's server) and returns a
// function that opens conns to it.
type backend struct {
	name  string
	start func(t *testing.T) func(opts ...workerid.Option) conn
}

// backends returns a Redis and a ZooKeeper backend: the behaviour of a Lease
// lives in lease.go and must be the same over both.
func backends() []backend {
	return []backend{
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
					leaser: l,
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
			return func(opts ...workerid.Option) conn {
				t.Helper()
				l, c := zkLeaser(t, opts...)
				return conn{
					leaser: l,
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
	}
}

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
