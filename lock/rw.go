package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/lockopt"
	"github.com/coordkit/coordkit/internal/notify"
	"github.com/coordkit/coordkit/internal/observe"
	"github.com/coordkit/coordkit/internal/redisfn"
	"github.com/coordkit/coordkit/internal/redisver"
	"github.com/coordkit/coordkit/watchdog"
)

// ErrUpgrade is returned when an owner holding the read side of a key asks
// for its write side: two readers doing so would wait for each other for
// ever. Release the read side first. (The reverse, a writer taking the
// read side, is allowed: a downgrade.)
var ErrUpgrade = errors.New("lock: a reader cannot take the write side (release the read side first)")

// RWLocker is the read-write lock of a backend: its two sides, each a
// Locker. RW (Redis), zklock.Client and etcdlock.Client implement it.
type RWLocker interface {
	Read() Locker
	Write() Locker
}

// RW is a reentrant read-write lock on Redis, as Redisson's RReadWriteLock:
// readers share a key, a writer excludes readers and other writers. Its
// sides are Read() and Write(), each a Locker (lock.Do works on either).
//
// For a key, with the client's prefix P, every key shares the hash tag
// {key}:
//
//	P rw:{key}        hash    "w" writer owner, "wc" its count, "we" its expiry
//	                          (server ms), "t" its fencing token, "wl" its levels
//	                          (",<call id>,…,"), "r:<owner>" a reader's count,
//	                          "rl:<owner>" its levels
//	P rw:{key}:r      zset    reader owner -> expiry (server ms)
//	P rw:{key}:ww     zset    waiting writer -> deadline (server ms)
//	P rw:{key}:fence  string  fencing counter; never deleted
//	P rw:{key}:x:<id> string  a release's answer, kept for the release window
//	P rw:{key}:ch     channel a message when the lock becomes free for others
//
// Acquire, release and renew are one Lua script each (internal/redisfn/lua/lock/rw_*.lua). Policy:
// writer preference — a reader that holds nothing does not enter while a
// writer waits, so a stream of readers cannot starve a writer (writers
// among themselves are not ordered). The owner (from ctx, as for Client)
// re-enters either side; the writer may take the read side too and keep
// it after its write release (a downgrade); a reader asking for the write
// side gets ErrUpgrade. Each write acquisition gets a fencing token larger
// than every earlier one (the counter and the server's clock, as Client's);
// a read lease's Token is the token of the last write, which says which
// version it reads. Each hold expires on the server at its own deadline
// (a crashed reader does not keep the lock while others renew) and is kept
// alive by a watchdog; its loss closes Lost. An acquisition whose answer
// arrives after its TTL has run since it was sent (held up in the network,
// the process stopped) is a level the server may have expired and let a
// writer past: it is never returned. Obtain releases it and tries again as
// a new level (TryObtain answers ErrNotObtained), as Client's Obtain does.
// Waiters listen on the key's
// channel, subscribed on the server that holds the key (the master of its
// slot on a Cluster, its shard on a Ring: one Pub/Sub connection per
// server) while a waiter of the RW waits there: a write release wakes every
// waiting reader at once (they all may enter), and the last read release
// wakes the writers, who race for it.
//
// Each call is safe to resend (go-redis sends a command again after a
// network error on the read, MaxRetries 3 by default, when Redis may have
// run it already): an acquisition records its call's id with the level it
// takes (the "wl" / "rl:<owner>" fields), so that the same call run again
// answers as the first run did and takes no second level; a release drops
// only its own level and keeps its answer for the release window
// (WithReleaseWindow) under P rw:{key}:x:<level id>, so that a resend
// neither drops a second level nor reports ErrNotHeld for a hold it
// released; a renewal renews only the hold its level belongs to. A lease
// whose hold was lost (expired, deleted) and taken again by the same owner
// no longer matches a level: its renewal reports it lost, and its Release
// answers ErrNotHeld without touching the new hold. When the owner takes
// the write side again through the same RW and Redis answers with a new
// hold's token, the owner's write levels of the lost hold are reported
// lost at once, before that Obtain returns (as Client does): a nested
// lock.Do never runs inside an outer section that still believes it holds
// a hold Redis lost. A downgrade is a read
// acquisition by the writer, recorded the same way.
type RW struct {
	ver redisver.Gate // the server's version, checked at the first obtain
	rdb redis.UniversalClient
	run *redisfn.Runner // FCALL or EVALSHA, chosen at the first call
	o   clientOptions
	obs observe.Lock
	err error
	id  string        // this RW's id: its calls are "<id>.<n>"
	seq atomic.Uint64 // numbers the calls

	mu      sync.Mutex
	closed  bool
	listen  *notify.Listener                      // the keys' channels, each on its key's server
	waiters map[string]map[chan struct{}]struct{} // by channel
	leases  map[*rwLease]struct{}
	writes  map[holdKey]map[*rwLease]struct{} // the write levels in leases, by key and owner
	quit    chan struct{}
}

var _ RWLocker = (*RW)(nil)

// NewRW returns a read-write lock client on rdb, which it does not close.
// Options that apply: WithPrefix, WithDefaultTTL, WithWaiterTimeout,
// WithReleaseWindow, WithMetrics, WithMetricsKey, WithLogger, WithClock. Like New it returns
// an RW even for invalid arguments: Err reports them.
func NewRW(rdb redis.UniversalClient, opts ...ClientOption) *RW {
	o := defaultClientOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	rw := &RW{rdb: rdb, run: redisfn.NewRunner(rdb, o.logger), o: o, id: NewOwner(), waiters: map[string]map[chan struct{}]struct{}{},
		leases: map[*rwLease]struct{}{}, writes: map[holdKey]map[*rwLease]struct{}{}, quit: make(chan struct{})}
	rw.obs = observe.NewLock("coordkit/lock.RW", o.logger, o.metrics, o.metricsKey, ErrClosed)
	rw.listen = notify.NewListener(rdb, rw.wake)
	rw.err = checkClient(rdb, &o)
	return rw
}

// Err returns the error NewRW found in its arguments, or nil.
func (rw *RW) Err() error { return rw.err }

// Read returns the shared side.
func (rw *RW) Read() Locker { return rwSide{rw, "r"} }

// Write returns the exclusive side.
func (rw *RW) Write() Locker { return rwSide{rw, "w"} }

type rwSide struct {
	rw   *RW
	mode string
}

func (s rwSide) Obtain(ctx context.Context, key string, opts ...Option) (Lease, error) {
	return s.rw.obtain(ctx, s.mode, key, true, opts)
}

func (s rwSide) TryObtain(ctx context.Context, key string, opts ...Option) (Lease, error) {
	return s.rw.obtain(ctx, s.mode, key, false, opts)
}

// rwKeys returns the hash, readers, waiting writers, fence and channel.
func (rw *RW) rwKeys(key string) []string {
	h := rw.o.prefix + "rw:{" + key + "}"
	return []string{h, h + ":r", h + ":ww", h + ":fence", h + ":ch"}
}

func (rw *RW) obtain(ctx context.Context, mode, key string, wait bool, opts []Option) (Lease, error) {
	if rw.err == nil {
		if err := checkServer(ctx, &rw.ver, rw.rdb); err != nil {
			return nil, err
		}
	}
	begin := rw.o.now()
	l, err := rw.obtainLease(ctx, mode, key, wait, opts)
	if rw.o.metrics != nil {
		rw.obs.Waited(key, rw.o.now().Sub(begin), err)
	}
	if err != nil {
		return nil, serverErr(err)
	}
	return l, nil
}

func (rw *RW) obtainLease(ctx context.Context, mode, key string, wait bool, opts []Option) (*rwLease, error) {
	if rw.err != nil {
		return nil, rw.err
	}
	o := lockopt.Apply(opts)
	if err := checkObtain(key, &o, rw.o.ttl); err != nil {
		return nil, err
	}
	ctx = ensureOwner(ctx)
	owner, _ := OwnerFrom(ctx)
	keys := rw.rwKeys(key)
	var woken chan struct{}
	var sub *notify.Sub
	if wait {
		var err error
		if woken, sub, err = rw.subscribe(ctx, keys[0], keys[4]); err != nil {
			return nil, err
		}
		defer func() { rw.unsubscribe(sub, keys[4], woken) }()
	}
	waiter := ""
	if wait && mode == "w" {
		waiter = owner + "|" + NewOwner()
	}
	// The call's id, sent with every attempt: the level the successful
	// attempt takes, so that the attempt resent after a lost reply finds it.
	level := rw.id + "." + strconv.FormatUint(rw.seq.Add(1), 10)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	late := 0 // answers in this call that came after the TTL (Client.obtainHeld)
	for attempt := 1; ; attempt++ {
		sent := rw.o.now()
		res, err := rw.run.Run(ctx, rw.rdb, redisfn.RWAcquire, keys[:4], mode, owner, o.TTL.Milliseconds(), waiter,
			rw.o.waiterTimeout.Milliseconds(), level).Int64Slice()
		if err != nil {
			if strings.Contains(err.Error(), "RW_UPGRADE") {
				return nil, fmt.Errorf("%w: %q", ErrUpgrade, key)
			}
			if ctx.Err() != nil {
				return nil, errors.Join(ErrNotObtained, ctx.Err())
			}
			return nil, fmt.Errorf("lock: rw %s acquire %q: %w", mode, key, err)
		}
		if len(res) >= 2 && res[0] == 1 {
			l := rw.newLease(mode, key, keys, owner, level, res[1], o, sent)
			if l.wd.Held() {
				rw.loseReplaced(l)
				return l, nil
			}
			// The answer came after the level's deadline: Redis may have
			// expired it and let a writer in meanwhile (Client.obtainHeld).
			// Give it back and try again as a new level.
			_ = l.release(ctx) // not the caller's: no Released hook
			level = rw.id + "." + strconv.FormatUint(rw.seq.Add(1), 10)
			if late++; !wait || late == maxLate {
				return nil, fmt.Errorf("%w: %q: %d answers in a row came after the TTL %v had run out", ErrNotObtained, key, late, o.TTL)
			}
			continue
		}
		if !wait {
			return nil, ErrNotObtained
		}
		d := rw.o.waiterTimeout / 3 // call in before the waiting writer is forgotten
		if len(res) >= 2 && res[1] >= 0 {
			d = min(d, time.Duration(res[1])*time.Millisecond+time.Millisecond)
		}
		if o.Retry != nil {
			d = o.Retry(attempt)
		}
		// Its connection dropped, or the key moved, while it waited:
		// listen again within the wait's bound (notify.Relisten).
		var again *notify.Sub
		if again, d = rw.listen.Relisten(ctx, keys[0], keys[4], d); again != nil {
			sub.Unlisten() // the old server's (if it still lives, its count drops)
			sub = again
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-woken:
		case <-timer.C:
		case <-rw.quit:
			return nil, ErrClosed
		case <-ctx.Done():
			if waiter != "" {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				rw.rdb.ZRem(rctx, keys[2], waiter) // best effort: its deadline ends it anyway
				cancel()
			}
			return nil, errors.Join(ErrNotObtained, ctx.Err())
		}
	}
}

// subscribe registers a waiter on a key's channel, which the RW's Listener
// subscribes on the server that holds key (the master of its slot on a
// Cluster) if no one listens there yet, and returns once the subscription
// is confirmed: no release after it is missed.
func (rw *RW) subscribe(ctx context.Context, key, ch string) (chan struct{}, *notify.Sub, error) {
	rw.mu.Lock()
	if rw.closed {
		rw.mu.Unlock()
		return nil, nil, ErrClosed
	}
	w := make(chan struct{}, 1)
	set := rw.waiters[ch]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		rw.waiters[ch] = set
	}
	set[w] = struct{}{}
	rw.mu.Unlock()
	// Outside rw.mu: the Listener's dispatcher, which confirms the
	// subscription, takes rw.mu to deliver messages.
	sub, err := rw.listen.Listen(ctx, key, ch)
	if err == nil {
		return w, sub, nil
	}
	rw.forget(ch, w)
	switch {
	case errors.Is(err, notify.ErrClosed):
		return nil, nil, ErrClosed
	case ctx.Err() != nil:
		return nil, nil, errors.Join(ErrNotObtained, ctx.Err())
	}
	return nil, nil, fmt.Errorf("lock: rw subscribe: %w", err)
}

// unsubscribe takes back a subscribe that returned w and sub.
func (rw *RW) unsubscribe(sub *notify.Sub, ch string, w chan struct{}) {
	rw.forget(ch, w)
	sub.Unlisten()
}

// forget drops the waiter w on ch.
func (rw *RW) forget(ch string, w chan struct{}) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	set := rw.waiters[ch]
	delete(set, w)
	if len(set) == 0 {
		delete(rw.waiters, ch)
	}
}

// wake wakes every local waiter on ch.
func (rw *RW) wake(ch, _ string) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	for w := range rw.waiters[ch] {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// Close stops the client: waiting calls return ErrClosed, held leases stop
// being renewed (Lost closes with cause ErrClosed; the holds expire after
// their TTL unless released), the Pub/Sub connections close.
func (rw *RW) Close() error {
	rw.mu.Lock()
	if rw.closed {
		rw.mu.Unlock()
		return nil
	}
	rw.closed = true
	close(rw.quit)
	leases := make([]*rwLease, 0, len(rw.leases))
	for l := range rw.leases {
		leases = append(leases, l)
	}
	rw.mu.Unlock()
	rw.listen.Close()
	for _, l := range leases {
		l.wd.Lose(ErrClosed)
	}
	return nil
}

// rwLease is one level of a read or write hold.
type rwLease struct {
	rw    *RW
	mode  string
	key   string
	keys  []string
	owner string
	level string // the id of the call that took this level
	token int64
	since time.Time
	wd    *watchdog.Watchdog

	released bool // protected by rw.mu
	// late and confirmed: as hold's (Client).
	late      bool
	confirmed atomic.Bool
}

func (rw *RW) newLease(mode, key string, keys []string, owner, level string, token int64, o obtainOptions, sent time.Time) *rwLease {
	l := &rwLease{rw: rw, mode: mode, key: key, keys: keys, owner: owner, level: level, token: token, since: sent}
	l.late = !rw.o.now().Before(sent.Add(o.TTL)) // see hold.late
	ttl := o.TTL.Milliseconds()
	wd, err := watchdog.Start(watchdog.Config{
		TTL:         o.TTL,
		MaxHold:     o.MaxHold,
		LastRenewed: sent,
		Now:         rw.o.now,
		Observer:    rwEvents{l},
		Renew: func(ctx context.Context) error {
			n, err := rw.run.Run(ctx, rw.rdb, redisfn.RWRenew, keys[:2], mode, owner, ttl, level).Int64()
			switch {
			case err != nil:
				return fmt.Errorf("lock: rw renew %q: %w", key, err)
			case n == 0:
				return fmt.Errorf("%w: %w", ErrNotHeld, watchdog.ErrNotHeld)
			}
			l.confirmed.Store(true) // before the watchdog moves the deadline
			return nil
		},
	})
	if err != nil { // o was validated against MinTTL: this is a bug
		panic(err)
	}
	l.wd = wd
	rw.mu.Lock()
	closed := rw.closed
	if !closed {
		rw.leases[l] = struct{}{}
		if mode == "w" {
			k := holdKey{key, owner}
			if rw.writes[k] == nil {
				rw.writes[k] = map[*rwLease]struct{}{}
			}
			rw.writes[k][l] = struct{}{}
		}
	}
	rw.mu.Unlock()
	if closed {
		wd.Lose(ErrClosed)
	}
	return l
}

// loseReplaced reports lost, at once, the owner's other write levels on
// l's key whose token is not l's: l's acquisition answered another token,
// so Redis no longer had their hold (a failover, an eviction, a restart,
// ForceRelease) and l made a new one. Client does the same for its holds
// (newGrantedLease); before, such a level learned of it only at its next
// renewal, and the owner's outer section, re-entered through this RW,
// went on believing it held the key with its old token (the chaos
// checker's rw backend: reentry-token, after lock-delete).
func (rw *RW) loseReplaced(l *rwLease) {
	if l.mode != "w" {
		return // a read lease's token is the last write's: it names no hold
	}
	var lose []*rwLease
	stale := false
	rw.mu.Lock()
	for o := range rw.writes[holdKey{l.key, l.owner}] {
		if o != l && o.token != l.token && !o.released {
			lose = append(lose, o)
			// A smaller token than a live level's: Redis answered from an
			// older hold (restarted from a snapshot), which l joined: l is
			// lost from the start too, as Client's answer about a hold
			// that a newer one replaced.
			stale = stale || o.token > l.token
		}
	}
	rw.mu.Unlock()
	if stale {
		lose = append(lose, l)
	}
	for _, o := range lose {
		o.wd.Lose(fmt.Errorf("%w: %w", ErrNotHeld, watchdog.ErrNotHeld))
	}
}

type rwEvents struct{ l *rwLease }

func (e rwEvents) Renewed(err error) { e.l.rw.obs.Renewed(e.l.key, e.l.owner, e.l.token, err) }
func (e rwEvents) Lost(cause error) {
	if e.l.late && !e.l.confirmed.Load() { // never handed out (see hold.late)
		e.l.rw.obs.Discarded(e.l.key, e.l.owner, e.l.token, cause)
		return
	}
	e.l.rw.obs.Lost(e.l.key, e.l.owner, e.l.token, lostErr(cause))
}

func (l *rwLease) Key() string           { return l.key }
func (l *rwLease) Token() int64          { return l.token }
func (l *rwLease) Lost() <-chan struct{} { return l.wd.Lost() }

// Err and Until: see LeaseStatus.
func (l *rwLease) Err() error       { return lostErr(l.wd.Err()) }
func (l *rwLease) Until() time.Time { return l.wd.Until() }

// Release drops one level of the hold; ErrNotHeld if it was no longer held.
// A release that Redis does not answer after the lease's deadline had
// passed reports the lease lost (see Client's Release).
func (l *rwLease) Release(ctx context.Context) error {
	err := l.release(ctx)
	if l.rw.o.metrics != nil {
		l.rw.obs.Released(l.key, err)
	}
	return err
}

func (l *rwLease) release(ctx context.Context) error {
	rw := l.rw
	expired := l.wd.Overdue()
	rw.mu.Lock()
	done := l.released
	l.released = true
	delete(rw.leases, l)
	if ws := rw.writes[holdKey{l.key, l.owner}]; ws != nil {
		delete(ws, l)
		if len(ws) == 0 {
			delete(rw.writes, holdKey{l.key, l.owner})
		}
	}
	rw.mu.Unlock()
	if done {
		return ErrNotHeld
	}
	l.wd.Stop()
	if rw.o.metrics != nil && (!l.late || l.confirmed.Load()) { // a discarded lease was nobody's
		rw.obs.Held(l.key, rw.o.now().Sub(l.since))
	}
	n, err := rw.run.Run(ctx, rw.rdb, redisfn.RWRelease, []string{l.keys[0], l.keys[1], l.keys[0] + ":x:" + l.level},
		l.mode, l.owner, l.keys[4], l.level, rw.o.releaseWindow.Milliseconds()).Int64()
	if err != nil {
		return unanswered(l.wd, expired, l.key, fmt.Errorf("lock: rw release %q: %w (the hold expires after its TTL)", l.key, err))
	}
	if n < 0 { // lost before this release: Lost closes, as a renewal would have reported
		l.wd.Lose(errReleasedLost)
		return ErrNotHeld
	}
	return nil
}
