package main

import (
	"context"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordkit/coordkit/idgen/redisid"
	"github.com/redis/go-redis/v9"
)

// The redisid suite: IDs per second from 1 and 32 goroutines for the segment
// allocator (memory), INCR per ID, the step-hash Lua per ID and the TIME Lua
// per ID, all on the same Redis, against the floor of one PING round trip per
// ID; then the latency of the segment allocator's Next across segment
// switches.
func init() {
	register(Suite{Name: "redisid", Run: runRedisID})
}

func runRedisID(env *Env) error {
	srv, err := env.Redis()
	if err != nil {
		return err
	}
	ctx := context.Background()
	opts := srv.Options()
	opts.PoolSize = 64
	rdb := redis.NewUniversalClient(opts)
	defer rdb.Close()
	prefix := fmt.Sprintf("bench:redisid:%d:", time.Now().UnixNano())
	if err := redisid.LoadScripts(ctx, rdb); err != nil {
		return err
	}

	segs, err := redisid.NewSegments(rdb, redisid.WithPrefix(prefix+"seg:"))
	if err != nil {
		return err
	}
	defer segs.Close()
	seg, _ := segs.For("order")
	counter, _ := redisid.NewCounter(rdb, prefix+"incr")
	if _, err := redisid.CreateHash(ctx, rdb, prefix+"hash", 1, 1); err != nil {
		return err
	}
	hash, _ := redisid.NewHash(rdb, prefix+"hash")
	tc, err := redisid.NewTime(redisid.Nodes(rdb), redisid.WithTimeKeyPrefix(prefix+"time:"))
	if err != nil {
		return err
	}
	var shard atomic.Int64 // spread TIME calls over shards, as user IDs would
	timeNext := func(ctx context.Context) (int64, error) {
		return tc.Next(ctx, "order", shard.Add(1)&redisid.MaxShard)
	}
	ping := func(ctx context.Context) (int64, error) { return 0, rdb.Ping(ctx).Err() }

	// Warm the segment allocator up to its steady-state step.
	if _, err := rate(ctx, 32, env.Dur/2, seg.Next); err != nil {
		return err
	}

	type gen struct {
		name string
		next func(context.Context) (int64, error)
	}
	gens := []gen{
		{"(a) coordkit segments (memory)", seg.Next},
		{"(b) INCR per ID", counter.Next},
		{"(c) step-hash Lua per ID", hash.Next},
		{"(d) TIME Lua per ID", timeNext},
		{"floor: PING round trip per ID", ping},
	}
	workers := []int{1, 32}
	res := make([][]float64, len(gens)) // median IDs/s per gen and worker count
	for i, g := range gens {
		res[i] = make([]float64, len(workers))
		for j, w := range workers {
			var xs []float64
			for range env.Rounds {
				r, err := rate(ctx, w, env.Dur, g.next)
				if err != nil {
					return fmt.Errorf("%s: %w", g.name, err)
				}
				xs = append(xs, r)
			}
			res[i][j] = Median(xs)
		}
	}
	const incr, floor = 1, 4
	t := Table{
		Title: fmt.Sprintf("IDs/s, median of %d rounds of %v, one redis-server on loopback, GOMAXPROCS=%d",
			env.Rounds, env.Dur, runtime.GOMAXPROCS(0)),
		Cols: []string{"generator", "1 goroutine", "32 goroutines", "vs INCR (32)", "vs PING floor (32)"},
	}
	for i, g := range gens {
		t.Row(g.name, res[i][0], res[i][1], Ratio(res[i][1], res[incr][1]), Ratio(res[i][1], res[floor][1]))
	}
	t.Print(env.Out)

	// Latency of Next across segment switches. Default bounds (steady state:
	// the step has grown to fit the draw rate) and a fixed small step (a
	// switch every few milliseconds); 1 goroutine (a CPU left for the
	// prefetch) and 32 (every CPU busy calling Next, so a call's wall time
	// includes the time its goroutine sat preempted in the run queue).
	rtt, err := pingLatency(ctx, rdb, 2000)
	if err != nil {
		return err
	}
	lt := Table{
		Title: fmt.Sprintf("Segment Next latency across segment switches, %d rounds of %v (medians over rounds; "+
			"time.Now around every call included). One PING round trip: p50 %v (1 goroutine)", env.Rounds, env.Dur, rtt),
		Cols: []string{"allocator", "goroutines", "IDs/s (timed)", "segment switches/s", "Next calls that waited for Redis", "p50", "p99", "p99.99", "max"},
	}
	for i, c := range []struct {
		name string
		opts []redisid.Option
	}{
		{"default bounds [1000, 10M]", nil},
		{"fixed step 100,000", []redisid.Option{redisid.WithStep(100_000), redisid.WithStepBounds(100_000, 100_000)}},
	} {
		for _, w := range workers {
			s, err := redisid.NewSegments(rdb, append(c.opts, redisid.WithPrefix(prefix+"lat:"))...)
			if err != nil {
				return err
			}
			g, _ := s.For(fmt.Sprint("lat", i, "-", w))
			if _, err := rate(ctx, w, env.Dur/2, g.Next); err != nil { // warm-up
				s.Close()
				return err
			}
			var rates, sw, p50s, p99s, p9999s, maxs []float64
			var waited int64
			for range env.Rounds {
				st0 := g.Stats()
				h, n, d, err := latency(ctx, w, env.Dur, g.Next)
				if err != nil {
					s.Close()
					return err
				}
				st1 := g.Stats()
				rates = append(rates, float64(n)/d.Seconds())
				sw = append(sw, float64(st1.Fetches-st0.Fetches)/d.Seconds())
				waited += st1.Waits - st0.Waits
				p50s = append(p50s, float64(h.quantile(0.50)))
				p99s = append(p99s, float64(h.quantile(0.99)))
				p9999s = append(p9999s, float64(h.quantile(0.9999)))
				maxs = append(maxs, float64(h.max))
			}
			s.Close()
			lt.Row(c.name, w, Median(rates), Median(sw), waited,
				time.Duration(Median(p50s)), time.Duration(Median(p99s)),
				time.Duration(Median(p9999s)), time.Duration(Median(maxs)).Round(time.Microsecond))
		}
	}
	lt.Print(env.Out)
	return nil
}

// rate runs next from w goroutines for d and returns calls per second.
func rate(ctx context.Context, w int, d time.Duration, next func(context.Context) (int64, error)) (float64, error) {
	var (
		stop  atomic.Bool
		total atomic.Int64
		first atomic.Value
		wg    sync.WaitGroup
	)
	start := time.Now()
	for range w {
		wg.Go(func() {
			var n int64
			for !stop.Load() {
				if _, err := next(ctx); err != nil {
					first.CompareAndSwap(nil, err)
					break
				}
				n++
			}
			total.Add(n)
		})
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	el := time.Since(start)
	if err, _ := first.Load().(error); err != nil {
		return 0, err
	}
	return float64(total.Load()) / el.Seconds(), nil
}

// hist is a log-linear latency histogram: 16 buckets per power of two.
type hist struct {
	counts [64 * 16]int64
	n      int64
	max    time.Duration
}

func (h *hist) add(d time.Duration) {
	v := uint64(max(d, 0))
	b := bits.Len64(v)
	var i int
	if b <= 4 {
		i = int(v)
	} else {
		i = (b-4)*16 + int(v>>(b-5)&15)
	}
	h.counts[i]++
	h.n++
	h.max = max(h.max, d)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns an upper bound of the q-quantile (bucket's upper edge).
func (h *hist) quantile(q float64) time.Duration {
	want := int64(q * float64(h.n))
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen > want {
			if i < 16 {
				return time.Duration(i)
			}
			b := i/16 + 4
			sub := uint64(i % 16)
			lo := uint64(1)<<(b-1) | sub<<(b-5)
			return time.Duration(lo + 1<<(b-5) - 1)
		}
	}
	return h.max
}

// latency times every next call from w goroutines for d.
func latency(ctx context.Context, w int, d time.Duration, next func(context.Context) (int64, error)) (*hist, int64, time.Duration, error) {
	var (
		stop  atomic.Bool
		mu    sync.Mutex
		all   hist
		first atomic.Value
		wg    sync.WaitGroup
	)
	start := time.Now()
	for range w {
		wg.Go(func() {
			h := new(hist)
			for !stop.Load() {
				t0 := time.Now()
				_, err := next(ctx)
				h.add(time.Since(t0))
				if err != nil {
					first.CompareAndSwap(nil, err)
					break
				}
			}
			mu.Lock()
			all.merge(h)
			mu.Unlock()
		})
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	el := time.Since(start)
	if err, _ := first.Load().(error); err != nil {
		return nil, 0, 0, err
	}
	return &all, all.n, el, nil
}

// pingLatency returns the median PING round trip over n pings.
func pingLatency(ctx context.Context, rdb redis.UniversalClient, n int) (time.Duration, error) {
	var h hist
	for range n {
		t0 := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return 0, err
		}
		h.add(time.Since(t0))
	}
	return h.quantile(0.5), nil
}
