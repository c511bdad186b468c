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

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/lockopt"
	"github.com/coordkit/coordkit/internal/notify"
	"github.com/coordkit/coordkit/internal/observe"
	"github.com/coordkit/coordkit/internal/pipe"
	"github.com/coordkit/coordkit/internal/redisfn"
	"github.com/coordkit/coordkit/internal/redisver"
	"github.com/coordkit/coordkit/watchdog"
)

var _ Locker = (*Client)(nil)

// leaveTimeout bounds the clean-up calls made after ctx ended (leaving the
// queue, releasing after too few replicas acknowledged).
const leaveTimeout = 2 * time.Second

// Client is the reentrant Redis hash lock (see the package documentation).
// It is safe for concurrent use. The zero value is not usable: call New.
type Client struct {
	ver        redisver.Gate // the server's version, checked at the first obtain
	rdb        redis.UniversalClient
	pipe       *pipe.Pipeliner // acquire and release, pipelined under load
	run        *redisfn.Runner // FCALL or EVALSHA, chosen at the first call
	o          clientOptions
	obs        observe.Lock // logger and metrics hooks
	err        error        // invalid construction, returned by every call
	id         string       // this client's id: its waiters are "<id>:<n>"
	chanPrefix string       // prefix of every client's wake-up channel
	quit       chan struct{}

	seq   atomic.Uint64 // numbers the calls: "<id>:<n>"
	gates gates         // local lines per key (non-fair mode)

	mu      sync.Mutex // protects the fields below and every lease's released
	holds   map[holdKey]*hold
	waiters map[string]chan int64 // by call id: a wake-up (0) or a grant's token
	listen  *notify.Listener      // the wake-up channel, subscribed by the first wait on each server
	closed  bool

	// Script arguments that never change, boxed once: passing a string or
	// a large integer as an argument allocates on every call otherwise.
	argChan, argFair, argBound, argWindow any
	argTTL                                any    // the default TTL: "-<ms>" (acquire.lua's ARGV[2])
	argGrant                              string // "|<grant ms>|" of a waiter entry at the default TTL
	argGrantBoxed                         any    // argGrant
	argMeta                               any    // WithHolderMeta's metadata, or nil when none
	acquireKeys                           int    // the keys acquire.lua gets: 5 with metadata, else 4 (each costs an allocation)
}

// Boxed "", "0" and "1" script arguments.
var argEmpty, argNo, argYes any = "", "0", "1"

// holdKey identifies a hold: the levels one owner holds on one key through
// this client. They share one watchdog.
type holdKey struct{ key, owner string }

type hold struct {
	c      *Client
	k      holdKey
	token  int64 // the hold's fencing token: its identity in Redis
	levels int
	wd     *watchdog.Watchdog
	// ttl is the TTL in ms that the hold's renewals set: the longest any of
	// its levels asked for (a level never shortens the hold).
	ttl   atomic.Int64
	since time.Time // when its acquisition was sent
	made  time.Time // when its acquisition's answer made it (requests sent later see it in Redis)
	gate  *gateHold // the local line's front, given up when the hold ends or is lost; or nil
	// late: the acquisition's answer came after the hold's first deadline
	// (written before the watchdog starts). Until a renewal or a re-entry
	// with a TTL moves that deadline (confirmed), such a hold is not held
	// (Held) and is never handed to a caller: Obtain releases it and tries
	// again, and its loss is not a lease lost (observe's Discarded, at
	// Debug, not counted).
	late      bool
	confirmed atomic.Bool
}

// New returns a Client that locks keys on rdb, which it does not close. It
// returns a Client even for an invalid argument (nil rdb, a bad option):
// Err reports it at once, and every Obtain and TryObtain returns that error
// (wrapping ErrInvalid).
func New(rdb redis.UniversalClient, opts ...ClientOption) *Client {
	o := defaultClientOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	c := &Client{
		rdb:     rdb,
		pipe:    pipe.New(rdb, 0),
		run:     redisfn.NewRunner(rdb, o.logger),
		o:       o,
		id:      strings.ReplaceAll(uuid.NewString(), "-", ""),
		quit:    make(chan struct{}),
		holds:   map[holdKey]*hold{},
		waiters: map[string]chan int64{},
	}
	c.obs = observe.NewLock("coordkit/lock", o.logger, o.metrics, o.metricsKey, ErrClosed)
	c.chanPrefix = hashlock.WakePrefix(o.prefix)
	c.argChan, c.argFair, c.argWindow = c.chanPrefix, argNo, o.releaseWindow.Milliseconds()
	c.argBound, c.argTTL = o.waiterTimeout.Milliseconds(), "-"+strconv.FormatInt(o.ttl.Milliseconds(), 10)
	c.argGrant = "|" + strconv.FormatInt(c.grantTTL(o.ttl).Milliseconds(), 10) + "|"
	c.argGrantBoxed = c.argGrant
	if o.fair {
		c.argFair = argYes
	}
	c.acquireKeys = 4 // without metadata acquire.lua needs no waiter-metadata hash
	if o.meta != "" {
		c.argMeta, c.acquireKeys = o.meta, 5
		c.id = "m" + c.id // a grant to this client's waiters looks for their metadata (queue.lua)
	}
	c.listen = notify.NewListener(rdb, func(_, msg string) { c.wake(msg) })
	c.err = checkClient(rdb, &o)
	return c
}

// checkClient is New's and NewSimple's check of their arguments.
func checkClient(rdb redis.UniversalClient, o *clientOptions) error {
	switch {
	case rdb == nil:
		return fmt.Errorf("%w: nil redis client", ErrInvalid)
	case strings.ContainsAny(o.prefix, "{}"):
		return fmt.Errorf("%w: key prefix %q contains a brace", ErrInvalid, o.prefix)
	}
	return o.validate()
}

// Err returns the error New found in its arguments (wrapping ErrInvalid),
// or nil: check it after New to fail at start-up rather than at the first
// Obtain, which returns the same error.
func (c *Client) Err() error {
	if c == nil {
		return fmt.Errorf("%w: nil *lock.Client", ErrInvalid)
	}
	return c.err
}

// keys returns the lock's keys: hash, fence, queue, deadlines. They share
// the hash tag {key}, hence one Cluster slot.
func (c *Client) keys(key string) []string { return hashlock.LockKeys(c.o.prefix, key) }

// grantTTL is the TTL a release grants a queued waiter whose lease TTL is
// ttl (queue.lua): at most the waiter timeout, so that a waiter that
// vanished holds the lock no longer than it would keep its place in the
// queue. Its watchdog renews it to ttl.
func (c *Client) grantTTL(ttl time.Duration) time.Duration { return min(ttl, c.o.waiterTimeout) }

// resolve checks the call's arguments and applies defaults.
func (c *Client) resolve(key string, opts []Option) (obtainOptions, error) {
	o := lockopt.Apply(opts)
	if c == nil {
		return o, fmt.Errorf("%w: nil *lock.Client", ErrInvalid)
	}
	if c.err != nil {
		return o, c.err
	}
	return o, checkObtain(key, &o, c.o.ttl)
}

func checkObtain(key string, o *obtainOptions, defaultTTL time.Duration) error {
	if err := hashlock.CheckKey(key); err != nil {
		return err
	}
	if o.TTL == 0 {
		o.TTL, o.DefaultTTL = defaultTTL, true
	}
	// Redis counts TTLs in whole milliseconds: the watchdog counts the same
	// value, so that Lost never closes after the key expired.
	o.TTL = o.TTL.Truncate(time.Millisecond)
	if o.TTL < MinTTL {
		return fmt.Errorf("%w: TTL %v (minimum %v)", ErrInvalid, o.TTL, MinTTL)
	}
	if o.MaxHold < 0 {
		return fmt.Errorf("%w: negative MaxHold %v", ErrInvalid, o.MaxHold)
	}
	return nil
}

// Obtain blocks until key is held by ctx's owner (a new random owner if ctx
// carries none), ctx ends, or an error occurs. It re-enters a lock its owner
// already holds. Waiting is notified: the outermost release grants the lock
// to the first waiter in line and tells it through its client's Pub/Sub
// connection, and each wait is bounded by the holder's remaining TTL. With
// WithRetry it polls instead.
//
// Errors: errors.Join(ErrNotObtained, ctx.Err()) when ctx ends first;
// ErrInvalid for bad arguments; ErrClosed after Close; ErrTooFewReplicas
// (see WithWaitReplicas); otherwise the Redis error, wrapped.
func (c *Client) Obtain(ctx context.Context, key string, opts ...Option) (Lease, error) {
	return c.obtain(ctx, key, true, opts)
}

// TryObtain makes one attempt and returns ErrNotObtained if another owner
// holds key (or, in fair mode, other waiters are queued for it). Its other
// errors are Obtain's.
func (c *Client) TryObtain(ctx context.Context, key string, opts ...Option) (Lease, error) {
	return c.obtain(ctx, key, false, opts)
}

func (c *Client) obtain(ctx context.Context, key string, wait bool, opts []Option) (Lease, error) {
	o, err := c.resolve(key, opts)
	if err != nil {
		return nil, err
	}
	if err := checkServer(ctx, &c.ver, c.rdb); err != nil {
		return nil, err
	}
	if c.o.metrics == nil {
		l, err := c.obtainHeld(ctx, key, wait, o)
		if err != nil {
			return nil, serverErr(err)
		}
		return l, nil
	}
	begin := c.o.now()
	l, err := c.obtainHeld(ctx, key, wait, o)
	c.obs.Waited(key, c.o.now().Sub(begin), err)
	if err != nil {
		return nil, serverErr(err)
	}
	return l, nil
}

// obtainHeld runs obtainLoop until it gets a lease whose deadline is still
// ahead. A lease's life runs from when its acquisition was sent: an answer
// that arrived later than the TTL (held up in the network, or the process
// stopped meanwhile) is a hold Redis may already have expired and given to
// another owner. Such a lease is never returned: it is released (Redis
// answers "not held" if it expired) and the call tries again, as a new call
// (new level and request id), or fails with ErrNotObtained if it may not
// wait, or after maxLate such answers in a row (a TTL shorter than the
// round trip never gets a lease).
func (c *Client) obtainHeld(ctx context.Context, key string, wait bool, o obtainOptions) (*lease, error) {
	for late := 1; ; late++ {
		l, err := c.obtainLoop(ctx, key, wait, o)
		if err != nil || l.h.wd.Held() {
			return l, err
		}
		_ = l.release(ctx) // best effort: the key's TTL ends it otherwise; not the caller's, so no Released hook
		switch {
		case !wait:
			return nil, ErrNotObtained
		case ctx.Err() != nil:
			return nil, errors.Join(ErrNotObtained, ctx.Err())
		case late == maxLate:
			return nil, fmt.Errorf("%w: %q: %d answers in a row came after the TTL %v had run out", ErrNotObtained, key, late, o.TTL)
		}
	}
}

// maxLate bounds the acquisitions in a row whose answer came too late
// (obtainHeld).
const maxLate = 5

// obtainLoop runs the attempts, in key's local line when useGate says so.
func (c *Client) obtainLoop(ctx context.Context, key string, wait bool, o obtainOptions) (*lease, error) {
	// One id per call: the waiter's id in the queue, the release's request
	// id, and the owner when ctx carries none ("<client id>:<n>" is unique,
	// and unguessable through the random client id).
	id, err := c.begin()
	if err != nil {
		return nil, err
	}
	owner, ok := OwnerFrom(ctx)
	if !ok {
		owner = id
	} else if strings.HasPrefix(owner, "\x00") {
		return nil, fmt.Errorf("%w: owner %q starts with a NUL byte (reserved)", ErrInvalid, owner)
	}
	if !c.useGate(ctx, key, wait) {
		return c.attempts(ctx, key, wait, o, id, owner, nil)
	}
	g, gr, err := c.gates.enter(ctx, key, c.quit, &takeover{owner: owner, id: id, o: o})
	switch {
	case err != nil && gr.unsure: // a hand-off to owner may have happened: undo it, then pass the front on
		c.forget(ctx, c.keys(key), owner, id)
		c.gates.pass(key, g)
		return nil, err
	case err != nil:
		return nil, err
	case gr.lease != nil: // handed over by the releasing holder
		return gr.lease, nil
	}
	gh := &gateHold{gs: &c.gates, key: key, g: g}
	// After a hand-off whose answer was lost, the first attempt finds out:
	// if the hand-off made owner the holder, it finds its level (the call's
	// id) and takes the lock.
	l, err := c.attempts(ctx, key, wait, o, id, owner, gh)
	if err != nil {
		gh.leave()
	}
	return l, err
}

// attempts obtains key for owner; id is the call's id. gh, if not nil, is
// the local line's front that the new hold keeps.
func (c *Client) attempts(ctx context.Context, key string, wait bool, o obtainOptions, id, owner string, gh *gateHold) (*lease, error) {
	keys := c.keys(key)
	notified := o.Retry == nil
	queue := wait && (notified || c.o.fair) // a polling waiter outside fair mode does not queue
	grant := c.grantTTL(o.TTL)
	// The queue entry is "<id>|<grant ms>|<owner>". acquire.lua gets its
	// middle, "|<grant ms>|", and makes the entry from the call id and the
	// owner it has already: most calls never wait, and the entry is built
	// here only to leave the queue.
	var g string        // "|<grant ms>|", if queue
	var argWaiter any   // g, boxed (once per client for the default TTL)
	var wake chan int64 // nil until registered: most calls never wait
	if queue {
		g, argWaiter = c.argGrant, c.argGrantBoxed
		if o.TTL != c.o.ttl {
			g = "|" + strconv.FormatInt(grant.Milliseconds(), 10) + "|"
			argWaiter = g
		}
	}
	waiter := func() string { return id + g + owner }
	// A client subscribes to its wake-up channel on its first wait, not its
	// first Obtain: until then a first attempt does not queue.
	subscribeFirst := queue && notified && !c.listen.Subscribed(ctx, keys[0], c.chanPrefix+c.id)
	// Boxed once per call (and the default TTL once per client).
	var argTTL, argID any = c.argTTL, id
	if !o.DefaultTTL { // a TTL the caller chose: a re-entry raises the hold's to it
		argTTL = o.TTL.Milliseconds()
	}
	argOwner := argID // the owner is the call's id unless ctx names one
	if owner != id {
		argOwner = owner
	}
	queued := argNo
	var timer *time.Timer
	for attempt := 1; ; attempt++ {
		sent := c.o.now()
		w := argWaiter
		if subscribeFirst {
			w = nil
		} else if queue && wake == nil {
			var err error
			if wake, err = c.register(id); err != nil {
				return nil, err
			}
			defer c.removeWaiter(id)
		}
		if w == nil {
			w = argEmpty
		}
		res, err := c.acquire(ctx, keys[:c.acquireKeys], argOwner, argTTL, w, c.argFair, c.argBound, argID)
		if err != nil {
			// The script may have run and its answer been lost for good
			// (a ctx that ended mid-flight, retries exhausted or off): it
			// may hold a level, or have queued the waiter, that nobody owns.
			c.forget(ctx, keys, owner, id)
			if w != argEmpty {
				c.leave(ctx, keys, waiter())
			}
			if ctx.Err() != nil {
				return nil, errors.Join(ErrNotObtained, ctx.Err())
			}
			return nil, err
		}
		if res.held {
			if res.fresh && res.acks < c.o.replicas {
				return nil, c.undo(ctx, key, keys, owner, id, o.TTL.Milliseconds(), res.acks)
			}
			return c.newLease(key, keys, owner, id, res.token, o, sent, gh), nil
		}
		c.notHeld(key, owner) // a live local hold of owner's is gone
		if !wait {
			return nil, ErrNotObtained
		}
		if subscribeFirst {
			if err := c.subscribe(ctx, keys[0]); err != nil {
				return nil, err
			}
			subscribeFirst = false
			continue // and queue at once
		}
		if queue {
			queued = argYes
		}
		d := res.wait
		if o.Retry != nil {
			d = o.Retry(attempt)
		}
		if queue {
			// Call in before the waiter is skipped, and before a grant
			// made to it right after this attempt runs out: a waiter
			// that hears no message (polling, or its message lost) would
			// otherwise find its grant gone, and queue again at the end.
			d = min(d, c.o.waiterTimeout/3, grant/2)
		}
		if queue && notified {
			// Its connection dropped, or the key moved, while it waited:
			// listen again within the wait's bound (notify.Relisten).
			_, d = c.listen.Relisten(ctx, keys[0], c.chanPrefix+c.id, d)
		}
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		select {
		case token := <-wake: // nil unless queued: then a release woke this waiter, or granted it the lock
			// A grant made after this attempt (which found the lock held
			// by another, and whose fencing token was res.token) holds
			// for grant from then on at least. A grant from before (a late
			// message), or past that, or when replicas must acknowledge:
			// the next attempt finds out and takes what is granted.
			if token > res.token && c.o.replicas == 0 && c.o.now().Before(sent.Add(grant)) {
				return c.newGrantedLease(key, keys, owner, id, token, o, sent, grant, gh), nil
			}
		case <-timer.C:
		case <-c.quit:
			if queued == argYes {
				c.leave(ctx, keys, waiter())
			}
			return nil, ErrClosed
		case <-ctx.Done():
			if queued == argYes {
				c.leave(ctx, keys, waiter())
			}
			return nil, errors.Join(ErrNotObtained, ctx.Err())
		}
	}
}

type acquired struct {
	held  bool
	fresh bool
	token int64 // held: the fencing token; not held: the counter's value
	wait  time.Duration
	acks  int
}

// acquire runs acquire.lua, pipelined with WAIT when replicas are required.
func (c *Client) acquire(ctx context.Context, keys []string, args ...any) (acquired, error) {
	var (
		res  []any
		acks int64
		err  error
	)
	if c.argMeta != nil {
		args = append(args, argEmpty, c.argMeta) // ARGV[7] (no token floor), ARGV[8]
	}
	if c.o.replicas == 0 {
		res, err = c.run.Run(ctx, c.pipe, redisfn.Acquire, keys, args...).Slice()
	} else {
		res, acks, err = c.acquireAndWait(ctx, keys, args)
	}
	if err != nil {
		return acquired{}, fmt.Errorf("lock: obtain %q: %w", keys[0], err)
	}
	var a acquired
	if len(res) < 2 {
		return a, fmt.Errorf("lock: obtain %q: unexpected reply %v", keys[0], res)
	}
	st, _ := res[0].(int64)
	v, _ := res[1].(int64)
	if st == 1 {
		f, _ := res[2].(int64)
		return acquired{held: true, fresh: f == 1, token: v, acks: int(acks)}, nil
	}
	a = acquired{wait: time.Duration(max(v, 1)) * time.Millisecond}
	if len(res) > 2 {
		a.token, _ = res[2].(int64)
	}
	return a, nil
}

// acquireAndWait sends acquire.lua and WAIT in one pipeline on one
// connection (WAIT counts the replicas that have that connection's writes).
func (c *Client) acquireAndWait(ctx context.Context, keys []string, args []any) ([]any, int64, error) {
	var conn redis.Scripter = c.rdb
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, 0, err
		}
		conn = m
	}
	pl, ok := conn.(interface{ Pipeline() redis.Pipeliner })
	if !ok {
		return nil, 0, fmt.Errorf("%w: WithWaitReplicas needs a client with pipelines, not %T", ErrInvalid, conn)
	}
	c.run.Prepare(ctx)
	for range 2 {
		pipe := pl.Pipeline()
		fcall, loads := c.run.Mode() == redisfn.Functions, c.run.Loads()
		var ev *redis.Cmd
		if fcall {
			ev = pipe.FCall(ctx, redisfn.Acquire.Name(), keys, args...)
		} else {
			ev = pipe.EvalSha(ctx, redisfn.Acquire.Hash(), keys, args...)
		}
		wait := pipe.Do(ctx, "WAIT", c.o.replicas, c.o.replicaWait.Milliseconds())
		_, _ = pipe.Exec(ctx)
		if err := ev.Err(); err != nil && !fcall && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if err := redisfn.Acquire.Eval().Load(ctx, conn).Err(); err != nil {
				return nil, 0, err
			}
			continue
		}
		if fcall && c.run.Recover(ctx, ev.Err(), loads) {
			continue // it did not run: the library is loaded again, or FCALL refused
		}
		res, err := ev.Slice()
		if err != nil {
			return nil, 0, err
		}
		acks, err := wait.Int64()
		if err != nil {
			return nil, 0, fmt.Errorf("WAIT: %w", err)
		}
		return res, acks, nil
	}
	return nil, 0, errors.New("script not loaded after SCRIPT LOAD")
}

// undo releases an acquisition that too few replicas acknowledged.
func (c *Client) undo(ctx context.Context, key string, keys []string, owner, id string, ttl int64, acks int) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	err := c.run.Run(rctx, c.rdb, redisfn.Release, []string{keys[0], keys[2], keys[3], keys[0] + ":r:" + c.nextID(), keys[1], keys[4]},
		owner, c.o.releaseWindow.Milliseconds(), c.chanPrefix, id).Err()
	e := fmt.Errorf("%w: %d of %d for %q", ErrTooFewReplicas, acks, c.o.replicas, key)
	if err != nil {
		return errors.Join(e, fmt.Errorf("lock: release after WAIT: %w", err))
	}
	return e
}

// forget drops the level call id may have taken for owner (an acquisition
// or a hand-off whose answer was lost), on a ctx detached from ctx's end.
// It drops nothing if there is no such level.
func (c *Client) forget(ctx context.Context, keys []string, owner, id string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	// A failure leaves the level to expire with the hold.
	_ = c.run.Run(rctx, c.rdb, redisfn.Release, []string{keys[0], keys[2], keys[3], keys[0] + ":r:" + id, keys[1], keys[4]},
		owner, c.argWindow, c.chanPrefix, id).Err()
}

// notHeld follows an attempt that found key held by another owner: a live
// hold of owner's on key through this client is gone from Redis, and is
// reported lost now rather than at its next renewal.
func (c *Client) notHeld(key, owner string) {
	c.mu.Lock()
	h := c.holds[holdKey{key, owner}]
	c.mu.Unlock()
	if h != nil {
		h.wd.Lose(fmt.Errorf("%w: %w", ErrNotHeld, watchdog.ErrNotHeld))
	}
}

// leave takes a waiter out of the queue after its ctx ended or its client
// closed, on a ctx detached from that end.
func (c *Client) leave(ctx context.Context, keys []string, waiter string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	// A failure leaves the entry to be skipped after the waiter timeout.
	_ = c.run.Run(rctx, c.rdb, redisfn.Leave, []string{keys[0], keys[2], keys[3], keys[1], keys[4]}, waiter, c.chanPrefix).Err()
}

func (c *Client) nextID() string {
	// One allocation: the id, its ':' and the number appended in place.
	var buf [64]byte
	b := append(append(buf[:0], c.id...), ':')
	return string(strconv.AppendUint(b, c.seq.Add(1), 10))
}

// begin numbers a call, or returns ErrClosed after Close.
func (c *Client) begin() (string, error) {
	select {
	case <-c.quit:
		return "", ErrClosed
	default:
	}
	return c.nextID(), nil
}

// register makes id's wake-up channel; it must run before the first attempt
// that queues id, so that no wake-up can arrive unregistered.
func (c *Client) register(id string) (chan int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	wake := make(chan int64, 1)
	c.waiters[id] = wake
	return wake, nil
}

func (c *Client) removeWaiter(id string) {
	c.mu.Lock()
	delete(c.waiters, id)
	c.mu.Unlock()
}

// wake delivers a message of the client's channel to the local waiter it
// names, if it still waits (notify.Deliver): "<id>" wakes it,
// "<id>|<token>" tells it a release granted it the lock with that token.
func (c *Client) wake(msg string) { notify.Deliver(msg, &c.mu, c.waiterLocked) }

// waiterLocked returns the channel of the local waiter with call id id, or
// nil. c.mu is held.
func (c *Client) waiterLocked(id string) chan int64 { return c.waiters[id] }

// subscribe makes sure the client's wake-up channel is subscribed on the
// server that holds key (the master of its slot on a Cluster) before any of
// its waiters for key is queued, so that no wake-up is published before
// anyone listens.
func (c *Client) subscribe(ctx context.Context, key string) error {
	switch _, err := c.listen.Listen(ctx, key, c.chanPrefix+c.id); {
	case err == nil:
		return nil
	case errors.Is(err, notify.ErrClosed):
		return ErrClosed
	case ctx.Err() != nil:
		return errors.Join(ErrNotObtained, ctx.Err())
	default:
		return fmt.Errorf("lock: subscribe: %w", err)
	}
}

// Close stops the client: it closes its Pub/Sub connections, wakes every
// waiting Obtain (which returns ErrClosed), and stops renewing held leases,
// whose Lost channels close with cause ErrClosed; the locks expire after
// their TTL unless released. Close does not close the Redis client. It is
// idempotent.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.quit)
	holds := make([]*hold, 0, len(c.holds))
	for _, h := range c.holds {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	c.listen.Close()
	for _, h := range holds {
		h.wd.Lose(ErrClosed)
	}
	c.pipe.Close()
	return nil
}
