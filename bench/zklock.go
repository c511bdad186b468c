package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/zklock"
)

// The zklock suite: coordkit's zklock against go-zookeeper's zk.Lock on the
// run's ZooKeeper, each goroutine with a connection of its own (as separate
// processes would be): (a) uncontended Obtain+Release pairs on distinct keys,
// (b) critical sections on one hot key, with the p99 wait and the spread of
// sections per goroutine (FIFO fairness).

func init() { register(Suite{Name: "zklock", Run: runZKLock}) }

const zkGoroutines = 8

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// zkImpl is one lock implementation: mk returns, for goroutine g on conn, a
// function that takes the lock on key and returns its release.
type zkImpl struct {
	name string
	mk   func(conn *zk.Conn, g int, key string) (lockFn func() (func() error, error), closeFn func())
}

func zkImpls() []zkImpl {
	return []zkImpl{
		{"coordkit zklock", func(conn *zk.Conn, g int, key string) (func() (func() error, error), func()) {
			c, err := zklock.New(conn, zklock.WithRoot("/bench/coordkit"))
			if err != nil {
				panic(err)
			}
			ctx := context.Background()
			return func() (func() error, error) {
				lease, err := c.Obtain(ctx, key)
				if err != nil {
					return nil, err
				}
				return func() error { return lease.Release(ctx) }, nil
			}, func() { c.Close() }
		}},
		{"go-zookeeper zk.Lock", func(conn *zk.Conn, g int, key string) (func() (func() error, error), func()) {
			l := zk.NewLock(conn, "/bench/zk/"+key, zk.WorldACL(zk.PermAll))
			return func() (func() error, error) {
				if err := l.Lock(); err != nil {
					return nil, err
				}
				return l.Unlock, nil
			}, func() {}
		}},
	}
}

type zkRound struct {
	ops   float64         // pairs or sections per second
	waits []time.Duration // hot key: each Obtain's wait
	per   []int           // sections per goroutine
}

// zkRun runs n goroutines, each with its own connection, for d; key(g) is
// goroutine g's key.
func zkRun(servers []string, impl zkImpl, d time.Duration, key func(g int) string) (zkRound, error) {
	conns := make([]*zk.Conn, zkGoroutines)
	for g := range conns {
		c, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}))
		if err != nil {
			return zkRound{}, err
		}
		defer c.Close()
		conns[g] = c
	}
	for _, c := range conns {
		for c.State() != zk.StateHasSession {
			time.Sleep(5 * time.Millisecond)
		}
	}
	locks := make([]func() (func() error, error), zkGoroutines)
	for g := range locks {
		l, closeFn := impl.mk(conns[g], g, key(g))
		defer closeFn()
		locks[g] = l
		// Warm up: parents exist before the clock starts.
		rel, err := l()
		if err != nil {
			return zkRound{}, err
		}
		if err := rel(); err != nil {
			return zkRound{}, err
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		waits []time.Duration
		per   = make([]int, zkGoroutines)
		first error
	)
	start := time.Now()
	end := start.Add(d)
	for g := range zkGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			n := 0
			for time.Now().Before(end) {
				t0 := time.Now()
				rel, err := locks[g]()
				if err == nil {
					mine = append(mine, time.Since(t0))
					err = rel()
				}
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
				n++
			}
			mu.Lock()
			waits = append(waits, mine...)
			per[g] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	total := 0
	for _, n := range per {
		total += n
	}
	return zkRound{ops: float64(total) / el.Seconds(), waits: waits, per: per}, first
}

func runZKLock(env *Env) error {
	z, err := env.ZooKeeper()
	if err != nil {
		return err
	}
	servers := z.Servers()
	impls := zkImpls()
	type acc struct {
		pairs, sections, p99ms, spread []float64
	}
	res := make([]acc, len(impls))
	for r := range env.Rounds {
		for k := range impls {
			i := (k + r) % len(impls) // alternate who goes first
			a, err := zkRun(servers, impls[i], env.Dur, func(g int) string { return fmt.Sprintf("a-r%d-g%d", r, g) })
			if err != nil {
				return fmt.Errorf("%s distinct keys: %w", impls[i].name, err)
			}
			res[i].pairs = append(res[i].pairs, a.ops)
		}
		for k := range impls {
			i := (k + r) % len(impls)
			b, err := zkRun(servers, impls[i], env.Dur, func(int) string { return fmt.Sprintf("hot-r%d", r) })
			if err != nil {
				return fmt.Errorf("%s hot key: %w", impls[i].name, err)
			}
			res[i].sections = append(res[i].sections, b.ops)
			res[i].p99ms = append(res[i].p99ms, float64(percentile(b.waits, 0.99).Microseconds())/1000)
			lo, hi := slices.Min(b.per), slices.Max(b.per)
			res[i].spread = append(res[i].spread, float64(lo)/float64(max(hi, 1)))
		}
	}
	base := len(impls) - 1 // zk.Lock
	ta := Table{
		Title: fmt.Sprintf("(a) uncontended Obtain+Release pairs/s, %d goroutines on distinct keys, a connection each (median of %d rounds of %v)", zkGoroutines, env.Rounds, env.Dur),
		Cols:  []string{"implementation", "pairs/s", "vs zk.Lock"},
	}
	tb := Table{
		Title: fmt.Sprintf("(b) hot key: critical sections/s, %d goroutines on one key, a connection each (median of %d rounds of %v)", zkGoroutines, env.Rounds, env.Dur),
		Cols:  []string{"implementation", "sections/s", "p99 wait (ms)", "fairness (min/max sections per goroutine)", "vs zk.Lock"},
	}
	for i, im := range impls {
		ta.Row(im.name, Median(res[i].pairs), Ratio(Median(res[i].pairs), Median(res[base].pairs)))
		tb.Row(im.name, Median(res[i].sections), Median(res[i].p99ms), Median(res[i].spread),
			Ratio(Median(res[i].sections), Median(res[base].sections)))
	}
	ta.Print(env.Out)
	tb.Print(env.Out)
	return nil
}
