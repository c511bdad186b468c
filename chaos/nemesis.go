package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
)

// Fault is one injected fault, as faults.jsonl records it. Start and End
// are CLOCK_MONOTONIC nanoseconds, like the histories' Mono: End is when the
// fault was healed (for a kill: when the process had exited).
type Fault struct {
	Kind   string `json:"kind"`
	Target string `json:"target"` // a client process, a server, or several
	Proc   string `json:"proc,omitempty"`
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	Wall   int64  `json:"wall"`
	Detail string `json:"detail,omitempty"` // clock-step: the step and how long it lasted
	Err    string `json:"err,omitempty"`
	// Rounds: etcd-key-delete's deletions (deleteHoldKeys).
	Rounds []DeleteRound `json:"rounds,omitempty"`
}

// DeleteRound is one deletion of etcd-key-delete: when its request was
// sent and answered (CLOCK_MONOTONIC), and per key the token (create
// revision) of the first hold key it removed, the holder's if the key was
// held. Unknown: the request failed and could not be settled
// (deleteHoldKeys), so what it deleted, if anything, and when, is not
// known: End is then the end of time.
type DeleteRound struct {
	Start   int64            `json:"start"`
	End     int64            `json:"end"`
	Wiped   map[string]int64 `json:"wiped,omitempty"`
	Unknown bool             `json:"unknown,omitempty"`
}

type faultLog struct {
	mu sync.Mutex // protects f
	f  *os.File
}

func newFaultLog(path string) (*faultLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &faultLog{f: f}, nil
}

func (l *faultLog) add(f Fault) {
	b, _ := json.Marshal(f) // Fault has no field that can fail to marshal
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Write(append(b, '\n'))
}

func (l *faultLog) Close() { l.f.Close() }

func readFaults(path string) ([]Fault, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var fs []Fault
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var f Fault
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if f.Kind == fEtcdKeyDelete && f.Err == "" && len(f.Rounds) == 0 {
			// Recorded before its rounds were (3c889b3): the checker
			// would excuse nothing it deleted.
			return nil, fmt.Errorf("%s: an etcd-key-delete without its rounds (recorded by an older chaos); run it again", path)
		}
		fs = append(fs, f)
	}
	return fs, nil
}

// Fault kinds. Which backend gets which is in faultKinds.
const (
	fClientKill     = "client-kill"     // SIGKILL a client process; a new one replaces it
	fClientPause    = "client-pause"    // SIGSTOP a client past its TTL / session, then SIGCONT
	fProxyCut       = "proxy-cut"       // close a client's connections to the servers
	fProxyBlackhole = "proxy-blackhole" // a client's connections stall, then pass again
	// fReplyLost: for a while, over and over, a client's connections carry
	// its requests to the servers but hold the replies, and are cut 15 ms
	// later: the servers ran the commands, the client never heard, and
	// go-redis sends each one again on a new connection (MaxRetries 3 by
	// default). Every call of the Redis locks must be safe to resend
	// (lock/doc.go): none may answer otherwise the second time. In the
	// long profile (runConfig.replyFaults); by -kinds in either.
	fReplyLost = "reply-lost"
	// fReplyLate: a client's connections carry its requests to the
	// servers but hold every reply for 1.4-2.6 TTL, then deliver them (under
	// go-redis's 3 s read timeout, so nothing is resent): the servers
	// granted what the client asked for, and the answer comes after the
	// grant's TTL ran out there, while another client may hold what it
	// granted. No acquisition may return a hold so answered (lock/doc.go:
	// a grant is judged from when it was sent), and the holder's own
	// renewals go unanswered, so its lease runs out on its own clock, not
	// later than on the server's. Long profile, as fReplyLost.
	fReplyLate = "reply-late"
	// fHostStall is no fault the nemesis injects: the orchestrator, whose
	// goroutines carry every client's connections to the servers (the
	// proxies) and which runs the nemesis, ran nothing for stallMin or
	// more (the host's load). Every proxy held its traffic meanwhile, as
	// a proxy-blackhole of every client would: renewals did not get
	// through, a lease could run out, a request could reach its server
	// late. watchHostStalls records it in faults.jsonl (Target
	// "orchestrator", no Proc: it touched every process); the checks
	// that ask whether a fault on a server or a process explains an
	// outcome count it, and none counts it as freeing a key for another
	// holder (it is in no backend's documented faults).
	fHostStall       = "host-stall"
	fServerPause     = "server-pause"      // SIGSTOP a server, then SIGCONT
	fRestartKeep     = "restart-keep-data" // kill -9 a Redis after SAVE, restart with its data
	fRestartNoData   = "restart-no-data"   // kill -9 a Redis, restart empty
	fRestartSnapshot = "restart-snapshot"  // kill -9 a Redis, restart from an older snapshot
	fMinorityRestart = "minority-restart"  // Redlock: 2 of 5 masters down, restart empty
	fMajorityRestart = "majority-restart"  // Redlock: 3 of 5 masters down briefly, restart empty
	fZKExpire        = "zk-session-expire" // black-hole a client past its session timeout
	fZKNodeKill      = "zk-node-kill"      // kill -9 a ZooKeeper node, restart it
	fClockStep       = "clock-step"        // ids: step a client's clock back or forward, then back to true
)

// replyLateMax bounds a reply-late fault under go-redis's default read
// timeout (3 s), with room for a loaded host.
const replyLateMax = 2600 * time.Millisecond

// fLockDelete is lock-delete: the lock hashes of the hot keys are deleted
// while held (deleteLocks), as an eviction, a manual DEL or ForceRelease
// deletes them.
const fLockDelete = "lock-delete"

// fPubSubKill is pubsub-kill: for a while, every pubSubKillEvery, the
// nemesis runs CLIENT KILL TYPE pubsub on the Redis: every client's
// Pub/Sub connection is dropped, go-redis subscribes again, and a message
// published meanwhile is lost, while the command connections stay. The
// grant of a queued waiter is one such message: a waiter that hears none
// calls in at least every half of its grant TTL and takes the grant, so
// it keeps its turn (lock/doc.go, Grants; semaphore/doc.go). No process
// is touched and no key freed: checkFairness and checkSemFairness count it
// as no excuse (mutants 39, 40). The fair and sem backends draw it.
const fPubSubKill = "pubsub-kill"

// pubSubKillEvery is how often a pubsub-kill step drops the Pub/Sub
// connections: go-redis dials and subscribes again within a few ms (the
// fault's Detail says how many messages a probe subscriber heard).
const pubSubKillEvery = 2 * time.Millisecond

// fZKNotifyPart is zk-notify-partition: a slow holder's server stops
// hearing it, a watch notification reaches it, then a black hole past its
// session (notifyPartition).
const fZKNotifyPart = "zk-notify-partition"

func faultKinds(backend string) []string {
	common := []string{fClientKill, fClientPause, fProxyCut, fProxyBlackhole, fServerPause}
	switch backend {
	case "fair":
		return append(common, fRestartKeep, fRestartNoData, fRestartSnapshot, fLockDelete, fPubSubKill, fReplyLost, fReplyLate)
	case "lock", "rw", "election":
		return append(common, fRestartKeep, fRestartNoData, fRestartSnapshot, fLockDelete, fReplyLost, fReplyLate)
	case "redlock":
		return append(common, fRestartSnapshot, fMinorityRestart, fMajorityRestart, fLockDelete, fReplyLost, fReplyLate)
	case "zk":
		return append(common, fZKExpire, fZKNodeKill, fZKNotifyPart)
	case "etcd":
		return append(common, fEtcdMemberKill, fEtcdLeaderKill, fEtcdLeaderPause, fEtcdPartition, fEtcdKeyDelete)
	case "ids":
		return []string{fClientKill, fClientPause, fClockStep, fRestartKeep, fRestartNoData, fRestartSnapshot,
			fZKExpire, fZKNodeKill}
	case "sem":
		return append(common, fRestartKeep, fRestartNoData, fRestartSnapshot, fPubSubKill, fReplyLate)
	case "sql":
		return append(common, fSQLRestart, fSQLRowLock, fSQLSessionKill)
	case "sqlid":
		return append(common, fSQLRestart, fSQLIDRollback)
	case "bank":
		return append(common, fSQLRestart)
	}
	return nil
}

// faultKinds returns the kinds the nemesis of c draws from: c.kinds if set
// (-kinds), else every kind of c.backend.
func (c runConfig) faultKinds() []string {
	if c.kinds != nil {
		return c.kinds
	}
	ks := faultKinds(c.backend)
	if !c.replyFaults {
		ks = slices.DeleteFunc(ks, replyFault)
	}
	return ks
}

// step is one planned fault: drawn from the seed before the run, so that the
// same seed gives the same schedule.
type step struct {
	Gap    time.Duration // wait before the fault
	Kind   string
	Target int           // slot or server index
	Dur    time.Duration // how long the fault lasts
	Step   time.Duration // clock-step: the step, negative for back
	// With: the next step starts while this one still runs (after the
	// next step's gap), so that the two faults act at once (combine).
	With bool
}

// replyFault reports whether kind loses or delays replies: the long
// profile's (runConfig.replyFaults).
func replyFault(kind string) bool { return kind == fReplyLost || kind == fReplyLate }

// clientFault reports whether kind acts on one client process (the others
// act on servers).
func clientFault(kind string) bool {
	switch kind {
	case fClientKill, fClientPause, fProxyCut, fProxyBlackhole, fReplyLost, fReplyLate, fZKExpire, fZKNotifyPart, fClockStep:
		return true
	}
	return false
}

// combineRate is the fraction of steps that run alongside the next one.
const combineRate = 0.25

// combine marks steps that run alongside the next one (With), drawn from a
// stream of their own so that the steps themselves stay what the seed drew
// before: a client fault with a server fault, or two client faults on
// different processes (a process killed and paused at once, or a server
// restarted while paused, would only test the nemesis). Jepsen combines
// faults; some promises break only so (a worker ID handed over while the
// new holder's clock steps back).
func combine(seed uint64, steps []step) {
	rnd := rand.New(rand.NewPCG(seed, 0x636f6d62))
	for i := 0; i+1 < len(steps); i++ {
		a, b := steps[i], steps[i+1]
		ok := clientFault(a.Kind) != clientFault(b.Kind) || clientFault(a.Kind) && a.Target != b.Target
		if rnd.Float64() < combineRate && ok {
			steps[i].With = true
			i++ // at most two at once
		}
	}
}

// plan draws n steps: every kind of the backend once (in a seeded order),
// then kinds at random.
func plan(cfg runConfig) []step {
	rnd := rand.New(rand.NewPCG(cfg.seed, 0x6e656d65))
	kinds := cfg.faultKinds()
	order := append([]string(nil), kinds...)
	rnd.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var steps []step
	steppedBack := false // a clock-step back within the tolerance drawn
	for i := range cfg.faults {
		k := kinds[rnd.IntN(len(kinds))]
		if i < len(order) {
			k = order[i]
		}
		s := step{Kind: k, Gap: cfg.gapMin + time.Duration(rnd.Int64N(int64(cfg.gapMax-cfg.gapMin)+1))}
		life := cfg.life()
		span := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rnd.Int64N(int64(hi-lo)+1)) }
		switch k {
		case fClientKill, fProxyCut:
			s.Target = rnd.IntN(cfg.procs)
		case fClientPause:
			s.Target, s.Dur = rnd.IntN(cfg.procs), span(life*3/2, life*3)
			if cfg.backend == "ids" {
				// Past the Redis TTL and the session either way; shorter,
				// so the short profile's window holds every kind.
				s.Dur = span(life*5/4, life*2)
			}
		case fProxyBlackhole:
			s.Target, s.Dur = rnd.IntN(cfg.procs), span(life/4, life*2)
			if cfg.backend == "sql" {
				// The same draw mapped onto 0.9-2 TTL: past the 2/3 TTL a
				// lease-table row has left after a renewal, so that a row
				// taken before its expiry shows (applySQL waits for a long
				// lease-table section).
				s.Dur = life*9/10 + (s.Dur-life/4)*22/35
			}
		case fReplyLost:
			s.Target, s.Dur = rnd.IntN(cfg.procs), span(300*time.Millisecond, 1500*time.Millisecond)
		case fReplyLate:
			// Past the TTL, and under go-redis's default read timeout (3 s),
			// after which it would resend on a new connection.
			s.Target, s.Dur = rnd.IntN(cfg.procs), min(span(life*7/5, life*13/5), replyLateMax)
		case fZKExpire:
			s.Target = rnd.IntN(cfg.procs)
		case fZKNotifyPart:
			// How long the server hears nothing from the holder before the
			// notification: under go-zookeeper's 2T/3 receive timeout (the
			// connection must still be up to receive it), and long enough
			// that a loss counted from the last packet received comes more
			// than reportSlack after the server expired the session.
			s.Target, s.Dur = rnd.IntN(cfg.procs), span(cfg.session/2, cfg.session*3/5)
		case fServerPause:
			s.Target, s.Dur = rnd.IntN(serverCount(cfg.backend)), span(300*time.Millisecond, life*2)
		case fEtcdMemberKill, fEtcdLeaderKill:
			s.Target, s.Dur = rnd.IntN(serverCount(cfg.backend)), span(100*time.Millisecond, 1500*time.Millisecond)
		case fEtcdKeyDelete: // the number of rounds, 1-3 (deleteHoldKeys)
			s.Target = rnd.IntN(3)
		case fEtcdLeaderPause:
			// Past an election (500 ms, testserver.EtcdElectionTimeout),
			// up to twice the lease: the old leader, resumed, must not
			// act on what it believed before.
			s.Dur = span(time.Second, life*2)
		case fEtcdPartition:
			// The same span, so that the leases of the clients that
			// reach only the partitioned member run out meanwhile.
			s.Target, s.Dur = rnd.IntN(2*serverCount(cfg.backend)), span(time.Second, life*2)
		case fRestartKeep, fRestartNoData, fZKNodeKill:
			s.Target, s.Dur = rnd.IntN(serverCount(cfg.backend)), span(100*time.Millisecond, 1500*time.Millisecond)
		case fRestartSnapshot:
			s.Target, s.Dur = rnd.IntN(serverCount(cfg.backend)), span(500*time.Millisecond, 2*time.Second)
		case fMinorityRestart:
			s.Target, s.Dur = rnd.IntN(5), span(500*time.Millisecond, 2*time.Second)
		case fMajorityRestart:
			s.Target, s.Dur = rnd.IntN(5), span(200*time.Millisecond, 1*time.Second)
		case fLockDelete:
			s.Target, s.Dur = rnd.IntN(serverCount(cfg.backend)), span(200*time.Millisecond, 1*time.Second)
		case fPubSubKill:
			// Past a grant TTL (the lease's), so that a waiter granted
			// during it hears nothing for longer than its grant lasts.
			s.Target, s.Dur = rnd.IntN(serverCount(cfg.backend)), span(life, 3*life)
		case fSQLRestart:
			s.Target = rnd.IntN(serverCount(cfg.backend))
		case fSQLRowLock, fSQLSessionKill: // a server and one of its session keys
			s.Target, s.Dur = rnd.IntN(2*cfg.keys), span(1200*time.Millisecond, 2500*time.Millisecond)
		case fSQLIDRollback:
			s.Target, s.Dur = rnd.IntN(serverCount(cfg.backend)), span(500*time.Millisecond, 2*time.Second)
		case fClockStep:
			// 1 ms to 1 s, log-uniform (steps within the generators'
			// 5 ms tolerance as well as far beyond it); back twice as
			// often as forward.
			s.Target, s.Dur = rnd.IntN(cfg.procs), span(300*time.Millisecond, 1500*time.Millisecond)
			s.Step = time.Duration(float64(time.Millisecond) * math.Pow(1000, rnd.Float64())).Round(time.Microsecond)
			if rnd.IntN(3) > 0 {
				s.Step = -s.Step
			}
			if !steppedBack {
				// The first step of every schedule goes back by 1 to 4 ms,
				// within the generators' 5 ms tolerance, where they keep
				// issuing from their last tick (idgen/doc.go): a short run
				// draws one or two clock steps, and a seed whose only step
				// went forward never tried that path.
				s.Step = -time.Duration(1000+rnd.Int64N(3000)) * time.Microsecond
				steppedBack = true
			}
		}
		steps = append(steps, s)
	}
	combine(cfg.seed, steps)
	return steps
}

func serverCount(backend string) int {
	switch backend {
	case "redlock":
		return 5
	case "zk", "ids", "etcd":
		return 3 // ids: ZooKeeper nodes; its one Redis takes any index
	case "sql", "sqlid", "bank":
		return 2 // MariaDB, PostgreSQL
	}
	return 1
}

// runNemesis applies steps until they are done or ctx ends; every fault
// is healed before the next one starts. It returns the faults applied.
func (e *env) runNemesis(ctx context.Context, steps []step) map[string]int {
	count := map[string]int{}
	var mu sync.Mutex // protects count
	var wg sync.WaitGroup
	defer wg.Wait()
	run := func(s step) {
		f := e.apply(ctx, s)
		e.faults.add(f)
		mu.Lock()
		defer mu.Unlock()
		if f.Err == "" {
			count[f.Kind]++
		} else {
			fmt.Fprintf(os.Stderr, "chaos: %s %s: %s\n", f.Kind, f.Target, f.Err)
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for _, s := range steps {
		timer.Reset(s.Gap)
		select {
		case <-ctx.Done():
			wg.Wait()
			return count
		case <-timer.C:
		}
		if s.With { // the next step starts while this one runs
			wg.Add(1)
			go func() { // owned by runNemesis: waited for before it returns
				defer wg.Done()
				run(s)
			}()
			continue
		}
		run(s)
		wg.Wait() // a combined pair ends before the next step's gap begins
	}
	wg.Wait()
	return count
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// apply injects one fault and heals it.
func (e *env) apply(ctx context.Context, s step) (f Fault) {
	f = Fault{Kind: s.Kind, Start: monoNow(), Wall: time.Now().UnixNano()}
	var err error
	defer func() {
		if f.End == 0 {
			f.End = monoNow()
		}
		if err != nil {
			f.Err = err.Error()
		}
	}()
	client := func() *slot { return e.slots[s.Target%len(e.slots)] }
	if e.sql != nil {
		if ok, serr := e.applySQL(ctx, s, &f); ok {
			err = serr
			return f
		}
	}
	if e.etcd != nil {
		if ok, eerr := e.applyEtcd(ctx, s, &f); ok {
			err = eerr
			return f
		}
	}
	switch s.Kind {
	case fClientKill:
		sl := client()
		_, _, f.Proc = sl.current()
		f.Target = f.Proc
		sl.kill()
		f.End = monoNow()
		err = e.spawn(sl)
		return f
	case fClientPause:
		sl := client()
		_, _, f.Proc = sl.current()
		f.Target = f.Proc
		// The paused holder: wait (up to a second) until the process
		// holds a lock, so the pause lands inside a critical section.
		// (A process of the ids backend holds its worker IDs throughout.)
		// (A process of the bank backend is always inside transfers.)
		if hasResource(e.cfg.backend) {
			e.waitHolding(ctx, f.Proc, time.Second)
		}
		if err = sl.signal(syscall.SIGSTOP); err != nil {
			return f
		}
		sleepCtx(ctx, s.Dur)
		err = sl.signal(syscall.SIGCONT)
	case fProxyCut:
		sl := client()
		_, _, f.Proc = sl.current()
		f.Target = f.Proc
		for _, p := range sl.proxies {
			p.Cut()
		}
	case fProxyBlackhole:
		sl := client()
		_, _, f.Proc = sl.current()
		f.Target = f.Proc
		for _, p := range sl.proxies {
			p.SetBlackhole(true)
		}
		sleepCtx(ctx, s.Dur)
		for _, p := range sl.proxies {
			p.SetBlackhole(false)
		}
	case fReplyLost:
		sl := client()
		_, _, f.Proc = sl.current()
		f.Target = f.Proc
		cycles := 0
		for end := time.Now().Add(s.Dur); time.Now().Before(end) && ctx.Err() == nil; cycles++ {
			for _, p := range sl.proxies {
				p.SetBlackholeToClient(true)
			}
			sleepCtx(ctx, 15*time.Millisecond) // requests reach the servers and run
			for _, p := range sl.proxies {
				p.Cut() // the held replies go with the connections
				p.SetBlackholeToClient(false)
			}
			sleepCtx(ctx, 35*time.Millisecond) // go-redis resends on new connections
		}
		f.Detail = fmt.Sprintf("%d cycles of replies held 15 ms then cut", cycles)
	case fReplyLate:
		sl := client()
		_, _, f.Proc = sl.current()
		f.Target = f.Proc
		for _, p := range sl.proxies {
			p.SetBlackholeToClient(true)
		}
		sleepCtx(ctx, s.Dur)
		for _, p := range sl.proxies {
			p.SetBlackholeToClient(false) // the held replies pass on
		}
		f.Detail = fmt.Sprintf("replies held %v, then delivered", s.Dur.Round(time.Millisecond))
	case fZKExpire:
		sl := client()
		_, _, f.Proc = sl.current()
		f.Target = f.Proc
		zkp := sl.proxies[:e.nzk] // ids: its Redis stays reachable
		for _, p := range zkp {
			p.SetBlackhole(true)
		}
		// The server expires a session within its timeout plus a tick or two.
		sleepCtx(ctx, e.cfg.session+3*testserver.ZKTick)
		for _, p := range zkp {
			p.Cut()
			p.SetBlackhole(false)
		}
	case fZKNotifyPart:
		sl := client()
		_, _, f.Proc = sl.current()
		f.Target = f.Proc
		f.Detail, err = e.notifyPartition(ctx, sl, f.Proc, s.Dur)
	case fClockStep:
		sl := client()
		_, _, f.Proc = sl.current()
		f.Target = f.Proc
		f.Detail = fmt.Sprintf("%v for %v", s.Step, s.Dur)
		if err = e.setClock(sl, int64(s.Step)); err != nil {
			return f
		}
		sleepCtx(ctx, s.Dur)
		err = e.setClock(sl, 0)
	case fServerPause:
		if e.zk != nil {
			n := e.zk.Nodes()[s.Target%len(e.zk.Nodes())]
			f.Target = fmt.Sprintf("zk%d", s.Target%len(e.zk.Nodes()))
			if err = n.Pause(); err != nil {
				return f
			}
			sleepCtx(ctx, s.Dur)
			err = n.Resume()
			return f
		}
		r := e.redis[s.Target%len(e.redis)]
		f.Target = fmt.Sprintf("redis%d", s.Target%len(e.redis))
		if err = r.Pause(); err != nil {
			return f
		}
		sleepCtx(ctx, s.Dur)
		err = r.Resume()
	case fRestartKeep, fRestartNoData:
		r := e.redis[s.Target%len(e.redis)]
		f.Target = fmt.Sprintf("redis%d", s.Target%len(e.redis))
		err = r.Restart(s.Kind == fRestartKeep)
	case fRestartSnapshot:
		i := s.Target % len(e.redis)
		r := e.redis[i]
		f.Target = fmt.Sprintf("redis%d", i)
		var snap string
		if snap, err = r.Snapshot(); err != nil {
			return f
		}
		sleepCtx(ctx, s.Dur) // holds and tokens the snapshot will not have
		err = r.RestartFromSnapshot(snap)
	case fMinorityRestart, fMajorityRestart:
		n := 2
		if s.Kind == fMajorityRestart {
			n = 3
		}
		var down []*testserver.Redis
		for j := range n {
			i := (s.Target + j) % len(e.redis)
			down = append(down, e.redis[i])
			f.Target += fmt.Sprintf("redis%d ", i)
		}
		for _, r := range down {
			r.Kill()
		}
		sleepCtx(ctx, s.Dur)
		for _, r := range down {
			if rerr := r.Restart(false); rerr != nil && err == nil {
				err = rerr
			}
		}
	case fLockDelete:
		f.Target, f.Detail, err = e.deleteLocks(ctx, s)
	case fPubSubKill:
		f.Target, f.Detail, err = e.killPubSub(ctx, s)
	case fZKNodeKill:
		i := s.Target % len(e.zk.Nodes())
		n := e.zk.Nodes()[i]
		f.Target = fmt.Sprintf("zk%d", i)
		n.Kill()
		sleepCtx(ctx, s.Dur)
		err = n.Restart()
	default:
		err = fmt.Errorf("unknown fault kind %q", s.Kind)
	}
	return f
}

// finalKill kills a client process as the last fault of a schedule: the
// one that took the longest-lived long key (L1, else L0) last, 20 to 300
// ms after it did, before its first renewal (waiting up to 8 s for such an
// acquisition), else one that holds any lock (waiting up to a second).
// The process is replaced at once, like client-kill's.
func (e *env) finalKill(seed uint64) Fault {
	sl := e.slots[int(seed)%len(e.slots)]
	key := "L1"
	if _, ok := e.cfg.keyLives()[key]; !ok {
		key = "L0"
	}
	if _, ok := e.cfg.keyLives()[key]; ok {
		if s := e.freshHolder(key, 20*time.Millisecond, 300*time.Millisecond, 8*time.Second); s != nil {
			sl = s
		}
	}
	_, _, proc := sl.current()
	if sl == e.slots[int(seed)%len(e.slots)] {
		e.waitHolding(context.Background(), proc, time.Second)
	}
	f := Fault{Kind: fClientKill, Target: proc, Proc: proc, Start: monoNow(), Wall: time.Now().UnixNano(), Detail: "final"}
	sl.kill()
	f.End = monoNow()
	if err := e.spawn(sl); err != nil {
		f.Err = err.Error()
	}
	return f
}

// freshHolder follows the slots' histories from now on until one of them
// shows an acquisition of key that is between min and max old and not yet
// released or lost, and returns that slot; nil after d.
func (e *env) freshHolder(key string, min, max, d time.Duration) *slot {
	type follow struct {
		sl   *slot
		path string
		off  int64
		rest []byte
		open map[string]int64 // hold -> acquisition (mono)
	}
	var fs []*follow
	for _, sl := range e.slots {
		_, _, proc := sl.current()
		path := filepath.Join(e.dir, "hist-"+proc+".jsonl")
		st, err := os.Stat(path)
		if err != nil {
			continue
		}
		fs = append(fs, &follow{sl: sl, path: path, off: st.Size(), open: map[string]int64{}})
	}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		for _, f := range fs {
			file, err := os.Open(f.path)
			if err != nil {
				continue
			}
			buf := make([]byte, 1<<20)
			n, _ := file.ReadAt(buf, f.off)
			file.Close()
			f.off += int64(n)
			data := append(f.rest, buf[:n]...)
			i := bytes.LastIndexByte(data, '\n')
			if i < 0 {
				f.rest = data
				continue
			}
			f.rest = append([]byte(nil), data[i+1:]...)
			for _, line := range bytes.Split(data[:i], []byte("\n")) {
				var ev Event
				if json.Unmarshal(line, &ev) != nil || ev.Key != key || ev.Hold == "" {
					continue
				}
				switch ev.Op {
				case opAcquired:
					f.open[ev.Hold] = ev.Mono
				case opRelease, opLost:
					delete(f.open, ev.Hold)
				}
			}
			now := monoNow()
			for _, at := range f.open {
				if age := time.Duration(now - at); age >= min && age <= max {
					return f.sl
				}
			}
		}
	}
	return nil
}

// setClock sets the clock offset of slot s's processes (ids.go's control
// file) to off ns from the slot's skew.
func (e *env) setClock(s *slot, off int64) error {
	s.clock++
	return writeControl(s.ctl, s.clock, s.skew+off)
}

// clockSkews returns the ids contention mode's clock offsets of the slots,
// drawn from the seed: 0 to 4 ms, as hosts' clocks differ, so that a worker
// ID often passes to a process whose clock is behind its last holder's (by
// less than the generators' 5 ms tolerance, so that the new generator waits
// for the stored mark instead of failing). nil outside that mode.
func clockSkews(cfg runConfig) []time.Duration {
	if cfg.backend != "ids" || !cfg.contend {
		return nil
	}
	rnd := rand.New(rand.NewPCG(cfg.seed, 0x736b6577))
	skews := make([]time.Duration, cfg.procs)
	for i := range skews {
		skews[i] = time.Duration(rnd.Int64N(int64(4*time.Millisecond) + 1)).Round(10 * time.Microsecond)
	}
	return skews
}

// waitHolding polls the tail of proc's history until one of its holds has
// been acquired and not yet released or lost, or until d has passed.
func (e *env) waitHolding(ctx context.Context, proc string, d time.Duration) bool {
	return e.waitHeldFor(ctx, proc, 0, d)
}

// waitHeldFor polls the tail of proc's history until one of its holds has
// been held (acquired, not yet released or lost) for at least age, or until
// d has passed. The holds seen are kept across polls: a busy process's
// history scrolls an old acquisition out of the tail quickly.
func (e *env) waitHeldFor(ctx context.Context, proc string, age, d time.Duration) bool {
	path := filepath.Join(e.dir, "hist-"+proc+".jsonl")
	deadline := time.Now().Add(d)
	buf := make([]byte, 8192)
	open, gone := map[string]int64{}, map[string]bool{}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if at := heldSince(path, buf, open, gone); at != 0 && monoNow()-at >= age.Nanoseconds() {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// heldSince reads the last 8 KiB (len(buf)) of the history at path into
// open (holds acquired, by hold id: the acquisition's Mono) and gone (holds
// released or lost), and returns the acquisition time of the oldest hold
// in open, or 0.
func heldSince(path string, buf []byte, open map[string]int64, gone map[string]bool) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	off := max(st.Size()-int64(len(buf)), 0)
	n, _ := f.ReadAt(buf, off)
	for _, line := range bytes.Split(buf[:n], []byte("\n")) {
		var ev Event
		if json.Unmarshal(line, &ev) != nil || ev.Hold == "" {
			continue
		}
		switch ev.Op {
		case opAcquired:
			if !gone[ev.Hold] {
				open[ev.Hold] = ev.Mono
			}
		case opRelease, opLost:
			gone[ev.Hold] = true
			delete(open, ev.Hold)
		}
	}
	var oldest int64
	for _, at := range open {
		if oldest == 0 || at < oldest {
			oldest = at
		}
	}
	return oldest
}

// notifyPartition is the ZooKeeper overlap that follows a watch
// notification (issue 15, item 1): go-zookeeper declares its connection
// dead 2T/3 after the last packet it received, watch notifications
// included, while the server expires the session T after the last packet
// it received from the client. The step:
//
//  1. asks proc for a slow section (its control node, zkctl.go) and waits
//     until proc has held a lock for longer than a section takes;
//  2. holds every byte from proc to ZooKeeper (a half-open link: the server
//     hears nothing, proc still receives) for deaf;
//  3. writes proc's control node, so a watch notification reaches proc;
//  4. holds every byte both ways (the partition), until the server has
//     expired the session and a loss counted from the notification would
//     have come, then cuts the connections, lets them pass again and ends
//     the slow section if it is still running.
//
// zklock/doc.go promises Lost before another client can take the lock.
func (e *env) notifyPartition(ctx context.Context, sl *slot, proc string, deaf time.Duration) (string, error) {
	var addrs []string
	for _, n := range e.zk.Nodes() {
		addrs = append(addrs, n.Addr())
	}
	conn, events, err := zk.Connect(addrs, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	go func() { // drains the event channel; ends when conn is closed
		for range events {
		}
	}()
	T := e.cfg.session
	slow := deaf + 2*T + 2*time.Second // outlasts the step, which ends it
	e.zkCtl++
	if err := setZKControl(conn, proc, e.zkCtl, fmt.Sprintf("hold %d", slow.Nanoseconds())); err != nil {
		return "", fmt.Errorf("control node: %w", err)
	}
	defer func() { // after the proxies pass again (defers run last first)
		e.zkCtl++
		setZKControl(conn, proc, e.zkCtl, "end")
	}()
	if !e.waitHeldFor(ctx, proc, 150*time.Millisecond, 3*time.Second) {
		return "", errors.New("no slow section began")
	}
	zkp := sl.proxies[:e.nzk]
	for _, p := range zkp {
		p.SetBlackholeToServer(true)
	}
	defer func() {
		for _, p := range zkp {
			p.Cut()
			p.Reset()
		}
	}()
	sleepCtx(ctx, deaf)
	e.zkCtl++
	if err := setZKControl(conn, proc, e.zkCtl, "ping"); err != nil {
		return "", fmt.Errorf("control node: %w", err)
	}
	sleepCtx(ctx, 30*time.Millisecond) // the notification passes the proxy
	for _, p := range zkp {
		p.SetBlackhole(true)
	}
	// The session expires about T after deaf began (plus a tick or two);
	// a loss counted from the notification comes about T after it.
	sleepCtx(ctx, T+300*time.Millisecond)
	return fmt.Sprintf("slow section %v, server deaf %v before the notification", slow, deaf), nil
}

// killPubSub is pubsub-kill: for s.Dur, every pubSubKillEvery, CLIENT
// KILL TYPE pubsub on the target Redis. A probe, a go-redis subscriber of
// the nemesis's own (straight to Redis, where the clients' go through
// their proxies and take longer to subscribe again), hears a message
// published every round: how many it heard says how many of theirs were
// lost at least. A failed round is counted, not fatal: the messages lost
// until then were lost all the same. It returns the target and the counts.
func (e *env) killPubSub(ctx context.Context, s step) (string, string, error) {
	i := s.Target % len(e.redis)
	target := fmt.Sprintf("redis%d", i)
	c := e.redis[i].NewClient()
	defer c.Close()
	const channel = "chaos:pubsub-probe"
	probe := c.Subscribe(ctx, channel)
	if _, err := probe.Receive(ctx); err != nil {
		probe.Close()
		return target, "", fmt.Errorf("probe subscription: %w", err)
	}
	var heard atomic.Int64
	done := make(chan struct{})
	go func() { // ends when the probe is closed
		defer close(done)
		for range probe.Channel() {
			heard.Add(1)
		}
	}()
	var killed, rounds, published, failed int64
	tick := time.NewTicker(pubSubKillEvery)
	defer tick.Stop()
	for end := time.Now().Add(s.Dur); time.Now().Before(end) && ctx.Err() == nil; rounds++ {
		if c.Publish(ctx, channel, rounds).Err() == nil {
			published++
		}
		if n, err := c.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Int64(); err != nil {
			failed++
		} else {
			killed += n
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	time.Sleep(20 * time.Millisecond) // the last messages reach the probe
	probe.Close()
	<-done
	return target, fmt.Sprintf("%d Pub/Sub connections dropped in %d rounds (%d failed); the probe heard %d of %d messages",
		killed, rounds, failed, heard.Load(), published), nil
}

// lockDeleteEvery is how often a lock-delete step deletes the lock hashes.
const lockDeleteEvery = 2 * time.Millisecond

// deleteLocks is lock-delete: for s.Dur, every lockDeleteEvery, it deletes
// the lock hash (P{key}) of every hot key on the Redis of lock and fair, or
// on a majority of Redlock's masters (s.Target and the next ones), as an
// eviction, a manual DEL or ForceRelease does. The fencing counter
// (P{key}:fence) and the wait queue stay. A hold deleted under its holder
// is reported lost at its next renewal, or at once when its owner obtains
// the key again through the same Client (lock/doc.go; for Redlock, whose
// re-entry is counted in process, at the next renewal: redlock/doc.go).
// Many deletions in a row make it likely that a section re-enters its key
// after its hold was deleted, and that another client held the key in
// between. It returns the targets and a summary.
func (e *env) deleteLocks(ctx context.Context, s step) (string, string, error) {
	prefix, n := lock.DefaultPrefix, 1
	if e.cfg.backend == "redlock" {
		prefix, n = redlock.DefaultPrefix, len(e.redis)/2+1
	}
	var keys []string
	for _, k := range e.cfg.keyNames() {
		if e.cfg.backend == "rw" { // lock.RW's hash and readers (lock/rw.go)
			keys = append(keys, prefix+"rw:{"+k+"}", prefix+"rw:{"+k+"}:r")
			continue
		}
		keys = append(keys, prefix+"{"+k+"}")
	}
	var targets []string
	var clients []redis.UniversalClient
	for j := range n {
		i := (s.Target + j) % len(e.redis)
		targets = append(targets, fmt.Sprintf("redis%d", i))
		c := e.redis[i].NewClient()
		defer c.Close()
		clients = append(clients, c)
	}
	target := strings.Join(targets, " ")
	var deleted int64
	rounds := 0
	tick := time.NewTicker(lockDeleteEvery)
	defer tick.Stop()
	for end := time.Now().Add(s.Dur); time.Now().Before(end); {
		for _, c := range clients {
			n, err := c.Del(ctx, keys...).Result()
			if ctx.Err() != nil {
				return target, "", nil // the load phase ended
			}
			if err != nil {
				return target, "", err
			}
			deleted += n
		}
		rounds++
		select {
		case <-ctx.Done():
			return target, "", nil
		case <-tick.C:
		}
	}
	return target, fmt.Sprintf("%d lock hashes deleted in %d rounds over %v", deleted, rounds, s.Dur), nil
}

// watchHostStalls records an fHostStall fault in log whenever the
// orchestrator went stallMin or more without running a 10 ms ticker's
// goroutine (as watchStalls does in a client process), until the returned
// stop is called; stop waits for it to end, and may be called again.
func watchHostStalls(log *faultLog) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		last := monoNow()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			now := monoNow()
			if gap := time.Duration(now - last); gap >= stallMin {
				log.add(Fault{Kind: fHostStall, Target: "orchestrator", Start: last, End: now,
					Wall: time.Now().UnixNano() - int64(gap), Detail: fmt.Sprintf("%v without a 10 ms tick", gap.Round(time.Millisecond))})
			}
			last = now
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-ended }) }
}
