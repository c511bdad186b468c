package main

// The redlock suite: coordkit's Redlock against go-redsync/redsync/v4 (its
// Redlock over several pools) on the same 3 and 5 independent masters.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
)

func init() { register(Suite{Name: "redlock", Run: runRedlockSuite}) }

// rlLocker is one library's lock/unlock over the masters.
type rlLocker interface {
	lock(ctx context.Context, key string) (func(ctx context.Context) error, error)
	close()
}

type rlCoordkit struct{ c *redlock.Client }

func (l rlCoordkit) lock(ctx context.Context, key string) (func(ctx context.Context) error, error) {
	lease, err := l.c.Obtain(ctx, key)
	if err != nil {
		return nil, err
	}
	return lease.Release, nil
}
func (l rlCoordkit) close() { l.c.Close() }

type rlRedsync struct{ rs *redsync.Redsync }

func (l rlRedsync) lock(ctx context.Context, key string) (func(ctx context.Context) error, error) {
	m := l.rs.NewMutex(key)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
}
func (rlRedsync) close() {}

type rlLib struct {
	name string
	new  func(rdbs []goredislib.UniversalClient) (rlLocker, error)
}

var rlLibs = []rlLib{
	{"coordkit redlock (default: 20 ms node timeout)", func(rdbs []goredislib.UniversalClient) (rlLocker, error) {
		c, err := redlock.New(rdbs)
		return rlCoordkit{c}, err
	}},
	{"redsync (default: 32 tries, 50–250 ms)", func(rdbs []goredislib.UniversalClient) (rlLocker, error) {
		pools := make([]redis.Pool, len(rdbs))
		for i, r := range rdbs {
			pools[i] = goredis.NewPool(r)
		}
		return rlRedsync{redsync.New(pools...)}, nil
	}},
}

// rlClients returns one go-redis client per master, with
// ContextTimeoutEnabled (which coordkit's Redlock requires; redsync gets
// the same clients).
func rlClients(ms []*testserver.Redis) []goredislib.UniversalClient {
	rdbs := make([]goredislib.UniversalClient, len(ms))
	for i, m := range ms {
		rdbs[i] = goredislib.NewClient(&goredislib.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	}
	return rdbs
}

func rlCloseAll(rdbs []goredislib.UniversalClient) {
	for _, r := range rdbs {
		r.Close()
	}
}

var rlKeySeq atomic.Int64

func rlKey(prefix string) string { return prefix + ":" + strconv.FormatInt(rlKeySeq.Add(1), 10) }

func runRedlockSuite(env *Env) error {
	type cell struct{ pairs, hot, p50, p99, max, failed []float64 }
	ns := []int{3, 5}
	res := make([][]cell, len(ns))
	for ni := range ns {
		res[ni] = make([]cell, len(rlLibs))
	}
	for range env.Rounds {
		for ni, n := range ns {
			ms, err := env.Masters(n)
			if err != nil {
				return err
			}
			for li, lib := range rlLibs {
				p, err := rlUncontended(env, ms, lib)
				if err != nil {
					return fmt.Errorf("%s, %d masters: %w", lib.name, n, err)
				}
				h, err := rlHot(env, ms, lib)
				if err != nil {
					return fmt.Errorf("%s, %d masters: %w", lib.name, n, err)
				}
				c := &res[ni][li]
				c.pairs = append(c.pairs, p)
				c.hot = append(c.hot, h.perSec)
				c.p50 = append(c.p50, h.p50)
				c.p99 = append(c.p99, h.p99)
				c.max = append(c.max, h.max)
				c.failed = append(c.failed, h.failed)
			}
		}
	}
	a := Table{
		Title: fmt.Sprintf("(a) uncontended: 32 goroutines, each lock+release of its own key (median of %d rounds of %v)", env.Rounds, env.Dur),
		Cols:  []string{"masters", "library", "pairs/s", "vs redsync"},
	}
	b := Table{
		Title: fmt.Sprintf("(b) hot key: 16 goroutines on one key, one client, in-process read-modify-write checked for overlap (median of %d rounds of %v)", env.Rounds, env.Dur),
		Cols:  []string{"masters", "library", "sections/s", "vs redsync", "wait p50 ms", "p99 ms", "max ms", "p99 vs redsync", "failed obtains"},
	}
	for ni, n := range ns {
		rs := res[ni][len(rlLibs)-1] // redsync
		for li, lib := range rlLibs {
			c := res[ni][li]
			a.Row(n, lib.name, Median(c.pairs), Ratio(Median(c.pairs), Median(rs.pairs)))
			b.Row(n, lib.name, Median(c.hot), Ratio(Median(c.hot), Median(rs.hot)),
				Median(c.p50), Median(c.p99), Median(c.max), Ratio(Median(c.p99), Median(rs.p99)), Median(c.failed))
		}
	}
	a.Print(env.Out)
	b.Print(env.Out)
	fmt.Fprintln(env.Out, "wait: from the lock call to holding the lock; failed obtains: lock calls that gave up (redsync after its 32 tries) and were called again.")
	fmt.Fprintln(env.Out)
	return nil
}

// rlUncontended: 32 goroutines each lock and release a key of their own.
func rlUncontended(env *Env, ms []*testserver.Redis, lib rlLib) (float64, error) {
	const g = 32
	rdbs := rlClients(ms)
	defer rlCloseAll(rdbs)
	l, err := lib.new(rdbs)
	if err != nil {
		return 0, err
	}
	defer l.close()
	keys := make([]string, g)
	for i := range keys {
		keys[i] = rlKey("bench:rl:a")
	}
	ctx, cancel := context.WithTimeout(context.Background(), env.Dur+60*time.Second)
	defer cancel()
	for _, k := range keys[:1] { // warm up: scripts, connections
		unlock, err := l.lock(ctx, k)
		if err != nil {
			return 0, err
		}
		unlock(ctx)
	}
	stop := time.Now().Add(env.Dur)
	begin := time.Now()
	var n atomic.Int64
	errs := make(chan error, g)
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				unlock, err := l.lock(ctx, keys[i])
				if err != nil {
					errs <- err
					return
				}
				if err := unlock(ctx); err != nil {
					errs <- err
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n.Load()) / time.Since(begin).Seconds(), nil
}

type rlHotResult struct{ perSec, p50, p99, max, failed float64 }

// rlHot: 16 goroutines of one client compete for one key.
func rlHot(env *Env, ms []*testserver.Redis, lib rlLib) (rlHotResult, error) {
	const g = 16
	rdbs := rlClients(ms)
	defer rlCloseAll(rdbs)
	l, err := lib.new(rdbs)
	if err != nil {
		return rlHotResult{}, err
	}
	defer l.close()
	ctx, cancel := context.WithTimeout(context.Background(), env.Dur+60*time.Second)
	defer cancel()
	key := rlKey("bench:rl:b")
	unlock, err := l.lock(ctx, key) // warm up
	if err != nil {
		return rlHotResult{}, err
	}
	unlock(ctx)

	r, err := runHot(ctx, env.Dur, g, key, func(int) hotLock { return l.lock }, func(err error) bool {
		return errors.Is(err, redsync.ErrFailed) || errors.As(err, new(*redsync.ErrTaken)) ||
			errors.Is(err, lock.ErrNotObtained) && ctx.Err() == nil
	})
	if err != nil {
		return rlHotResult{}, err
	}
	return rlHotResult{
		perSec: r.perSec(),
		p50:    r.waitMS(0.50), p99: r.waitMS(0.99), max: r.waitMS(1),
		failed: float64(r.failed),
	}, nil
}
