package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/election"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
	"github.com/coordkit/coordkit/zklock"
)

// casScript is the protected resource's fenced write.
//
// KEYS[1] the last accepted token of the key, KEYS[2] the list of accepted
// writes ("hold token", in acceptance order).
// ARGV[1] the writer's token, ARGV[2] its hold id.
// Returns 1 if accepted (token not smaller than the last accepted), else 0.
//
//go:embed cas.lua
var casLua string

var casScript = redis.NewScript(casLua)

// clientConfig is what the orchestrator passes to a client process.
type clientConfig struct {
	backend  string
	addrs    []string // lock servers (through this slot's proxies)
	resource string   // the protected resource's Redis, never faulted
	keys     int
	workers  int
	ttl      time.Duration
	session  time.Duration // zklock session timeout
	out      string
	proc     string
	zkRoot   string
	seed     uint64
	owners   string                   // "call": a new owner per lock.Do; "goroutine": one per goroutine
	hold     time.Duration            // a section sleeps up to this between its read and its write
	reenter  float64                  // the fraction of sections that re-enter their key (worker.reenterSection)
	long     float64                  // the fraction of sections whose work lasts longFor unless the lease is lost (worker.work)
	longFor  time.Duration            // how long a long section's work lasts
	longKeys map[string]time.Duration // the long keys and their lease lives (longLoop)
	ctl      string                   // ids: the slot's control file (clock steps)
	idsOut   string                   // ids: the ID file
	rate     int                      // ids: IDs per second per part (0: no limit)
	idMax    int                      // ids: the highest worker ID (-1: the leasers' default); see ids.go's contention mode
}

func parseClient(args []string) (clientConfig, error) {
	var c clientConfig
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	fs.StringVar(&c.backend, "backend", "", "lock, fair, redlock, zk, etcd, ...")
	addrs := fs.String("addrs", "", "comma-separated lock server addresses")
	fs.StringVar(&c.resource, "resource", "", "protected resource Redis address")
	fs.IntVar(&c.keys, "keys", 3, "hot keys")
	fs.IntVar(&c.workers, "workers", 4, "goroutines")
	fs.DurationVar(&c.ttl, "ttl", time.Second, "lease TTL (Redis backends; etcd: the Client's lease)")
	fs.DurationVar(&c.session, "session", 2*time.Second, "ZooKeeper session timeout")
	fs.StringVar(&c.out, "out", "", "history file")
	fs.StringVar(&c.proc, "proc", "", "process name in the history")
	fs.StringVar(&c.zkRoot, "zkroot", "/chaos", "zklock root")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the client's key choices")
	fs.DurationVar(&c.hold, "hold", 10*time.Millisecond, "a section sleeps a random time up to this between its counter read and write")
	fs.StringVar(&c.owners, "owners", "call", "call (a new owner per lock.Do) or goroutine (one owner per goroutine, kept across calls)")
	fs.Float64Var(&c.reenter, "reenter", 0, "the fraction of critical sections that re-enter their key with a nested lock.Do")
	fs.Float64Var(&c.long, "long", 0, "the fraction of critical sections whose work lasts -long-for, ended early only by the lease's loss")
	fs.DurationVar(&c.longFor, "long-for", 0, "how long a long section's work lasts")
	longKeys := fs.String("long-keys", "", "the long keys and their lease lives, as L0=500ms,L1=3s: one more worker each (longLoop)")
	fs.StringVar(&c.ctl, "ctl", "", "ids: the slot's control file")
	fs.StringVar(&c.idsOut, "ids", "", "ids: the ID file")
	fs.IntVar(&c.rate, "rate", 0, "ids: IDs per second per part (0: no limit)")
	fs.IntVar(&c.idMax, "idmax", -1, "ids: the highest worker ID, for the contention mode (-1: the leasers' default)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if *addrs != "" {
		c.addrs = strings.Split(*addrs, ",")
	}
	var err error
	if c.longKeys, err = parseKeyLives(*longKeys); err != nil {
		return c, err
	}
	switch {
	case !validBackend(c.backend):
		return c, fmt.Errorf("chaos client: unknown backend %q", c.backend)
	case len(c.addrs) == 0, c.out == "", c.proc == "":
		return c, errors.New("chaos client: -addrs, -out and -proc are required")
	case hasResource(c.backend) && c.resource == "":
		return c, errors.New("chaos client: -resource is required")
	case c.owners != "call" && c.owners != "goroutine":
		return c, fmt.Errorf("chaos client: -owners %q: want call or goroutine", c.owners)
	case c.backend == "ids" && (c.ctl == "" || c.idsOut == "" || len(c.addrs) < 2 || c.rate < 0):
		return c, errors.New("chaos client: ids needs -ctl, -ids, ZooKeeper and Redis -addrs, -rate not negative")
	case c.backend == "bank" && len(c.addrs) != 2:
		return c, errors.New("chaos client: bank needs the MariaDB and PostgreSQL DSNs in -addrs")
	case c.backend == "sqlid" && (c.idsOut == "" || len(c.addrs) != 2 || c.rate < 0):
		return c, errors.New("chaos client: sqlid needs -ids, the MariaDB and PostgreSQL DSNs in -addrs, -rate not negative")
	case c.keys < 1 || c.workers < 1 || c.ttl <= 0 || c.session <= 0 || c.hold < 0:
		return c, errors.New("chaos client: -keys, -workers, -ttl and -session must be positive, -hold not negative")
	case !(c.long >= 0 && c.long <= 1) || c.longFor < 0:
		return c, fmt.Errorf("chaos client: -long %v, -long-for %v: want a fraction from 0 to 1 and a duration not negative", c.long, c.longFor)
	case !(c.reenter >= 0 && c.reenter <= 1):
		return c, fmt.Errorf("chaos client: -reenter %v: want a fraction from 0 to 1", c.reenter)
	}
	return c, nil
}

func validBackend(b string) bool {
	switch b {
	case "lock", "fair", "rw", "redlock", "zk", "etcd", "ids", "election", "sql", "sem", "sqlid", "bank":
		return true
	}
	return false
}

// runClient is a client process: workers goroutines run lock.Do on random
// hot keys until SIGTERM (or SIGINT), recording every step; for the ids
// backend, runIDs.
func runClient(args []string) error {
	cfg, err := parseClient(args)
	if err != nil {
		return err
	}
	rec, err := NewRecorder(cfg.out, cfg.proc)
	if err != nil {
		return err
	}
	defer rec.Close()
	rec.Record(Event{Op: opStart, Res: fmt.Sprintf("pid %d", os.Getpid())})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	stalls := make(chan struct{})
	defer func() { stop(); <-stalls }() // before rec.Close
	go func() {
		defer close(stalls)
		watchStalls(ctx, rec)
	}()
	switch cfg.backend {
	case "ids":
		return runIDs(ctx, cfg, rec)
	case "sqlid":
		return runSQLIDs(ctx, cfg, rec)
	case "bank":
		return runBank(ctx, cfg, rec)
	}

	var ctl *zkControl
	if cfg.backend == "zk" {
		ctl = &zkControl{}
	}
	locker, closeLocker, err := dialLocker(ctx, cfg, ctl, rec)
	if err != nil {
		return err
	}
	defer closeLocker()
	res := redis.NewClient(&redis.Options{Addr: cfg.resource})
	defer res.Close()

	var other lock.Locker // the third twin's Client (twinLoop)
	if hasTwins(cfg.backend) {
		var closeOther func()
		if other, closeOther, err = dialLocker(ctx, cfg, nil, rec); err != nil {
			return err
		}
		defer closeOther()
	}
	var wg sync.WaitGroup
	for g := range cfg.workers {
		wg.Add(1)
		go func() { // owned by runClient: ends when ctx ends
			defer wg.Done()
			w := &worker{cfg: cfg, g: g, rec: rec, locker: wrapLocker(locker), res: res, ctl: ctl,
				rnd: rand.New(rand.NewPCG(cfg.seed, uint64(g)))}
			if rw, ok := locker.(rwSides); ok {
				w.reader = wrapLocker(rw.read)
			}
			w.loop(ctx)
		}()
	}
	if hasTwins(cfg.backend) {
		var twins [3]*worker
		for i := range twins {
			g := cfg.workers + len(cfg.longKeys) + i
			l := locker
			if i == 2 {
				l = other
			}
			twins[i] = &worker{cfg: cfg, g: g, rec: rec, locker: wrapLocker(l), res: res,
				rnd: rand.New(rand.NewPCG(cfg.seed, uint64(g)))}
		}
		wg.Add(1)
		go func() { // owned by runClient: ends when ctx ends
			defer wg.Done()
			twinLoop(ctx, twins)
		}()
	}
	for i, key := range sortedKeys(cfg.longKeys) {
		g := cfg.workers + i
		wg.Add(1)
		go func() { // owned by runClient: ends when ctx ends
			defer wg.Done()
			w := &worker{cfg: cfg, g: g, rec: rec, locker: wrapLocker(locker), res: res,
				rnd: rand.New(rand.NewPCG(cfg.seed, uint64(g)))}
			w.longLoop(ctx, key, cfg.longKeys[key])
		}()
	}
	wg.Wait()
	return nil
}

// parseKeyLives parses "L0=500ms,L1=3s" ("" is none).
func parseKeyLives(s string) (map[string]time.Duration, error) {
	if s == "" {
		return nil, nil
	}
	m := map[string]time.Duration{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		d, err := time.ParseDuration(v)
		if !ok || k == "" || err != nil || d <= 0 {
			return nil, fmt.Errorf("chaos client: -long-keys %q: want key=duration[,key=duration]", s)
		}
		m[k] = d
	}
	return m, nil
}

// formatKeyLives is parseKeyLives' inverse.
func formatKeyLives(m map[string]time.Duration) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+m[k].String())
	}
	return strings.Join(parts, ",")
}

// dialLocker builds the backend's Locker over cfg.addrs; for zk, ctl
// watches the slot's control node on the Locker's connection (zkctl.go);
// for sql, rec records the pool audit's findings (sqlwl.go).
func dialLocker(ctx context.Context, cfg clientConfig, ctl *zkControl, rec *Recorder) (lock.Locker, func(), error) {
	switch cfg.backend {
	case "sql":
		return dialSQL(ctx, cfg, rec)
	case "sem":
		return dialSem(cfg.addrs[0])
	case "etcd":
		return dialEtcd(cfg)
	case "rw":
		rdb := redis.NewClient(&redis.Options{Addr: cfg.addrs[0]})
		rw := lock.NewRW(rdb)
		return rwSides{Locker: rw.Write(), read: rw.Read()}, func() { rw.Close(); rdb.Close() }, nil
	case "lock", "fair", "election":
		rdb := redis.NewClient(&redis.Options{Addr: cfg.addrs[0]})
		var opts []lock.ClientOption
		if cfg.backend == "fair" {
			opts = append(opts, lock.WithFair())
		}
		c := lock.New(rdb, opts...)
		return c, func() { c.Close(); rdb.Close() }, nil
	case "redlock":
		var masters []redis.UniversalClient
		for _, a := range cfg.addrs {
			masters = append(masters, redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true}))
		}
		closeAll := func() {
			for _, m := range masters {
				m.Close()
			}
		}
		c, err := redlock.New(masters)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		return c, func() { c.Close(); closeAll() }, nil
	case "zk":
		conn, events, err := zk.Connect(cfg.addrs, cfg.session, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
		if err != nil {
			return nil, nil, err
		}
		go func() { // drains the event channel; ends when conn is closed
			for range events {
			}
		}()
		c, err := zklock.New(conn, zklock.WithRoot(cfg.zkRoot), zklock.WithSessionTimeout(cfg.session))
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
		cctx, stopCtl := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { // owned by the close func below: ends when cctx ends
			defer close(done)
			ctl.watch(cctx, conn, zkControlPath(cfg.proc))
		}()
		return c, func() { stopCtl(); c.Close(); conn.Close(); <-done }, nil
	}
	return nil, nil, fmt.Errorf("chaos client: unknown backend %q", cfg.backend)
}

// rwSides is the rw backend's Locker: the write side of a lock.RW (what
// the long keys' workers and re-entries take), and its read side.
type rwSides struct {
	lock.Locker
	read lock.Locker
}

// readShare is the rw backend's share of sections on the read side.
const readShare = 0.5

// perLockTTL reports whether backend's locks take a TTL per acquisition
// (lock.WithTTL). zk's holds live by the session, etcd's by the Client's
// one lease (-ttl, etcdwl.go).
func perLockTTL(backend string) bool { return backend != "zk" && backend != "etcd" }

type quiet struct{}

func (quiet) Printf(string, ...any) {}

type worker struct {
	longFor time.Duration // a long key's worker (longLoop): how long its sections work
	cfg     clientConfig
	g       int
	rec     *Recorder
	locker  lock.Locker
	res     *redis.Client
	rnd     *rand.Rand
	n       int
	ctl     *zkControl  // zk: slow sections the nemesis asks for; nil otherwise
	reader  lock.Locker // rw: the read side (locker is the write side); nil otherwise
}

// shortTTLs reports whether a third of backend's hot-key holds have
// shortTTL (loop): the fair lock's and the semaphore's, whose waiters'
// call-ins the fairness checks judge.
func shortTTLs(backend string) bool { return backend == "fair" || backend == "sem" }

// shortTTL is the TTL of those holds: half the run's.
func shortTTL(ttl time.Duration) time.Duration { return ttl / 2 }

// obtainTimeout bounds each lock.Do's wait for the lock.
const obtainTimeout = 4 * time.Second

func (w *worker) loop(ctx context.Context) {
	if w.cfg.backend == "election" {
		w.electionLoop(ctx)
		return
	}
	owner := fmt.Sprintf("%s/%d-%s", w.cfg.proc, w.g, lock.NewOwner())
	var opts []lock.Option
	if perLockTTL(w.cfg.backend) {
		opts = append(opts, lock.WithTTL(w.cfg.ttl))
	}
	for ctx.Err() == nil {
		if w.cfg.owners == "call" {
			owner = fmt.Sprintf("%s/%d-%s", w.cfg.proc, w.g, lock.NewOwner())
		}
		key := chaosKey(w.cfg.backend, w.cfg.keys, w.rnd)
		w.n++
		hold := fmt.Sprintf("%s/%d/%d", w.cfg.proc, w.g, w.n)
		a := &attempt{inner: w.locker, rec: w.rec, g: w.g, hold: hold, owner: owner}
		// Drawn here, not in the section, so that the key choices stay the
		// same whatever the sections do.
		reenter := w.rnd.Float64() < w.cfg.reenter
		lopts := opts
		if shortTTLs(w.cfg.backend) && w.rnd.IntN(3) == 0 {
			// A third of the holds with half the TTL: a waiter whose
			// grant lasts less than the hold ahead of it has left
			// (lock/doc.go, semaphore/doc.go: it calls in every half of
			// its grant TTL, not only when that hold may expire; mutants
			// 39, 40).
			lopts = []lock.Option{lock.WithTTL(shortTTL(w.cfg.ttl))}
		}
		actx, cancel := context.WithTimeout(lock.WithOwner(ctx, owner), obtainTimeout)
		if w.reader != nil && w.rnd.Float64() < readShare {
			a.inner, a.read = w.reader, true
			lock.Do(actx, a, key, func(fctx context.Context) error { return w.readSection(fctx, a, key) }, opts...)
			cancel()
			a.wait()
			continue
		}
		lock.Do(actx, a, key, func(fctx context.Context) error {
			if w.cfg.backend == "sem" { // permits do not re-enter
				return w.semSection(fctx, a)
			}
			if err := w.section(fctx, a, key); err != nil || !reenter {
				return err
			}
			return w.reenterSection(fctx, a, key, lopts, 0, 0)
		}, lopts...)
		cancel()
		a.wait()
	}
}

// electionLoop is the election workload: every worker of every process
// campaigns for the leadership of one key (election.Campaign over the Redis
// lock, through the recording attempt, so that each term is a hold in the
// history), does a section as the leader (ended early if the term ends),
// then resigns and campaigns again. The lock checkers then judge terms as
// holds: no two leaders with overlapping terms unless the doc allows it and
// the deposed one was told, no stale fenced write, linearizable.
func (w *worker) electionLoop(ctx context.Context) {
	const key = "k0"
	id := fmt.Sprintf("%s/%d", w.cfg.proc, w.g)
	for ctx.Err() == nil {
		w.n++
		a := &attempt{inner: w.locker, rec: w.rec, g: w.g, hold: fmt.Sprintf("%s/%d/%d", w.cfg.proc, w.g, w.n)}
		e, err := election.New(a, key, election.WithIdentity(id), election.WithTTL(w.cfg.ttl))
		if err != nil {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, obtainTimeout)
		term, err := e.Campaign(cctx)
		cancel()
		if err != nil {
			a.wait()
			continue
		}
		tctx, stop := context.WithCancel(ctx)
		go func() { // ends with the term or the section
			select {
			case <-term.Done():
				stop()
			case <-tctx.Done():
			}
		}()
		w.section(tctx, a, key)
		stop()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		term.Resign(rctx)
		rcancel()
		a.wait()
	}
}

// section is the critical section: one fenced write, then a non-atomic
// read-modify-write of the key's counter, both on the resource.
func (w *worker) section(ctx context.Context, a *attempt, key string) error {
	if err := w.fencedWrite(ctx, a, key); err != nil {
		return err
	}
	v, err := w.readCounter(ctx, a, key)
	if err != nil {
		return err
	}
	// The work of the section: a fault that lands while it runs finds a holder.
	w.work(ctx, a)
	w.checkOverdue(a)
	w.rec.Record(Event{G: w.g, Op: opWriteInv, Key: key, Hold: a.hold, Val: v + 1})
	err = w.res.Set(ctx, "ctr:{"+key+"}", v+1, 0).Err()
	w.rec.Record(Event{G: w.g, Op: opWrite, Key: key, Hold: a.hold, Val: v + 1, Res: errKind(err)})
	return err
}

// readCounter reads key's counter on the resource (0 if never written)
// and records the read as a's.
func (w *worker) readCounter(ctx context.Context, a *attempt, key string) (int64, error) {
	v, err := w.res.Get(ctx, "ctr:{"+key+"}").Int64()
	if errors.Is(err, redis.Nil) {
		v, err = 0, nil
	}
	if err != nil {
		w.rec.Record(Event{G: w.g, Op: opRead, Key: key, Hold: a.hold, Res: errKind(err)})
		return 0, err
	}
	w.rec.Record(Event{G: w.g, Op: opRead, Key: key, Hold: a.hold, Val: v, Res: "ok"})
	return v, nil
}

// readSection is a section on the read side (rw): the key's counter read,
// the section's work, the counter read again. Readers write nothing: the
// checker holds read holds to exclusion from every write hold (check.go),
// and the two reads show what a writer let in meanwhile changed.
func (w *worker) readSection(ctx context.Context, a *attempt, key string) error {
	for i := range 2 {
		if _, err := w.readCounter(ctx, a, key); err != nil {
			return err
		}
		if i == 0 {
			w.work(ctx, a)
			w.checkOverdue(a)
		}
	}
	return ctx.Err()
}

// fencedWrite is the protected write of a's hold: a compare-and-set on the
// resource with a's lease's token.
func (w *worker) fencedWrite(ctx context.Context, a *attempt, key string) error {
	tok := a.lease.Token()
	w.rec.Record(Event{G: w.g, Op: opCASInv, Key: key, Hold: a.hold, Token: tok})
	n, err := casScript.Run(ctx, w.res, []string{"fence:{" + key + "}", "log:{" + key + "}"}, tok, a.hold).Int()
	res := "refused"
	switch {
	case err != nil:
		res = errKind(err)
	case n == 1:
		res = "ok"
	}
	w.rec.Record(Event{G: w.g, Op: opCAS, Key: key, Hold: a.hold, Token: tok, Res: res})
	return err
}

// reenterSection re-enters key from inside a's section, as the lock docs
// recommend for nested code: lock.Do with the section's ctx (which carries
// a's owner) on the same Locker. The inner level is recorded as a hold of
// its own, a.hold+"/r", whose invocation names a.hold as its outer hold;
// inside it the section makes the protected write with the inner lease's
// token. After the inner release, the outer section writes again with its
// own token. On every backend the inner lease must carry the outer hold's
// token (a re-entry), unless the outer hold was reported lost by the time
// the inner acquisition returned (check.go, reentry-token). A re-entry
// that asked for a longer TTL than the hold had (raised) raises it: the
// outer section's work checks from then on that the lease's deadline keeps
// pace with renewals of the raised TTL (checkRaised).
func (w *worker) reenterSection(ctx context.Context, a *attempt, key string, opts []lock.Option, after, raised time.Duration) error {
	in := &attempt{inner: w.locker, rec: w.rec, g: w.g, hold: a.hold + reentrySuffix, owner: a.owner, outer: a}
	err := lock.Do(ctx, in, key, func(ictx context.Context) error {
		return w.fencedWrite(ictx, in, key)
	}, opts...)
	in.wait()
	if err != nil {
		return err
	}
	if raised > 0 {
		a.raised = raised // the hold's TTL from now on (checkRaised)
	}
	if after > 0 {
		w.sleep(ctx, a, after)
	}
	return w.fencedWrite(ctx, a, key)
}

// longLoop is a long key's worker: lock.Do on key with the key's TTL (no
// TTL on zk and etcd: the session, the Client's lease), whose section works for longSection(life)
// unless the lease's loss ends it. The long workers of all processes contend for the
// key, so a holder that loses its lease to a fault is followed by another
// at once, and one that is not told of the loss (or is told late) overlaps
// it by more than the report bound; meanwhile the holder checks that its
// lease never believes past its own deadline (checkOverdue). Half the
// sections (on the backends with a lease TTL) re-enter the key halfway
// and work on for another life: half of them with a quarter of its TTL (a
// level never shortens the hold, lock/doc.go, so the outer hold must
// outlive it); on a key whose raised TTL keeps its renewals within the
// report bound (raisable), a quarter that way and half with raiseFactor
// times its TTL: the hold's TTL rises, and its renewals and deadline
// follow the raised TTL (checkRaised).
func (w *worker) longLoop(ctx context.Context, key string, life time.Duration) {
	w.longFor = life
	var opts, short, raise []lock.Option
	if perLockTTL(w.cfg.backend) {
		opts = append(opts, lock.WithTTL(life))
		short = append(short, lock.WithTTL(life/4))
		if raisable(life, w.cfg.ttl) {
			raise = append(raise, lock.WithTTL(raiseFactor*life))
		}
	}
	for ctx.Err() == nil {
		owner := fmt.Sprintf("%s/%d-%s", w.cfg.proc, w.g, lock.NewOwner())
		w.n++
		a := &attempt{inner: w.locker, rec: w.rec, g: w.g, hold: fmt.Sprintf("%s/%d/%d", w.cfg.proc, w.g, w.n), owner: owner}
		actx, cancel := context.WithTimeout(lock.WithOwner(ctx, owner), obtainTimeout)
		var inner []lock.Option // the re-entry's options; nil: none
		var raised time.Duration
		switch {
		case raise != nil: // a quarter none, a quarter short, half raised
			switch w.rnd.IntN(4) {
			case 1:
				inner = short
			case 2, 3:
				inner, raised = raise, raiseFactor*life
			}
		case short != nil && w.rnd.IntN(2) == 0:
			inner = short
		}
		lock.Do(actx, a, key, func(fctx context.Context) error {
			if err := w.section(fctx, a, key); err != nil {
				return err
			}
			if rest := longSection(life) - life; inner != nil {
				return w.reenterSection(fctx, a, key, inner, rest, raised)
			} else {
				w.sleep(fctx, a, rest)
			}
			return nil
		}, opts...)
		cancel()
		a.wait()
	}
}

// twinKey is the twins' key (twinLoop).
const twinKey = "T0"

// hasTwins reports whether backend's processes run the twins: Redlock,
// whose Client counts one owner's levels in process, so that two
// goroutines of one owner whose rounds race on the masters (each came
// first on some) must end up with one hold and one token, neither
// reported lost (mutant 28); and whose re-entry through another Client
// answers the hold's token from any quorum of masters (mutant 29).
func hasTwins(backend string) bool { return backend == "redlock" }

// twinLoop runs the twins of a process: each round, with one new owner,
// the first two TryObtain twinKey at once through the process's Client
// (TryObtain does not line up in process, so their rounds race on the
// masters), and the third through a Client of its own once the first's
// TryObtain returned (a re-entry on the masters, whose token must be at
// least the first's); each makes a fenced write, works 5-30 ms and
// releases; the next round begins when all are done. The twins of different
// processes contend for the key as different owners.
func twinLoop(ctx context.Context, twins [3]*worker) {
	var wg sync.WaitGroup
	for ctx.Err() == nil {
		owner := fmt.Sprintf("%s/t-%s", twins[0].cfg.proc, lock.NewOwner())
		start, first := make(chan struct{}), make(chan struct{})
		for i, w := range twins {
			wait, tried := start, chan struct{}(nil)
			switch i {
			case 0:
				tried = first
			case 2:
				wait = first
			}
			wg.Add(1)
			go func() { // owned by this round
				defer wg.Done()
				<-wait
				w.twinRound(ctx, owner, tried)
			}()
		}
		close(start)
		wg.Wait()
		sleepCtx(ctx, time.Duration(twins[0].rnd.IntN(20))*time.Millisecond)
	}
}

// twinRound is one twin's round: TryObtain (then tried, if not nil, is
// closed), a fenced write and 5-30 ms of work (ended by the lease's loss),
// then the release.
func (w *worker) twinRound(ctx context.Context, owner string, tried chan<- struct{}) {
	w.n++
	a := &attempt{inner: w.locker, rec: w.rec, g: w.g, hold: fmt.Sprintf("%s/%d/%d", w.cfg.proc, w.g, w.n), owner: owner}
	defer a.wait()
	tctx, cancel := context.WithTimeout(lock.WithOwner(ctx, owner), obtainTimeout)
	defer cancel()
	l, err := a.TryObtain(tctx, twinKey, lock.WithTTL(w.cfg.ttl))
	if tried != nil {
		close(tried)
	}
	if err != nil {
		return
	}
	sctx, scancel := context.WithCancel(tctx)
	stop := make(chan struct{})
	go func() { // owned by this round: ends at the loss or the section's end
		select {
		case <-l.Lost():
			scancel()
		case <-stop:
		}
	}()
	if w.fencedWrite(sctx, a, twinKey) == nil {
		w.sleep(sctx, a, time.Duration(5+w.rnd.IntN(25))*time.Millisecond)
	}
	close(stop)
	scancel()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), obtainTimeout)
	defer rcancel()
	l.Release(rctx)
}

// longSection is how long a long key's section works, for a key whose
// lease lives life: twice that, and at least life + 2 s, so that a holder
// isolated for a second or two past its deadline is still working when
// checkOverdue looks (2 × overdueSlack after the deadline).
func longSection(life time.Duration) time.Duration { return life + max(life, 2*time.Second) }

// overdueSlack is how long after a lease's own deadline (Until) its holder
// may still see Lost open: the watchdog's timer fires at the deadline and
// its goroutine may wait for a core.
const overdueSlack = 300 * time.Millisecond

// checkOverdue records an overdue event when a's lease still believes it
// is held overdueSlack after its own deadline and again overdueSlack of
// running time later: watchdog/doc.go promises that Lost closes at the
// deadline when no renewal extended it. A process stopped or starved
// meanwhile (the wait took twice as long) proves nothing and is skipped.
func (w *worker) checkOverdue(a *attempt) {
	l, ok := a.lease.(lock.LeaseStatus)
	if !ok || closed(a.lease.Lost()) {
		return
	}
	u := l.Until()
	a.noteUntil(u)
	if u.IsZero() || time.Since(u) < overdueSlack {
		return
	}
	t := time.Now()
	time.Sleep(overdueSlack)
	if time.Since(t) > 2*overdueSlack || closed(a.lease.Lost()) || !l.Until().Equal(u) {
		return
	}
	w.rec.Record(Event{G: w.g, Op: opOverdue, Key: a.key, Hold: a.hold, Token: a.lease.Token(), Val: time.Since(u).Milliseconds()})
}

// checkRaised records a thin event when a's hold, raised by a re-entry to
// a.raised, has less than half of that left before its own deadline with
// Lost open: lock/doc.go promises that the hold's renewals and deadline
// follow the raised TTL (a renewal every TTL/3 of the first level, each
// setting the raised TTL), so the deadline stays at least two thirds of
// it ahead while renewals get through. A fault on the holder's process or
// on a server, or a stall of the process, within a raised TTL before
// explains a thin deadline (checkRaisedHolds); nothing else does.
func (w *worker) checkRaised(a *attempt) {
	l, ok := a.lease.(lock.LeaseStatus)
	if a.raised <= 0 || !raiseChecked(w.cfg.backend) || !ok || closed(a.lease.Lost()) {
		return
	}
	u := l.Until()
	if left := time.Until(u); !u.IsZero() && left < a.raised/2 {
		w.rec.Record(Event{G: w.g, Op: opThin, Key: a.key, Hold: a.hold, Token: a.lease.Token(), Val: left.Milliseconds()})
	}
}

// noteDeadline records, on Redlock, a's lease's deadline (Until) as an
// until event: the renewal audit (audit.go) holds the masters' copies of
// the hold to it.
func (w *worker) noteDeadline(a *attempt) {
	l, ok := a.lease.(lock.LeaseStatus)
	if w.cfg.backend != "redlock" || !ok || closed(a.lease.Lost()) {
		return
	}
	if u := l.Until(); !u.IsZero() {
		w.rec.Record(Event{G: w.g, Op: opUntil, Key: a.key, Hold: a.hold, Token: a.lease.Token(), Until: monoNow() + int64(time.Until(u))})
	}
}

// raiseChecked reports whether backend's holds promise that a re-entry's
// longer TTL raises the hold's renewals and deadline (checkRaised): the
// Redis lock's, with one watchdog per hold (lock/doc.go). The RW lock
// renews each lease on its own TTL (only the key's expiry never moves
// earlier), and Redlock's re-entry stays in the process: its raised TTL
// reaches the masters, and its deadline, with the next renewal, up to
// TTL/3 later (seen: one reading 384-389 ms ahead of 1 s, with no fault).
func raiseChecked(backend string) bool { return backend == "lock" || backend == "fair" }

// raiseFactor is how many times its key's TTL a raising re-entry asks for
// (longLoop).
const raiseFactor = 2

// raisable reports whether a long key of lease life may be re-entered with
// raiseFactor times it, for a run whose TTL is ttl: the hold's renewals
// then run every raised TTL / 3 at most, which must stay within the report
// bound the checker gives the key's losses (reportBound: life/3 +
// reportSlack), so only keys whose raised TTL is at most the run's TTL.
func raisable(life, ttl time.Duration) bool { return raiseFactor*life <= ttl }

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sleep works for d, ended early by ctx (the lease's loss), checking a's
// lease every 100 ms (checkOverdue).
func (w *worker) sleep(ctx context.Context, a *attempt, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-tick.C:
			w.checkOverdue(a)
			w.checkRaised(a)
			w.noteDeadline(a)
		}
	}
}

// reentrySuffix makes the hold id of a re-entry from its outer hold's.
const reentrySuffix = "/r"

// attempt is the Locker that one lock.Do call sees: it records the
// acquisition, and its lease records the loss and the release.
type attempt struct {
	inner lock.Locker
	rec   *Recorder
	g     int
	hold  string
	owner string
	outer *attempt // a re-entry's outer hold (reenterSection), or nil
	read  bool     // rw: a read-side hold (its invocation says so: Mode)
	// raised: the TTL a re-entry raised this hold to (reenterSection), or
	// 0; set before the section's work that checkRaised watches.
	raised time.Duration
	lease  lock.Lease // set by Obtain
	key    string
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	lostMu   sync.Mutex // protects lostSeen; held while the loss is recorded
	lostSeen bool
	// until is the lease's own deadline (LeaseStatus.Until, as
	// CLOCK_MONOTONIC ns) when last read: at the acquisition, and every
	// 100 ms of a section's work (checkOverdue). The loss's event carries
	// it (Event.Until).
	until atomic.Int64
}

func (a *attempt) Obtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return a.obtain(ctx, key, a.inner.Obtain, opts)
}

// TryObtain is Obtain through the Locker's TryObtain (the twins, twinRound).
func (a *attempt) TryObtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return a.obtain(ctx, key, a.inner.TryObtain, opts)
}

func (a *attempt) obtain(ctx context.Context, key string, obtain func(context.Context, string, ...lock.Option) (lock.Lease, error), opts []lock.Option) (lock.Lease, error) {
	var outer string
	if a.outer != nil {
		outer = a.outer.hold
	}
	if a.owner == "" { // set by the caller's ctx (an election's campaign)
		a.owner, _ = lock.OwnerFrom(ctx)
	}
	var mode string
	if a.read {
		mode = modeRead
	}
	a.rec.Record(Event{G: a.g, Op: opInvoke, Key: key, Hold: a.hold, Owner: a.owner, Outer: outer, Mode: mode})
	l, err := obtain(ctx, key, opts...)
	if err != nil {
		a.rec.Record(Event{G: a.g, Op: opFail, Key: key, Hold: a.hold, Res: errKind(err,
			errName{context.DeadlineExceeded, "timeout"},
			errName{lock.ErrNotObtained, "notobtained"})})
		return nil, err
	}
	if a.outer != nil {
		// A loss of the outer hold that this acquisition made known (the
		// lock docs: "at once") is recorded before the acquisition.
		a.outer.pollLost()
	}
	late := a.lateAtReturn(l)
	a.rec.Record(Event{G: a.g, Op: opAcquired, Key: key, Hold: a.hold, Token: l.Token(), Owner: a.owner, Late: late, Until: a.until.Load()})
	a.lease = l
	a.key = key
	a.done = make(chan struct{})
	a.wg.Add(1)
	go func() { // owned by the attempt: ends at the loss or when stopWatch is called
		defer a.wg.Done()
		select {
		case <-l.Lost():
			a.recordLost()
		case <-a.done:
		}
	}()
	return &recLease{Lease: l, a: a}, nil
}

// lateAtReturn is Event.Late for a lease Obtain has just returned.
func (a *attempt) lateAtReturn(l lock.Lease) int64 {
	ls, ok := l.(lock.LeaseStatus)
	if !ok {
		return 0
	}
	now := time.Now()
	u := ls.Until()
	a.noteUntil(u)
	switch {
	case u.IsZero():
		return -1
	case now.After(u):
		return max(now.Sub(u).Milliseconds(), 1)
	}
	return 0
}

// noteUntil keeps u, a reading of the lease's Until, as a.until.
func (a *attempt) noteUntil(u time.Time) {
	if !u.IsZero() {
		a.until.Store(monoNow() + int64(time.Until(u)))
	}
}

// recordLost records the loss once; a second call returns after the first
// has recorded it.
func (a *attempt) recordLost() {
	a.lostMu.Lock()
	defer a.lostMu.Unlock()
	if !a.lostSeen {
		a.lostSeen = true
		a.rec.Record(Event{G: a.g, Op: opLost, Key: a.key, Hold: a.hold, Token: a.lease.Token(), Until: a.until.Load()})
	}
}

// pollLost records the loss if the lease's Lost is closed.
func (a *attempt) pollLost() {
	select {
	case <-a.lease.Lost():
		a.recordLost()
	default:
	}
}

// stopWatch stops the loss watcher and records a loss it has not recorded
// yet (a lease's Lost may close during its release).
func (a *attempt) stopWatch() {
	if a.done == nil {
		return
	}
	a.once.Do(func() { close(a.done) })
	a.wg.Wait()
	a.pollLost()
}

// wait stops the loss watcher after lock.Do has returned.
func (a *attempt) wait() { a.stopWatch() }

type recLease struct {
	lock.Lease
	a *attempt
}

func (l *recLease) Release(ctx context.Context) error {
	l.a.stopWatch() // a loss before the release is recorded before it
	l.a.rec.Record(Event{G: l.a.g, Op: opRelease, Key: l.Key(), Hold: l.a.hold, Token: l.Token()})
	err := l.Lease.Release(ctx)
	l.a.rec.Record(Event{G: l.a.g, Op: opReleased, Key: l.Key(), Hold: l.a.hold, Token: l.Token(),
		Res: errKind(err, errName{lock.ErrNotHeld, "notheld"})})
	return err
}

// stallMin is the shortest gap of a 10 ms ticker that watchStalls records.
const stallMin = 150 * time.Millisecond

// watchStalls records an opStall event whenever the process went stallMin
// or more without running a 10 ms ticker's goroutine, until ctx ends: the
// host's load (or a SIGSTOP) kept it from running, and with it its leases'
// renewals. The checker counts such a stall as a pause of the process
// (check.go, selfStalls), as it does the nemesis's client pauses: a lease
// whose renewals could not run may expire, as its doc says.
func watchStalls(ctx context.Context, rec *Recorder) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	last := monoNow()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := monoNow()
		if gap := time.Duration(now - last); gap >= stallMin {
			rec.Record(Event{Op: opStall, Val: gap.Milliseconds()})
		}
		last = now
	}
}
