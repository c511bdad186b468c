package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/election"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
	"github.com/coordkit/coordkit/semaphore"
	"github.com/coordkit/coordkit/zklock"
)

// The semaphore suite: (a) coordkit's Redis semaphore against a polling
// semaphore on the same Redis (the shape of the Go snippets that wrap
// Redisson's idea: one script takes a permit if fewer than N are held in a
// sorted set of expiring holders, and a caller that finds none free sleeps
// 5-15 ms and tries again), 16 goroutines on 4 clients for N = 4 permits,
// each holding its permit 1 ms: acquire+release pairs/s, the mean number
// of permits in use (the closer to N, the less a freed permit stays idle),
// the p99 wait and Redis calls per pair; (b) election failover: a leader
// whose process stops without resigning, and the time until another
// instance leads, per lock backend, against the TTL (1 s).

func init() { register(Suite{Name: "semaphore", Run: runSemaphore}) }

const (
	semPermits    = 4
	semClients    = 4
	semGoroutines = 16
	semHold       = time.Millisecond
)

// pollScript is the polling baseline's acquisition: drop expired holders,
// take a permit if fewer than N are held.
var pollScript = redis.NewScript(`
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
if redis.call('zcard', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('zadd', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  return 1
end
return 0`)

type semImpl struct {
	name string
	// mk returns, for a client's Redis connection, a function that takes a
	// permit of key and returns its release.
	mk func(rdb redis.UniversalClient, key string) (acquire func(ctx context.Context) (func() error, error), closeFn func())
}

func semImpls() []semImpl {
	return []semImpl{
		{"coordkit semaphore", func(rdb redis.UniversalClient, key string) (func(context.Context) (func() error, error), func()) {
			c := semaphore.New(rdb, semaphore.WithPermits(semPermits))
			return func(ctx context.Context) (func() error, error) {
				p, err := c.Acquire(ctx, key)
				if err != nil {
					return nil, err
				}
				return func() error { return p.Release(ctx) }, nil
			}, func() { c.Close() }
		}},
		{"polling (5-15 ms)", func(rdb redis.UniversalClient, key string) (func(context.Context) (func() error, error), func()) {
			var seq atomic.Int64
			prefix := strconv.FormatInt(rand.Int64(), 36) + ":"
			return func(ctx context.Context) (func() error, error) {
				id := prefix + strconv.FormatInt(seq.Add(1), 10)
				for {
					ok, err := pollScript.Run(ctx, rdb, []string{key}, id, semPermits, 30_000).Int()
					if err != nil {
						return nil, err
					}
					if ok == 1 {
						return func() error { return rdb.ZRem(ctx, key, id).Err() }, nil
					}
					time.Sleep(5*time.Millisecond + time.Duration(rand.Int64N(int64(10*time.Millisecond))))
				}
			}, func() {}
		}},
	}
}

type semRound struct {
	pairs, inUse, calls float64
	waits               []time.Duration
}

func semRun(env *Env, impl semImpl, key string) (semRound, error) {
	srv, err := env.Redis()
	if err != nil {
		return semRound{}, err
	}
	ctx := context.Background()
	admin := srv.NewClient()
	defer admin.Close()
	calls0, err := commandstats(ctx, admin)
	if err != nil {
		return semRound{}, err
	}
	var (
		wg      sync.WaitGroup
		pairs   atomic.Int64
		held    atomic.Int64
		mu      sync.Mutex
		waits   []time.Duration
		firstEr error
	)
	stop := make(chan struct{})
	acquirers := make([]func(context.Context) (func() error, error), semClients)
	for i := range semClients {
		rdb := srv.NewClient()
		defer rdb.Close()
		a, closeFn := impl.mk(rdb, key)
		defer closeFn()
		acquirers[i] = a
	}
	var samples, sum atomic.Int64
	wg.Add(1)
	go func() { // samples the permits in use every 100 µs
		defer wg.Done()
		t := time.NewTicker(100 * time.Microsecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				samples.Add(1)
				sum.Add(held.Load())
			}
		}
	}()
	start := time.Now()
	for g := range semGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acquire := acquirers[g%semClients]
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				release, err := acquire(ctx)
				if err != nil {
					mu.Lock()
					firstEr = err
					mu.Unlock()
					return
				}
				w := time.Since(t0)
				held.Add(1)
				time.Sleep(semHold)
				held.Add(-1)
				if err := release(); err != nil {
					mu.Lock()
					firstEr = err
					mu.Unlock()
					return
				}
				pairs.Add(1)
				mu.Lock()
				waits = append(waits, w)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(env.Dur)
	close(stop)
	wg.Wait()
	el := time.Since(start)
	if firstEr != nil {
		return semRound{}, firstEr
	}
	calls1, err := commandstats(ctx, admin)
	if err != nil {
		return semRound{}, err
	}
	r := semRound{pairs: float64(pairs.Load()) / el.Seconds(), waits: waits,
		calls: float64(statsDelta(calls0, calls1)-1) / float64(max(pairs.Load(), 1))} // less the first INFO
	if n := samples.Load(); n > 0 {
		r.inUse = float64(sum.Load()) / float64(n)
	}
	return r, nil
}

func runSemaphore(env *Env) error {
	impls := semImpls()
	rounds := make([][]semRound, len(impls))
	for r := range env.Rounds {
		for i, impl := range impls { // interleaved rounds
			res, err := semRun(env, impl, fmt.Sprintf("bench:sem:%d:%d", r, i))
			if err != nil {
				return fmt.Errorf("%s: %w", impl.name, err)
			}
			rounds[i] = append(rounds[i], res)
		}
	}
	t := Table{
		Title: fmt.Sprintf("Semaphore, N = %d, %d goroutines on %d clients, %v held (medians of %d rounds of %v)",
			semPermits, semGoroutines, semClients, semHold, env.Rounds, env.Dur),
		Cols: []string{"library", "pairs/s", "vs polling", "permits in use (of 4)", "p99 wait", "Redis calls/pair"},
	}
	med := func(i int, f func(semRound) float64) float64 {
		var xs []float64
		for _, r := range rounds[i] {
			xs = append(xs, f(r))
		}
		return Median(xs)
	}
	base := med(1, func(r semRound) float64 { return r.pairs })
	for i, impl := range impls {
		p := med(i, func(r semRound) float64 { return r.pairs })
		t.Row(impl.name, p, Ratio(p, base), med(i, func(r semRound) float64 { return r.inUse }),
			time.Duration(med(i, func(r semRound) float64 { return float64(p99(r.waits)) })).Round(10*time.Microsecond),
			med(i, func(r semRound) float64 { return r.calls }))
	}
	t.Print(env.Out)
	return runFailover(env)
}

func p99(ws []time.Duration) time.Duration {
	if len(ws) == 0 {
		return 0
	}
	s := slices.Clone(ws)
	slices.Sort(s)
	return s[len(s)*99/100]
}

// runFailover measures, per backend, how long after a leader's process
// stops (its lock client closed without resigning; on ZooKeeper its
// session closed too, as a process exit closes it) another instance leads.
func runFailover(env *Env) error {
	quiet := slog.New(slog.DiscardHandler) // the leaders' leases end by Close: logged at Info otherwise
	const ttl = time.Second
	type backend struct {
		name string
		open func() (lock.Locker, func(), error)
	}
	srv, err := env.Redis()
	if err != nil {
		return err
	}
	masters, err := env.Masters(3)
	if err != nil {
		return err
	}
	z, err := env.ZooKeeper()
	if err != nil {
		return err
	}
	backends := []backend{
		{"lock (Redis)", func() (lock.Locker, func(), error) {
			rdb := srv.NewClient()
			c := lock.New(rdb, lock.WithLogger(quiet))
			return c, func() { c.Close(); rdb.Close() }, nil
		}},
		{"redlock (3 masters)", func() (lock.Locker, func(), error) {
			var ms []redis.UniversalClient
			for _, m := range masters {
				ms = append(ms, m.NewClient())
			}
			c, err := redlock.New(ms, redlock.WithLogger(quiet))
			return c, func() {
				if c != nil {
					c.Close()
				}
				for _, m := range ms {
					m.Close()
				}
			}, err
		}},
		{"zklock (session closed with the process)", func() (lock.Locker, func(), error) {
			conn, err := z.Dial(4*time.Second, nil)
			if err != nil {
				return nil, nil, err
			}
			c, err := zklock.New(conn.Conn, zklock.WithRoot("/bench/election"), zklock.WithSessionTimeout(4*time.Second), zklock.WithLogger(quiet))
			return c, func() {
				if c != nil {
					c.Close()
				}
				conn.Close()
			}, err
		}},
	}
	t := Table{
		Title: fmt.Sprintf("Election failover: the leader's process stops without resigning; time until another instance leads (TTL %v; median and max of %d)", ttl, env.Rounds),
		Cols:  []string{"backend", "median", "max", "bound"},
	}
	ctx := context.Background()
	for _, b := range backends {
		var ds []float64
		for r := range env.Rounds {
			key := fmt.Sprintf("bench-failover-%d-%d", r, rand.Int64())
			la, closeA, err := b.open()
			if err != nil {
				return err
			}
			lb, closeB, err := b.open()
			if err != nil {
				closeA()
				return err
			}
			ea, _ := election.New(la, key, election.WithIdentity("a"), election.WithTTL(ttl))
			eb, _ := election.New(lb, key, election.WithIdentity("b"), election.WithTTL(ttl))
			if _, err := ea.Campaign(ctx); err != nil {
				return err
			}
			got := make(chan time.Time, 1)
			go func() {
				if tb, err := eb.Campaign(ctx); err == nil {
					got <- time.Now()
					tb.Resign(ctx)
				}
			}()
			time.Sleep(100 * time.Millisecond) // b waits in line
			stopped := time.Now()
			closeA()
			at := <-got
			ds = append(ds, float64(at.Sub(stopped)))
			closeB()
		}
		bound := "TTL"
		if b.name[:2] == "zk" {
			bound = "session close"
		}
		t.Row(b.name, time.Duration(Median(ds)).Round(time.Millisecond), time.Duration(slices.Max(ds)).Round(time.Millisecond), bound)
	}
	t.Print(env.Out)
	return nil
}
