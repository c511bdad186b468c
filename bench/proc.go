package main

// The lockproc suite: the lock suite's libraries, each in a process of its
// own. A library measured beside another in one process shares its GC and
// background goroutines (coordkit's Pub/Sub reader, pools), so this suite
// starts a fresh process of this binary ("bench lockworker ...") for every
// library and round, interleaves the libraries round by round, and takes the
// medians. The parent only waits while a worker runs; around each timed
// phase it reads INFO commandstats and INFO cpu, for the commands and the
// Redis CPU each pair costs.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/redisfn"
	"github.com/coordkit/coordkit/internal/testserver"
)

func init() { register(Suite{Name: "lockproc", Run: runLockProcSuite}) }

// procLibs are the libraries a worker process can run, by name.
var procLibs = map[string]lkLib{
	"coordkit":         lkCoordkit0,
	"coordkit-evalsha": lkCoordkit0, // with COORDKIT_REDIS_FUNCTIONS=off: EVALSHA, not FCALL
	"coordkit-fair":    lkCoordkitF,
	"redislock":        lkRedislock0,
	"redislock-1ms":    lkRedislock1,
	"redsync":          lkRedsyncDef,
	"redsync-1ms":      lkRedsyncBest,
	"redislock-10ms":   lkRedislock10,
}

// procResult is what a worker reports on its stdout (one JSON line).
type procResult struct {
	Pairs   int64   `json:"pairs"`   // lock+release pairs (sections) completed
	Secs    float64 `json:"secs"`    // the timed phase
	Failed  int64   `json:"failed"`  // lock calls that gave up (and were called again)
	Mallocs float64 `json:"mallocs"` // heap allocations per pair in the worker
	CPUUS   float64 `json:"cpu_us"`  // the worker's CPU time (user + system) per pair, µs
	WaitsUS []int64 `json:"waits"`   // hot: lock call to holding, µs
	Holds   []int64 `json:"holds"`   // hot: wall-clock ns of each hold, start and end, in pairs
}

// lockWorker runs in the worker process: it connects to the Redis at -addr,
// warms up, prints "ready", waits for a line on stdin, runs for -dur and
// prints its procResult.
func lockWorker(args []string) error {
	fs := flag.NewFlagSet("lockworker", flag.ContinueOnError)
	addr := fs.String("addr", "", "Redis address; comma-separated: a Cluster's masters")
	libName := fs.String("lib", "", "library")
	g := fs.Int("g", 32, "goroutines")
	key := fs.String("key", "", "hot key (empty: each goroutine locks its own key)")
	dur := fs.Duration("dur", 2*time.Second, "timed phase")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lib, ok := procLibs[*libName]
	if !ok {
		return fmt.Errorf("unknown library %q", *libName)
	}
	if strings.HasSuffix(*libName, "-evalsha") {
		os.Setenv(redisfn.EnvVar, "off")
	}
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(*addr, ",")}) // several: a ClusterClient
	defer rdb.Close()
	l := lib.new(rdb)
	defer l.close()
	ctx, cancel := context.WithTimeout(context.Background(), *dur+60*time.Second)
	defer cancel()
	keys := make([]string, *g)
	for i := range keys {
		keys[i] = *key
		if *key == "" {
			keys[i] = fmt.Sprintf("bench:p:%d:%d", os.Getpid(), i)
		}
	}
	// Warm up: scripts loaded, connections open (one per goroutine).
	if _, err := lkParallel(200*time.Millisecond, *g, func(ctx context.Context, i int) error {
		if *key != "" {
			return nil // hot: one warm-up pair below, not a contest before the start
		}
		unlock, err := l.lock(ctx, keys[i])
		if err != nil {
			return err
		}
		return unlock(ctx)
	}); err != nil {
		return err
	}
	if *key != "" {
		unlock, err := l.lock(ctx, *key)
		if err != nil {
			return err
		}
		if err := unlock(ctx); err != nil {
			return err
		}
	}
	return runTimedPhase(ctx, l, keys, *key, *g, *dur)
}

// runTimedPhase is a worker's timed phase, after its warm-up: it prints
// "ready", waits for a line on stdin, runs for dur (g goroutines, each
// locking keys[i], or all of them key when it is set) and prints its
// procResult.
func runTimedPhase(ctx context.Context, l lkLocker, keys []string, key string, g int, dur time.Duration) error {
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := selfCPU()
	var res procResult
	if key == "" {
		begin := time.Now()
		n, err := lkParallel(dur, g, func(ctx context.Context, i int) error {
			unlock, err := l.lock(ctx, keys[i])
			if err != nil {
				return err
			}
			return unlock(ctx)
		})
		if err != nil {
			return err
		}
		res.Secs = time.Since(begin).Seconds()
		res.Pairs = int64(n)
	} else {
		var err error
		if res, err = procHot(ctx, l, key, g, dur); err != nil {
			return err
		}
	}
	res.CPUUS = (selfCPU() - cpu0).Seconds() * 1e6 / float64(max(res.Pairs, 1))
	runtime.ReadMemStats(&ms1)
	res.Mallocs = float64(ms1.Mallocs-ms0.Mallocs) / float64(max(res.Pairs, 1))
	return json.NewEncoder(os.Stdout).Encode(res)
}

// procHot is a worker's hot-key phase: g goroutines lock key until d has
// passed, recording each wait and each hold (wall clock, so that the parent
// can check holds of all the workers for overlap).
func procHot(ctx context.Context, l lkLocker, key string, g int, d time.Duration) (procResult, error) {
	var (
		mu  sync.Mutex
		res procResult
		wg  sync.WaitGroup
	)
	errs := make(chan error, g)
	begin := time.Now()
	stop := begin.Add(d)
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var waits, holds []int64
			var failed int64
			for time.Now().Before(stop) {
				t0 := time.Now()
				unlock, err := l.lock(ctx, key)
				if err != nil {
					if procGaveUp(ctx, err) {
						failed++
						continue
					}
					errs <- err
					return
				}
				t1 := time.Now()
				waits = append(waits, t1.Sub(t0).Microseconds())
				runtime.Gosched() // the section: a yield, as in the in-process suite
				t2 := time.Now()
				holds = append(holds, t1.UnixNano(), t2.UnixNano())
				if err := unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
			mu.Lock()
			res.WaitsUS = append(res.WaitsUS, waits...)
			res.Holds = append(res.Holds, holds...)
			res.Failed += failed
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return res, err
	}
	res.Secs = time.Since(begin).Seconds()
	res.Pairs = int64(len(res.WaitsUS))
	return res, nil
}

// selfCPU is the CPU time this process has used (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func procGaveUp(ctx context.Context, err error) bool {
	return errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, redsync.ErrFailed) ||
		errors.As(err, new(*redsync.ErrTaken)) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
}

// extraNames are the -coordkit-build libraries, sorted.
func extraNames() []string {
	names := make([]string, 0, len(extraCoordkit))
	for n := range extraCoordkit {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// procWorker is a started worker process.
type procWorker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// extraCoordkit are other builds of this benchmark (-coordkit-build
// name=path: an older coordkit, say) whose coordkit lock the lockproc suite
// runs beside this build's, in the same interleaved rounds.
var extraCoordkit = map[string]string{}

func init() {
	flag.Func("coordkit-build", "lockproc: also run coordkit from another build of this benchmark, as name=path (repeatable)", func(v string) error {
		name, path, ok := strings.Cut(v, "=")
		if !ok || name == "" || path == "" {
			return fmt.Errorf("want name=path, got %q", v)
		}
		extraCoordkit["coordkit@"+name] = path
		return nil
	})
}

// startWorker starts a worker of library lib (args: its other flags).
func startWorker(ctx context.Context, lib string, args ...string) (*procWorker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if path, ok := extraCoordkit[lib]; ok {
		exe, lib = path, "coordkit"
	}
	return spawnWorker(ctx, exe, append([]string{"lockworker", "-lib", lib}, args...))
}

// spawnWorker starts exe with args (a worker mode of this binary and its
// flags) and waits for it to print "ready".
func spawnWorker(ctx context.Context, exe string, args []string) (*procWorker, error) {
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &procWorker{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 1<<20)}
	line, err := w.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		w.stop()
		return nil, fmt.Errorf("worker %v: not ready (%q, %v)", args, line, err)
	}
	return w, nil
}

func (w *procWorker) stop() {
	w.stdin.Close()
	w.cmd.Process.Kill()
	w.cmd.Wait()
}

// start tells the worker to begin its timed phase.
func (w *procWorker) start() error {
	_, err := io.WriteString(w.stdin, "go\n")
	return err
}

// result reads the worker's result and waits for it to exit.
func (w *procWorker) result() (procResult, error) {
	var r procResult
	line, err := w.out.ReadString('\n')
	if err != nil {
		w.stop()
		return r, fmt.Errorf("worker: %v", err)
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		w.stop()
		return r, fmt.Errorf("worker: %q: %v", line, err)
	}
	w.stdin.Close()
	return r, w.cmd.Wait()
}

// redisCPU returns Redis's used_cpu_sys + used_cpu_user in seconds.
func redisCPU(ctx context.Context, rdb redis.UniversalClient) (float64, error) {
	s, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var t float64
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			x, _ := strconv.ParseFloat(v, 64)
			t += x
		}
	}
	return t, nil
}

// procRun is one measured run of n workers with the same arguments.
type procRun struct {
	perSec, calls, cpuUS, mallocs, failed, clientUS float64
	scripts, scriptUS                               float64 // per pair: script calls (EVAL, EVALSHA, FCALL), Redis µs in them
	waitsUS                                         []int64
	counts                                          []int64
	holds                                           [][]int64
}

// procServers are the Redis servers of a lockproc run: one, or a
// Cluster's masters; the workers connect to addr, the parent reads each
// admin's INFO and sums.
type procServers struct {
	addr   string
	admins []redis.UniversalClient
}

func (s procServers) commandstats(ctx context.Context) (calls, usec map[string]int64, err error) {
	calls, usec = map[string]int64{}, map[string]int64{}
	for _, a := range s.admins {
		c, u, err := commandstatsUsec(ctx, a)
		if err != nil {
			return nil, nil, err
		}
		for k, v := range c {
			calls[k] += v
		}
		for k, v := range u {
			usec[k] += v
		}
	}
	return calls, usec, nil
}

func (s procServers) cpu(ctx context.Context) (float64, error) {
	var t float64
	for _, a := range s.admins {
		x, err := redisCPU(ctx, a)
		if err != nil {
			return 0, err
		}
		t += x
	}
	return t, nil
}

func runWorkers(srv procServers, n int, lib string, args ...string) (procRun, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ws := make([]*procWorker, 0, n)
	defer func() {
		for _, w := range ws {
			if w.cmd.ProcessState == nil {
				w.stop()
			}
		}
	}()
	for range n {
		w, err := startWorker(ctx, lib, append([]string{"-addr", srv.addr}, args...)...)
		if err != nil {
			return procRun{}, err
		}
		ws = append(ws, w)
	}
	stats0, usec0, err := srv.commandstats(ctx)
	if err != nil {
		return procRun{}, err
	}
	cpu0, err := srv.cpu(ctx)
	if err != nil {
		return procRun{}, err
	}
	r, pairs, err := startAndGather(ws)
	if err != nil {
		return procRun{}, err
	}
	cpu1, err := srv.cpu(ctx)
	if err != nil {
		return procRun{}, err
	}
	stats1, usec1, err := srv.commandstats(ctx)
	if err != nil {
		return procRun{}, err
	}
	p := float64(max(pairs, 1))
	r.calls = float64(statsDelta(stats0, stats1)-2*int64(len(srv.admins))) / p // less the INFO cpu and commandstats calls
	r.cpuUS = (cpu1 - cpu0) * 1e6 / p
	for _, c := range scriptCommands {
		r.scripts += float64(stats1[c]-stats0[c]) / p
		r.scriptUS += float64(usec1[c]-usec0[c]) / p
	}
	return r, nil
}

// startAndGather tells the workers ws to begin their timed phase and
// gathers their results: per-second rate, waits, counts, holds, failures,
// and the per-pair client CPU and allocations; it returns the pairs too.
func startAndGather(ws []*procWorker) (procRun, int64, error) {
	for _, w := range ws {
		if err := w.start(); err != nil {
			return procRun{}, 0, err
		}
	}
	var r procRun
	var pairs int64
	var secs, mallocs, clientUS float64
	for _, w := range ws {
		res, err := w.result()
		if err != nil {
			return procRun{}, 0, err
		}
		pairs += res.Pairs
		secs = max(secs, res.Secs)
		mallocs += res.Mallocs * float64(res.Pairs)
		clientUS += res.CPUUS * float64(res.Pairs)
		r.failed += float64(res.Failed)
		r.waitsUS = append(r.waitsUS, res.WaitsUS...)
		r.counts = append(r.counts, res.Pairs)
		r.holds = append(r.holds, res.Holds)
	}
	p := float64(max(pairs, 1))
	r.perSec = float64(pairs) / secs
	r.mallocs = mallocs / p
	r.clientUS = clientUS / p
	return r, pairs, nil
}

// interval is one hold: when it began and ended (wall clock, ns).
type interval struct{ a, b int64 }

// intervals returns the holds of every worker (each worker's list is
// start and end pairs), ordered by start.
func intervals(holds [][]int64) []interval {
	var all []interval
	for _, h := range holds {
		for i := 0; i+1 < len(h); i += 2 {
			all = append(all, interval{h[i], h[i+1]})
		}
	}
	slices.SortFunc(all, func(x, y interval) int { return int(min(max(x.a-y.a, -1), 1)) })
	return all
}

// overlaps counts the pairs of holds (from different workers' lists, or
// one's) whose intervals overlap.
func overlaps(holds [][]int64) int {
	n := 0
	var end int64 = math.MinInt64
	for _, x := range intervals(holds) {
		if x.a < end {
			n++
		}
		end = max(end, x.b)
	}
	return n
}

// handoffs returns, from the holds of every worker, the hand-off gaps in
// µs: from the end of a hold's section (before its release was sent) to
// the start of the next hold (when its holder learnt it held the lock). In
// a queue they are the critical path of the hot key: the release's round
// trip, the grant's message and the next holder's wake-up.
func handoffs(holds [][]int64) []int64 {
	all := intervals(holds)
	gaps := make([]int64, 0, len(all))
	for i := 1; i < len(all); i++ {
		gaps = append(gaps, (all[i].a-all[i-1].b)/1e3)
	}
	return gaps
}

// medianOf is the median of f over rs.
func medianOf(rs []procRun, f func(procRun) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return Median(xs)
}

func runLockProcSuite(env *Env) error {
	var srv procServers
	where := "a single Redis"
	if *procCluster {
		cl, err := testserver.NewRedisCluster()
		if err != nil {
			return err
		}
		defer cl.Close()
		srv.addr = strings.Join(cl.Addrs(), ",")
		for _, n := range cl.Nodes() {
			a := n.NewClient()
			defer a.Close()
			srv.admins = append(srv.admins, a)
		}
		where = fmt.Sprintf("a %d-master Redis Cluster (INFO summed over the masters)", len(cl.Nodes()))
	} else {
		s, err := env.Redis()
		if err != nil {
			return err
		}
		admin := s.NewClient()
		defer admin.Close()
		srv = procServers{addr: s.Addr(), admins: []redis.UniversalClient{admin}}
	}
	fmt.Fprintf(env.Out, "On %s.\n\n", where)
	if slices.Contains(*procPhases, "uncontended") {
		if err := procUncontended(env, srv); err != nil {
			return err
		}
	}
	if slices.Contains(*procPhases, "hot") {
		return procHotKey(env, srv)
	}
	return nil
}

// procCluster runs the lockproc suite on a Redis Cluster (-lockproc-cluster).
var procCluster = flag.Bool("lockproc-cluster", false, "lockproc: run on a 3-master Redis Cluster instead of a single Redis")

// procPhases are the lockproc suite's phases to run (-lockproc-phases).
var procPhases = func() *[]string {
	ps := []string{"uncontended", "hot"}
	flag.Func("lockproc-phases", "lockproc: comma-separated phases to run, uncontended and hot (default both)", func(v string) error {
		ps = nil
		for _, p := range strings.Split(v, ",") {
			if p != "uncontended" && p != "hot" {
				return fmt.Errorf("unknown phase %q", p)
			}
			ps = append(ps, p)
		}
		return nil
	})
	return &ps
}()

// procUncontended: one process per library, 32 goroutines each locking
// its own key.
func procUncontended(env *Env, srv procServers) error {
	libs := append([]string{"coordkit", "coordkit-evalsha", "coordkit-fair", "redislock", "redsync"}, extraNames()...)
	res := make(map[string][]procRun)
	for round := range env.Rounds {
		for i := range libs {
			name := libs[(i+round)%len(libs)] // a different library first each round
			r, err := runWorkers(srv, 1, name, "-g", "32", "-dur", env.Dur.String())
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			res[name] = append(res[name], r)
		}
	}
	med := func(name string, f func(procRun) float64) float64 { return medianOf(res[name], f) }
	base := med("redislock", func(r procRun) float64 { return r.perSec })
	t := Table{
		Title: fmt.Sprintf("(a) uncontended, each library in its own process: 32 goroutines, each lock+release of its own key (median of %d interleaved rounds of %v, a fresh process per round)", env.Rounds, env.Dur),
		Cols:  []string{"library", "pairs/s", "vs redislock", "Redis calls/pair (incl. in scripts)", "scripts/pair", "script µs/pair", "vs redislock", "Redis CPU µs/pair", "client CPU µs/pair", "allocs/pair (client)"},
	}
	baseUS := med("redislock", func(r procRun) float64 { return r.scriptUS })
	for _, name := range libs {
		ps := med(name, func(r procRun) float64 { return r.perSec })
		us := med(name, func(r procRun) float64 { return r.scriptUS })
		t.Row(name, ps, Ratio(ps, base),
			med(name, func(r procRun) float64 { return r.calls }),
			med(name, func(r procRun) float64 { return r.scripts }),
			us, Ratio(us, baseUS),
			med(name, func(r procRun) float64 { return r.cpuUS }),
			med(name, func(r procRun) float64 { return r.clientUS }),
			med(name, func(r procRun) float64 { return r.mallocs }))
	}
	t.Print(env.Out)
	return nil
}

// procHotKey: 16 processes of one library, one goroutine each, on one key.
func procHotKey(env *Env, srv procServers) error {
	const n = 16
	libs := append([]string{"coordkit", "coordkit-evalsha", "coordkit-fair", "redislock-1ms", "redsync-1ms"}, extraNames()...)
	res := make(map[string][]procRun)
	for round := range env.Rounds {
		for i := range libs {
			name := libs[(i+round)%len(libs)]
			key := lkKey("bench:ph")
			r, err := runWorkers(srv, n, name, "-g", "1", "-key", key, "-dur", env.Dur.String())
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if o := overlaps(r.holds); o != 0 {
				return fmt.Errorf("%s: mutual exclusion broken: %d overlapping holds across processes", name, o)
			}
			res[name] = append(res[name], r)
		}
	}
	med := func(name string, f func(procRun) float64) float64 { return medianOf(res[name], f) }
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
	hq := func(p float64) func(procRun) float64 {
		return func(r procRun) float64 { return pct(handoffs(r.holds), p) }
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
	best := 0.0
	for _, name := range libs {
		if !strings.HasPrefix(name, "coordkit") {
			best = max(best, med(name, func(r procRun) float64 { return r.perSec }))
		}
	}
	t := Table{
		Title: fmt.Sprintf("(b) hot key across processes: %d processes of one library, one goroutine each, on one key; holds checked for overlap across processes (median of %d interleaved rounds of %v)", n, env.Rounds, env.Dur),
		Cols:  []string{"library", "sections/s", "vs best peer", "wait p50 ms", "p99 ms", "max ms", "share spread", "Redis calls/section", "script µs/section", "Redis CPU µs/section", "failed obtains", "hand-off p50 µs", "p99 µs"},
	}
	for _, name := range libs {
		ps := med(name, func(r procRun) float64 { return r.perSec })
		t.Row(name, ps, Ratio(ps, best), med(name, q(0.5)), med(name, q(0.99)), med(name, q(1)),
			fmt.Sprintf("%.1f %%", 100*med(name, spread)),
			med(name, func(r procRun) float64 { return r.calls }),
			med(name, func(r procRun) float64 { return r.scriptUS }),
			med(name, func(r procRun) float64 { return r.cpuUS }),
			med(name, func(r procRun) float64 { return r.failed }),
			med(name, hq(0.5)), med(name, hq(0.99)))
	}
	t.Print(env.Out)
	fmt.Fprintln(env.Out, "Peers run with their best retry setting for this load (a 1 ms retry); coordkit with its defaults (queued waiters woken by Pub/Sub). Share spread: (max − min) / mean of the sections per process. Hand-off: from the end of one section to the start of the next (any holder): the release, the grant or retry, the next holder's wake-up.")
	fmt.Fprintln(env.Out)
	return nil
}
