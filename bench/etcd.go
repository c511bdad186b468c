package main

// The etcd suite: coordkit's etcdlock (and package election on it) against
// go.etcd.io/etcd/client/v3/concurrency's Mutex and Election, on one
// 3-member etcd cluster, each library in a process of its own ("bench
// etcdworker ...", as the lockproc suite does for Redis), rounds
// interleaved, medians reported: (a) uncontended lock+release pairs with 32
// goroutines each on its own key, (b) one hot key across 16 processes of
// one goroutine each (sections/s, waits, share spread, holds checked for
// overlap), (c) uncontended campaign+resign pairs. Both libraries use one
// lease per process (etcdlock's Client, concurrency's Session) of the same
// TTL. Round trips per pair are the client requests the members served
// (gRPC unary calls started and stream messages received, summed over the
// members' /metrics) during the timed phase.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/coordkit/coordkit/election"
	"github.com/coordkit/coordkit/etcd/etcdlock"
	"github.com/coordkit/coordkit/internal/testserver"
)

func init() { register(Suite{Name: "etcd", Run: runEtcdSuite}) }

// etcdTTL is both libraries' lease TTL, in seconds.
const etcdTTL = 10

// etcdLock is one library's lock or election in a worker: lock takes key
// (or campaigns for it) and returns the release (or resignation).
type etcdLock struct {
	lock  func(ctx context.Context, key string) (func(context.Context) error, error)
	close func()
}

// etcdLibs are the libraries an etcd worker can run, by name.
var etcdLibs = map[string]func(cli *clientv3.Client) (etcdLock, error){
	"coordkit etcdlock": func(cli *clientv3.Client) (etcdLock, error) {
		c, err := etcdlock.New(cli, etcdlock.WithPrefix("/bench/coordkit"), etcdlock.WithTTL(etcdTTL*time.Second))
		if err != nil {
			return etcdLock{}, err
		}
		return etcdLock{lock: func(ctx context.Context, key string) (func(context.Context) error, error) {
			l, err := c.Obtain(ctx, key)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}, close: func() { c.Close() }}, nil
	},
	"concurrency.Mutex": func(cli *clientv3.Client) (etcdLock, error) {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(etcdTTL))
		if err != nil {
			return etcdLock{}, err
		}
		return etcdLock{lock: func(ctx context.Context, key string) (func(context.Context) error, error) {
			m := concurrency.NewMutex(s, "/bench/mutex/"+key)
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			return m.Unlock, nil
		}, close: func() { s.Close() }}, nil
	},
	"coordkit election": func(cli *clientv3.Client) (etcdLock, error) {
		c, err := etcdlock.New(cli, etcdlock.WithPrefix("/bench/coordkit-el"), etcdlock.WithTTL(etcdTTL*time.Second))
		if err != nil {
			return etcdLock{}, err
		}
		var mu sync.Mutex
		els := map[string]*election.Election{} // one per name, as a service keeps its own
		return etcdLock{lock: func(ctx context.Context, key string) (func(context.Context) error, error) {
			mu.Lock()
			e := els[key]
			if e == nil {
				if e, err = election.New(c, key); err != nil {
					mu.Unlock()
					return nil, err
				}
				els[key] = e
			}
			mu.Unlock()
			t, err := e.Campaign(ctx)
			if err != nil {
				return nil, err
			}
			return t.Resign, nil
		}, close: func() { c.Close() }}, nil
	},
	"concurrency.Election": func(cli *clientv3.Client) (etcdLock, error) {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(etcdTTL))
		if err != nil {
			return etcdLock{}, err
		}
		return etcdLock{lock: func(ctx context.Context, key string) (func(context.Context) error, error) {
			e := concurrency.NewElection(s, "/bench/election/"+key)
			if err := e.Campaign(ctx, "bench"); err != nil {
				return nil, err
			}
			return e.Resign, nil
		}, close: func() { s.Close() }}, nil
	},
}

// etcdWorker runs in a worker process: it connects to -endpoints, warms
// up, prints "ready", waits for a line on stdin, runs for -dur and prints
// its procResult.
func etcdWorker(args []string) error {
	fs := flag.NewFlagSet("etcdworker", flag.ContinueOnError)
	eps := fs.String("endpoints", "", "etcd endpoints, comma-separated")
	libName := fs.String("lib", "", "library")
	g := fs.Int("g", 32, "goroutines")
	key := fs.String("key", "", "hot key (empty: each goroutine locks its own key)")
	dur := fs.Duration("dur", 2*time.Second, "timed phase")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mk, ok := etcdLibs[*libName]
	if !ok {
		return fmt.Errorf("unknown library %q", *libName)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*eps, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	l, err := mk(cli)
	if err != nil {
		return err
	}
	defer l.close()
	ctx, cancel := context.WithTimeout(context.Background(), *dur+60*time.Second)
	defer cancel()
	keys := make([]string, *g)
	for i := range keys {
		keys[i] = *key
		if *key == "" {
			keys[i] = fmt.Sprintf("p%d-%d", os.Getpid(), i)
		}
	}
	// Warm up: the lease granted, connections open; on the hot key, one
	// pair (not a contest before the start).
	warm := keys
	if *key != "" {
		warm = keys[:1]
	}
	for _, k := range warm {
		unlock, err := l.lock(ctx, k)
		if err != nil {
			return err
		}
		if err := unlock(ctx); err != nil {
			return err
		}
	}
	return runTimedPhase(ctx, lkFunc(l.lock), keys, *key, *g, *dur)
}

// etcdRequests sums, over the members, the client requests they have
// served: gRPC unary calls started and messages received on streams
// (keep-alives, watch creations), from each member's /metrics.
func etcdRequests(e *testserver.Etcd) (float64, error) {
	var total float64
	c := http.Client{Timeout: 5 * time.Second}
	for _, n := range e.Nodes() {
		resp, err := c.Get("http://" + n.Addr() + "/metrics")
		if err != nil {
			return 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			unary := strings.HasPrefix(line, "grpc_server_started_total{") && strings.Contains(line, `grpc_type="unary"`)
			stream := strings.HasPrefix(line, "grpc_server_msg_received_total{") && !strings.Contains(line, `grpc_type="unary"`)
			if !unary && !stream {
				continue
			}
			if i := strings.LastIndexByte(line, ' '); i > 0 {
				v, err := strconv.ParseFloat(line[i+1:], 64)
				if err == nil {
					total += v
				}
			}
		}
	}
	return total, nil
}

// runEtcdWorkers is one measured run of n workers of lib with the same
// arguments.
func runEtcdWorkers(e *testserver.Etcd, n int, lib string, args ...string) (procRun, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		return procRun{}, err
	}
	ws := make([]*procWorker, 0, n)
	defer func() {
		for _, w := range ws {
			if w.cmd.ProcessState == nil {
				w.stop()
			}
		}
	}()
	for range n {
		w, err := spawnWorker(ctx, exe, append([]string{"etcdworker", "-lib", lib, "-endpoints", strings.Join(e.Endpoints(), ",")}, args...))
		if err != nil {
			return procRun{}, err
		}
		ws = append(ws, w)
	}
	req0, err := etcdRequests(e)
	if err != nil {
		return procRun{}, err
	}
	r, pairs, err := startAndGather(ws)
	if err != nil {
		return procRun{}, err
	}
	req1, err := etcdRequests(e)
	if err != nil {
		return procRun{}, err
	}
	p := float64(max(pairs, 1))
	// The workers' closing requests (revoking a lease, a session's close)
	// fall in the window too; a few among thousands of pairs.
	r.calls = (req1 - req0) / p
	return r, nil
}

// lkFunc adapts a lock function to procHot's lkLocker.
type lkFunc func(ctx context.Context, key string) (func(context.Context) error, error)

func (f lkFunc) lock(ctx context.Context, key string) (lkUnlock, error) {
	return f(ctx, key)
}

func (f lkFunc) close() {}

func runEtcdSuite(env *Env) error {
	e, err := testserver.NewEtcdCluster(3)
	if err != nil {
		return err
	}
	defer e.Close()
	interleaved := func(libs []string, n int, args func() []string) (map[string][]procRun, error) {
		res := map[string][]procRun{}
		for round := range env.Rounds {
			for i := range libs {
				name := libs[(i+round)%len(libs)] // a different library first each round
				r, err := runEtcdWorkers(e, n, name, args()...)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				if o := overlaps(r.holds); o != 0 {
					return nil, fmt.Errorf("%s: mutual exclusion broken: %d overlapping holds across processes", name, o)
				}
				res[name] = append(res[name], r)
			}
		}
		return res, nil
	}
	uncontended := func(title string, libs []string) error {
		res, err := interleaved(libs, 1, func() []string { return []string{"-g", "32", "-dur", env.Dur.String()} })
		if err != nil {
			return err
		}
		base := medianOf(res[libs[1]], func(r procRun) float64 { return r.perSec })
		t := Table{
			Title: fmt.Sprintf("%s, each library in its own process: 32 goroutines, each on its own key, on a 3-member etcd cluster (median of %d interleaved rounds of %v, a fresh process per round)", title, env.Rounds, env.Dur),
			Cols:  []string{"library", "pairs/s", "vs " + libs[1], "etcd requests/pair", "client CPU µs/pair", "allocs/pair (client)"},
		}
		for _, name := range libs {
			ps := medianOf(res[name], func(r procRun) float64 { return r.perSec })
			t.Row(name, ps, Ratio(ps, base), medianOf(res[name], func(r procRun) float64 { return r.calls }),
				medianOf(res[name], func(r procRun) float64 { return r.clientUS }),
				medianOf(res[name], func(r procRun) float64 { return r.mallocs }))
		}
		t.Print(env.Out)
		return nil
	}
	if err := uncontended("(a) uncontended lock+release", []string{"coordkit etcdlock", "concurrency.Mutex"}); err != nil {
		return err
	}
	const n = 16
	libs := []string{"coordkit etcdlock", "concurrency.Mutex"}
	res, err := interleaved(libs, n, func() []string {
		return []string{"-g", "1", "-key", fmt.Sprintf("hot-%d", time.Now().UnixNano()), "-dur", env.Dur.String()}
	})
	if err != nil {
		return err
	}
	pct := func(xs []int64, p float64) float64 {
		xs = slices.Sorted(slices.Values(xs))
		if len(xs) == 0 {
			return 0
		}
		return float64(xs[min(int(float64(len(xs))*p), len(xs)-1)])
	}
	q := func(p float64) func(procRun) float64 {
		return func(r procRun) float64 { return pct(r.waitsUS, p) / 1e3 }
	}
	spread := func(r procRun) float64 {
		var sum int64
		for _, c := range r.counts {
			sum += c
		}
		if sum == 0 {
			return 0
		}
		return float64(slices.Max(r.counts)-slices.Min(r.counts)) / (float64(sum) / float64(len(r.counts)))
	}
	base := medianOf(res["concurrency.Mutex"], func(r procRun) float64 { return r.perSec })
	t := Table{
		Title: fmt.Sprintf("(b) hot key across processes: %d processes of one library, one goroutine each, on one key of a 3-member etcd cluster; holds checked for overlap across processes (median of %d interleaved rounds of %v)", n, env.Rounds, env.Dur),
		Cols:  []string{"library", "sections/s", "vs concurrency.Mutex", "wait p50 ms", "p99 ms", "max ms", "share spread", "etcd requests/section", "hand-off p50 µs", "p99 µs"},
	}
	for _, name := range libs {
		ps := medianOf(res[name], func(r procRun) float64 { return r.perSec })
		t.Row(name, ps, Ratio(ps, base), medianOf(res[name], q(0.5)), medianOf(res[name], q(0.99)), medianOf(res[name], q(1)),
			fmt.Sprintf("%.1f %%", 100*medianOf(res[name], spread)),
			medianOf(res[name], func(r procRun) float64 { return r.calls }),
			medianOf(res[name], func(r procRun) float64 { return pct(handoffs(r.holds), 0.5) }),
			medianOf(res[name], func(r procRun) float64 { return pct(handoffs(r.holds), 0.99) }))
	}
	t.Print(env.Out)
	fmt.Fprintln(env.Out, "Share spread: (max − min) / mean of the sections per process. Hand-off: from the end of one section to the start of the next (any holder).")
	fmt.Fprintln(env.Out)
	return uncontended("(c) uncontended campaign+resign", []string{"coordkit election", "concurrency.Election"})
}
