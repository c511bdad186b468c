package main

// The lock suite: coordkit's Redis lock against go-redsync/redsync/v4 and
// bsm/redislock on one Redis server.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

func init() { register(Suite{Name: "lock", Run: runLockSuite}) }

// lkUnlock releases what a lkLocker obtained.
type lkUnlock func(ctx context.Context) error

// lkLocker is one library in one configuration, built on one go-redis client.
type lkLocker interface {
	lock(ctx context.Context, key string) (lkUnlock, error)
	close()
}

// lkLib builds a lkLocker on a go-redis client.
type lkLib struct {
	name string
	new  func(rdb redis.UniversalClient) lkLocker
}

type lkCoordkit struct{ c *lock.Client }

func (l lkCoordkit) lock(ctx context.Context, key string) (lkUnlock, error) {
	lease, err := l.c.Obtain(ctx, key)
	if err != nil {
		return nil, err
	}
	return lease.Release, nil
}
func (l lkCoordkit) close() { l.c.Close() }

type lkRedsync struct {
	rs   *redsync.Redsync
	opts []redsync.Option
}

func (l lkRedsync) lock(ctx context.Context, key string) (lkUnlock, error) {
	m := l.rs.NewMutex(key, l.opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
}
func (lkRedsync) close() {}

type lkRedislock struct {
	c     *redislock.Client
	retry func() redislock.RetryStrategy
}

func (l lkRedislock) lock(ctx context.Context, key string) (lkUnlock, error) {
	var opt *redislock.Options
	if l.retry != nil {
		opt = &redislock.Options{RetryStrategy: l.retry()}
	}
	lk, err := l.c.Obtain(ctx, key, 10*time.Second, opt)
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}
func (lkRedislock) close() {}

func coordkitLib(name string, opts ...lock.ClientOption) lkLib {
	return lkLib{name, func(rdb redis.UniversalClient) lkLocker { return lkCoordkit{lock.New(rdb, opts...)} }}
}

func redsyncLib(name string, opts ...redsync.Option) lkLib {
	return lkLib{name, func(rdb redis.UniversalClient) lkLocker {
		return lkRedsync{redsync.New(goredis.NewPool(rdb)), opts}
	}}
}

func redislockLib(name string, retry func() redislock.RetryStrategy) lkLib {
	return lkLib{name, func(rdb redis.UniversalClient) lkLocker { return lkRedislock{redislock.New(rdb), retry} }}
}

var (
	lkCoordkit0   = coordkitLib("coordkit")
	lkCoordkitF   = coordkitLib("coordkit fair", lock.WithFair())
	lkRedsyncDef  = redsyncLib("redsync (default: 32 tries, 50–250 ms)")
	lkRedsyncBest = redsyncLib("redsync (tries ∞, 1 ms)", redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(time.Millisecond))
	lkRedislock1  = redislockLib("redislock (LinearBackoff 1 ms)", func() redislock.RetryStrategy { return redislock.LinearBackoff(time.Millisecond) })
	lkRedislock10 = redislockLib("redislock (LinearBackoff 10 ms)", func() redislock.RetryStrategy { return redislock.LinearBackoff(10 * time.Millisecond) })
	lkRedislock0  = redislockLib("redislock (default: no retry)", nil)
)

// lkCounter counts the commands a go-redis client sends (pipelined ones
// one by one).
type lkCounter struct{ n atomic.Int64 }

func (c *lkCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *lkCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *lkCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// lkClients returns n go-redis clients counting into one counter.
func lkClients(srv *testserver.Redis, n int) ([]redis.UniversalClient, *lkCounter) {
	cnt := &lkCounter{}
	rdbs := make([]redis.UniversalClient, n)
	for i := range rdbs {
		rdbs[i] = srv.NewClient()
		rdbs[i].AddHook(cnt)
	}
	return rdbs, cnt
}

func lkCloseAll(rdbs []redis.UniversalClient) {
	for _, r := range rdbs {
		r.Close()
	}
}

var lkKeySeq atomic.Int64

func lkKey(prefix string) string {
	return prefix + ":" + strconv.FormatInt(lkKeySeq.Add(1), 10)
}

// commandstats returns the total calls per command from INFO commandstats.
func commandstats(ctx context.Context, rdb redis.UniversalClient) (map[string]int64, error) {
	m, _, err := commandstatsUsec(ctx, rdb)
	return m, err
}

// scriptCommands are the commands that run a Lua script (or function):
// their calls are the scripts a library sends, their usec the time Redis
// spent in them (the commands the scripts run included).
var scriptCommands = []string{"eval", "evalsha", "fcall"}

// commandstatsUsec returns the total calls and µs per command from INFO
// commandstats.
func commandstatsUsec(ctx context.Context, rdb redis.UniversalClient) (calls, usec map[string]int64, err error) {
	s, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, nil, err
	}
	calls, usec = map[string]int64{}, map[string]int64{}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		fields := strings.Split(rest, ",")
		name = strings.TrimPrefix(name, "cmdstat_")
		calls[name], _ = strconv.ParseInt(fields[0], 10, 64)
		for _, f := range fields[1:] {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				usec[name], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return calls, usec, nil
}

func statsDelta(before, after map[string]int64) int64 {
	var n int64
	for k, v := range after {
		n += v - before[k]
	}
	return n
}

func runLockSuite(env *Env) error {
	srv, err := env.Redis()
	if err != nil {
		return err
	}
	if err := lkUncontended(env, srv); err != nil {
		return err
	}
	if err := lkHotKey(env, srv); err != nil {
		return err
	}
	return lkAllocs(env, srv)
}

// lkUncontended is (a): 32 goroutines each lock and release its own key.
func lkUncontended(env *Env, srv *testserver.Redis) error {
	const g = 32
	libs := []lkLib{lkCoordkit0, lkRedsyncDef, lkRedislock0}
	res := make([][]float64, len(libs))
	var floor []float64
	for range env.Rounds {
		// The floor: PING round trips from 32 goroutines, as pairs (two each).
		rdb := srv.NewClient()
		n, err := lkParallel(env.Dur, g, func(ctx context.Context, i int) error { return rdb.Ping(ctx).Err() })
		rdb.Close()
		if err != nil {
			return err
		}
		floor = append(floor, n/env.Dur.Seconds()/2)
		for li, lib := range libs {
			rdb := srv.NewClient()
			l := lib.new(rdb)
			keys := make([]string, g)
			for i := range keys {
				keys[i] = lkKey("bench:a:" + lib.name[:4])
			}
			n, err := lkParallel(env.Dur, g, func(ctx context.Context, i int) error {
				unlock, err := l.lock(ctx, keys[i])
				if err != nil {
					return err
				}
				return unlock(ctx)
			})
			l.close()
			rdb.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", lib.name, err)
			}
			res[li] = append(res[li], n/env.Dur.Seconds())
		}
	}
	fl := Median(floor)
	base := Median(res[2])
	t := Table{
		Title: fmt.Sprintf("(a) uncontended: %d goroutines, each lock+release of its own key (median of %d rounds of %v)", g, env.Rounds, env.Dur),
		Cols:  []string{"library", "pairs/s", "vs redislock", "vs floor"},
	}
	t.Row("floor: PING round trips / 2", fl, Ratio(fl, base), "1.00×")
	for li, lib := range libs {
		m := Median(res[li])
		t.Row(lib.name, m, Ratio(m, base), Ratio(m, fl))
	}
	t.Print(env.Out)
	return nil
}

// lkParallel runs fn in g goroutines for d and returns how many calls
// completed.
func lkParallel(d time.Duration, g int, fn func(ctx context.Context, i int) error) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	stop := time.Now().Add(d)
	var n atomic.Int64
	errs := make(chan error, g)
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := fn(ctx, i); err != nil {
					errs <- err
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return float64(n.Load()), <-errs
}

type lkHotResult struct {
	perSec, p50, p99, max, spread, cmds, calls, failed float64
}

// lkHotKey is (b) and (c): 16 goroutines compete for one key.
func lkHotKey(env *Env, srv *testserver.Redis) error {
	const g = 16
	type variant struct {
		lib     lkLib
		clients int // 1: one shared client; g: one per goroutine
	}
	vs := []variant{
		{lkCoordkit0, 1}, {lkCoordkitF, 1}, {lkCoordkit0, g}, {lkCoordkitF, g},
		{lkRedsyncDef, 1}, {lkRedsyncBest, 1}, {lkRedislock1, 1}, {lkRedislock10, 1},
		{lkRedislock1, g},
	}
	results := make([][]lkHotResult, len(vs))
	for range env.Rounds {
		for vi, v := range vs {
			r, err := lkHotRound(env, srv, v.lib, g, v.clients)
			if err != nil {
				return fmt.Errorf("%s: %w", v.lib.name, err)
			}
			results[vi] = append(results[vi], r)
		}
	}
	med := func(rs []lkHotResult, f func(lkHotResult) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return Median(xs)
	}
	best := 0.0
	for vi, v := range vs {
		if !strings.HasPrefix(v.lib.name, "coordkit") {
			best = max(best, med(results[vi], func(r lkHotResult) float64 { return r.perSec }))
		}
	}
	t := Table{
		Title: fmt.Sprintf("(b) hot key: %d goroutines on one key, in-process read-modify-write checked for overlap; (c) Redis commands per section (median of %d rounds of %v)", g, env.Rounds, env.Dur),
		Cols: []string{"library", "clients", "sections/s", "vs best peer", "wait p50 ms", "p99 ms", "max ms",
			"share spread", "cmds sent/section", "calls incl. scripts/section", "failed obtains"},
	}
	for vi, v := range vs {
		rs := results[vi]
		ps := med(rs, func(r lkHotResult) float64 { return r.perSec })
		t.Row(v.lib.name, v.clients, ps, Ratio(ps, best),
			med(rs, func(r lkHotResult) float64 { return r.p50 }),
			med(rs, func(r lkHotResult) float64 { return r.p99 }),
			med(rs, func(r lkHotResult) float64 { return r.max }),
			fmt.Sprintf("%.1f %%", 100*med(rs, func(r lkHotResult) float64 { return r.spread })),
			med(rs, func(r lkHotResult) float64 { return r.cmds }),
			med(rs, func(r lkHotResult) float64 { return r.calls }),
			med(rs, func(r lkHotResult) float64 { return r.failed }))
	}
	t.Print(env.Out)
	fmt.Fprintln(env.Out, "wait: from the lock call to holding the lock; share spread: (max − min) / mean of the sections per goroutine; cmds sent: commands the go-redis clients sent (a hook), i.e. round trips; calls incl. scripts: INFO commandstats, which also counts the commands each Lua script runs; failed obtains: lock calls that gave up (and were called again).")
	fmt.Fprintln(env.Out)
	return nil
}

func lkHotRound(env *Env, srv *testserver.Redis, lib lkLib, g, clients int) (lkHotResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), env.Dur+60*time.Second)
	defer cancel()
	rdbs, cnt := lkClients(srv, clients)
	defer lkCloseAll(rdbs)
	lockers := make([]lkLocker, clients)
	for i, rdb := range rdbs {
		lockers[i] = lib.new(rdb)
	}
	defer func() {
		for _, l := range lockers {
			l.close()
		}
	}()
	key := lkKey("bench:b")
	admin := srv.NewClient()
	defer admin.Close()
	// Warm up: load the scripts, open the connections.
	for _, l := range lockers {
		unlock, err := l.lock(ctx, key)
		if err != nil {
			return lkHotResult{}, err
		}
		if err := unlock(ctx); err != nil {
			return lkHotResult{}, err
		}
	}
	before, err := commandstats(ctx, admin)
	if err != nil {
		return lkHotResult{}, err
	}
	sent0 := cnt.n.Load()

	r, err := runHot(ctx, env.Dur, g, key, func(i int) hotLock {
		l := lockers[i%clients]
		return func(ctx context.Context, key string) (func(context.Context) error, error) {
			unlock, err := l.lock(ctx, key)
			return unlock, err
		}
	}, func(err error) bool {
		return errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, redsync.ErrFailed) ||
			errors.As(err, new(*redsync.ErrTaken)) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
	})
	if err != nil {
		return lkHotResult{}, err
	}
	after, err := commandstats(ctx, admin)
	if err != nil {
		return lkHotResult{}, err
	}
	total, counts := r.total, r.counts
	mean := float64(total) / float64(g)
	lo, hi := slices.Min(counts), slices.Max(counts)
	// The INFO calls themselves are not the libraries' work.
	calls := float64(statsDelta(before, after) - 1)
	return lkHotResult{
		perSec: r.perSec(),
		p50:    r.waitMS(0.50), p99: r.waitMS(0.99), max: r.waitMS(1),
		spread: float64(hi-lo) / mean,
		cmds:   float64(cnt.n.Load()-sent0) / float64(total),
		calls:  calls / float64(total),
		failed: float64(r.failed),
	}, nil
}

// lkAllocs is (d): heap allocations per uncontended lock+release, in this
// process (library and go-redis together).
func lkAllocs(env *Env, srv *testserver.Redis) error {
	const n = 2000
	t := Table{
		Title: "(d) allocations per lock+release (one goroutine, own key, client side, go-redis included)",
		Cols:  []string{"library", "allocs/op", "bytes/op"},
	}
	for _, lib := range []lkLib{lkCoordkit0, lkRedsyncDef, lkRedislock0} {
		rdb := srv.NewClient()
		l := lib.new(rdb)
		ctx := context.Background()
		key := lkKey("bench:d")
		var ms0, ms1 runtime.MemStats
		for i := 0; i < 2*n; i++ {
			if i == n {
				runtime.GC()
				runtime.ReadMemStats(&ms0)
			}
			unlock, err := l.lock(ctx, key)
			if err != nil {
				return err
			}
			if err := unlock(ctx); err != nil {
				return err
			}
		}
		runtime.ReadMemStats(&ms1)
		l.close()
		rdb.Close()
		t.Row(lib.name, float64(ms1.Mallocs-ms0.Mallocs)/n, float64(ms1.TotalAlloc-ms0.TotalAlloc)/n)
	}
	t.Print(env.Out)
	return nil
}
