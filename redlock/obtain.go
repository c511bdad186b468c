package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/lockopt"
	"github.com/coordkit/coordkit/internal/redisver"
	"github.com/coordkit/coordkit/lock"
)

// resolve checks the call's arguments and applies defaults.
func (c *Client) resolve(key string, opts []lock.Option) (lockopt.Obtain, error) {
	o := lockopt.Apply(opts)
	if c == nil {
		return o, invalid("nil *redlock.Client")
	}
	if hashlock.CheckKey(key) != nil {
		return o, invalid("key %q is empty or begins with '}' (it would break the Cluster hash tag)", key)
	}
	if o.TTL == 0 {
		o.TTL, o.DefaultTTL = c.o.ttl, true
	}
	o.TTL = o.TTL.Truncate(time.Millisecond) // as the masters count it
	if err := c.o.checkTTL(o.TTL, "TTL"); err != nil {
		return o, err
	}
	if o.MaxHold < 0 {
		return o, invalid("negative MaxHold %v", o.MaxHold)
	}
	return o, nil
}

// Obtain blocks until key is held by ctx's owner (a new random owner if ctx
// carries none) on a quorum of masters, ctx ends, or the client is closed.
// It re-enters a lock the owner already holds through this client (same
// lease token, no round trip). The goroutines of this client that want the
// same key wait in a local line (see the package documentation); the one at
// the front attempts, and a release hands the lock over to the next in
// line, who then holds it without an attempt of its own. Waiting is
// notified: each waiter is queued on every master where another owner
// holds the lock, and the release that frees it there wakes the first
// waiter through this client's subscription to that master; each wait is
// also bounded by the holder's remaining TTL and a third of the waiter
// timeout. After an attempt that took some
// masters but not a quorum it pauses a random jitter; when masters fail it
// backs off. With lock.WithRetry it polls at the given delays instead.
//
// Errors: errors.Join(lock.ErrNotObtained, ctx.Err(), the last attempt's
// errors) when ctx ends first; ErrInvalid for bad arguments (it also
// matches lock.ErrInvalid); lock.ErrClosed after Close.
func (c *Client) Obtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return c.obtain(ctx, key, true, opts)
}

// TryObtain makes one attempt. When it does not get a quorum with validity
// left it releases what it took and returns lock.ErrNotObtained joined with
// ErrNoQuorum (or ErrNoValidity, ErrFence) and the masters' errors
// (*NodeError). Its other errors are Obtain's.
func (c *Client) TryObtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return c.obtain(ctx, key, false, opts)
}

func (c *Client) obtain(ctx context.Context, key string, wait bool, opts []lock.Option) (lock.Lease, error) {
	if c.o.metrics == nil {
		return c.obtainLease(ctx, key, wait, opts)
	}
	begin := c.o.now()
	l, err := c.obtainLease(ctx, key, wait, opts)
	c.obs.Waited(key, c.o.now().Sub(begin), err)
	return l, err
}

func (c *Client) obtainLease(ctx context.Context, key string, wait bool, opts []lock.Option) (lock.Lease, error) {
	o, err := c.resolve(key, opts)
	if err != nil {
		return nil, err
	}
	l, err := c.obtainResolved(ctx, key, wait, o)
	if err != nil && !errors.Is(err, lock.ErrClosed) {
		// Only a failed call asks the masters' versions: on a master older
		// than lock.MinRedisVersion every acquisition fails, and a call
		// that succeeds needs no answer (nor waits for a silent master).
		if verr := c.checkServers(ctx); verr != nil {
			return nil, verr
		}
	}
	return l, redisver.Translate(err, redisver.Min, redisver.Need, lock.ErrServerVersion)
}

// checkServers asks every master for its version at the client's first
// failed obtain (each Gate asks once), all at once, and waits for the answers as
// long as an acquisition waits for a master's (WithNodeTimeout): a master
// that answers later gives its verdict to the calls after, and a dead one
// never holds up the quorum. The asks run as the Client's background work
// (Close waits for them), each bounded by the release timeout (for clients
// that honour ctx deadlines). A master found too old fails the call with
// lock.ErrServerVersion.
func (c *Client) checkServers(ctx context.Context) error {
	if c.versChecked.Load() {
		return nil
	}
	var ask []int
	decided := true
	for i := range c.vers {
		switch {
		case c.vers[i].Pending():
			ask = append(ask, i)
			decided = false
		case !c.vers[i].Done():
			decided = false // an ask in flight
		}
	}
	if decided {
		for i := range c.vers {
			if err := c.vers[i].Check(ctx, c.masters[i], redisver.Min, redisver.Need, lock.ErrServerVersion); err != nil {
				return err
			}
		}
		c.versChecked.Store(true)
		return nil
	}
	if len(ask) == 0 {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.bg.Add(len(ask))
	c.mu.Unlock()
	errs := make(chan error, len(ask))
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.slowTimeout())
	var left atomic.Int32 // asks still running; the last one cancels cctx
	left.Store(int32(len(ask)))
	done := func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
	for _, i := range ask {
		go func() {
			defer c.bg.Done()
			defer done()
			errs <- c.vers[i].Check(cctx, c.masters[i], redisver.Min, redisver.Need, lock.ErrServerVersion)
		}()
	}
	timer := time.NewTimer(c.o.nodeTimeout)
	defer timer.Stop()
	for range ask {
		select {
		case err := <-errs:
			if err != nil {
				return err
			}
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

func (c *Client) obtainResolved(ctx context.Context, key string, wait bool, o lockopt.Obtain) (lock.Lease, error) {
	var err error
	owner, ok := lock.OwnerFrom(ctx)
	if !ok {
		owner = lock.NewOwner()
	}
	if l := c.reenter(key, owner, chosenTTL(o)); l != nil {
		return l, nil
	}
	var pl *place
	if wait {
		var a *attempt
		if pl, a, err = c.lines.enter(ctx, key, c.quit, owner, o.TTL); err != nil {
			if a != nil { // handed over as ctx ended: give it back where it may be held
				c.releaseOn(context.WithoutCancel(ctx), key, owner, a.level, o.TTL, c.o.slowTimeout(),
					func(i int) bool { return !a.missed[i] }, nil)
			}
			pl.leave()
			return nil, err
		}
		if a != nil { // the previous holder's release handed the lock over
			return c.newLease(ctx, key, owner, o, *a, pl), nil
		}
		// The owner's hold may have begun while this call waited in line
		// (one owner in two goroutines): a level of it, not an attempt.
		if l := c.reenter(key, owner, chosenTTL(o)); l != nil {
			pl.leave()
			return l, nil
		}
	}
	l, err := c.attempts(ctx, key, owner, wait, o, pl)
	if err != nil {
		pl.leave()
		return nil, err
	}
	return l, nil
}

// attempts obtains key for owner; pl, if not nil, is the front of the
// key's local line, which the new hold keeps.
func (c *Client) attempts(ctx context.Context, key, owner string, wait bool, o lockopt.Obtain, pl *place) (lock.Lease, error) {
	var err error
	queue := wait && o.Retry == nil
	var (
		waiter string
		wake   chan struct{}
	)
	// A client subscribes on its first wait, not its first Obtain: until
	// then a first attempt does not queue.
	subscribeFirst := false
	if queue {
		subscribeFirst = !c.subscribed()
		if waiter, wake, err = c.addWaiter(); err != nil {
			return nil, err
		}
		defer c.removeWaiter(waiter)
	} else if c.isClosed() {
		return nil, lock.ErrClosed
	}
	queued := false
	fails := 0
	var timer *time.Timer
	for attempt := 1; ; attempt++ {
		w := waiter
		if subscribeFirst {
			w = ""
		}
		a := c.attempt(ctx, key, owner, o.TTL, w)
		if a.ok {
			if w != "" && a.got < len(c.masters) {
				// The waiter may still be queued where it did not acquire;
				// left there it would take the wake-ups meant for others.
				c.leaveOn(ctx, key, waiter, a.missed)
			}
			return c.newLease(ctx, key, owner, o, a, pl), nil
		}
		if w != "" && a.elsewhere > 0 {
			queued = true
		}
		if ctx.Err() != nil {
			c.leave(ctx, key, waiter, queued)
			return nil, errors.Join(lock.ErrNotObtained, ctx.Err(), a.err)
		}
		if !wait {
			return nil, errors.Join(lock.ErrNotObtained, a.err)
		}
		if subscribeFirst {
			if err := c.subscribe(ctx); err != nil {
				return nil, errors.Join(err, a.err)
			}
			subscribeFirst = false
			continue // and queue at once
		}
		d, listen := c.pause(a, o, attempt, &fails)
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		var woken <-chan struct{}
		if listen {
			woken = wake
		}
		select {
		case <-woken: // a release on some master woke this waiter
		case <-timer.C:
		case <-c.quit:
			c.leave(ctx, key, waiter, queued)
			return nil, lock.ErrClosed
		case <-ctx.Done():
			c.leave(ctx, key, waiter, queued)
			return nil, errors.Join(lock.ErrNotObtained, ctx.Err(), a.err)
		}
	}
}

// pause returns how long to wait after a failed attempt, and whether a
// wake-up may end the wait early.
func (c *Client) pause(a attempt, o lockopt.Obtain, attempt int, fails *int) (time.Duration, bool) {
	if o.Retry != nil {
		return max(o.Retry(attempt), 0), false
	}
	n := len(c.masters)
	switch {
	case a.elsewhere > n-c.quorum:
		// Another owner holds enough masters to deny a quorum: wait for its
		// release, at most until its hold would expire, and call in before
		// the waiter would be skipped.
		*fails = 0
		return min(a.minWait, c.o.waiterTimeout/3), true
	case a.got > 0 || a.elsewhere > 0:
		// A split vote between contenders: a random pause, so that the next
		// round is not split the same way.
		*fails = 0
		return c.jitter(c.o.jitter), false
	default:
		// Failing masters: back off, doubling up to maxBackoff.
		*fails++
		d := min(c.o.jitter<<min(*fails, 16), maxBackoff)
		return d/2 + c.jitter(d/2), true
	}
}

// jitter returns a random duration in [0, d).
func (c *Client) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(c.o.randN(int64(d)))
}

// attempt is the outcome of one acquisition round.
type attempt struct {
	ok        bool
	token     int64
	start     time.Time // when the round began: the lease's TTL counts from it
	got       int       // masters held by the owner
	elsewhere int       // masters held by another owner
	failed    int       // masters that failed or did not answer in time
	minWait   time.Duration
	missed    []bool // masters not held by the owner after the round
	err       error  // why the attempt failed
	level     string // the id of the level the round took on each master (hashlock.NodeAcquire's Request)
	fresh     int    // masters where the round took a new hold (the owner held nothing there)
	reentered int    // masters that answered that the owner held the lock already
}

// attempt runs acquire.lua on every master in parallel, each bounded by
// the node timeout. With a quorum and validity left (TTL − elapsed −
// drift > 0) it raises the fencing counters if needed and succeeds;
// otherwise it releases what it may have taken, on every master except
// those that answered that another owner holds the lock, and fails.
func (c *Client) attempt(ctx context.Context, key, owner string, ttl time.Duration, waiter string) attempt {
	start := c.o.now()
	// One id for the round's level on every master (a master that runs the
	// acquisition twice, after go-redis resent it, takes one level), and
	// one clock reading as every master's token floor, so that the masters'
	// fresh tokens agree and need no raising.
	req := hashlock.NodeAcquire{
		Owner: owner, TTL: ttl, Waiter: waiter,
		WaiterTimeout: c.o.waiterTimeout, Request: c.node.WaiterID(c.id, c.nextSeq()), Floor: start.UnixMicro(),
		Meta: c.o.meta,
	}
	// A quorum decides a success at once (masters that answer later hold a
	// level the lease renews and releases); a failure is decided when
	// every master answered or the node timeout passed. An answer after
	// the decision is late: a waiter queued by it leaves the queue there
	// (left in it, it would take the wake-ups meant for others), and if
	// the round failed, a level it took (or may have: an error) is
	// released there, as the failure's releases may have overtaken it.
	fate := new(outcome)
	late := func(i int, v hashlock.NodeResult, err error) {
		if waiter != "" && (err != nil || !v.Held) {
			c.leaveOne(ctx, i, key, waiter)
		}
		if err == nil && !v.Held {
			return // took nothing there
		}
		fate.ifFailed(func() {
			c.releaseOn(context.WithoutCancel(ctx), key, owner, req.Request, ttl, c.o.slowTimeout(),
				func(j int) bool { return j == i }, nil)
		})
	}
	rs := fanOut(c, ctx, c.o.nodeTimeout, nil, func(out []reply[hashlock.NodeResult]) bool {
		got := 0
		for _, r := range out {
			if r.done && r.err == nil && r.v.Held {
				got++
			}
		}
		return got >= c.quorum
	}, late, func(ctx context.Context, i int, done func(hashlock.NodeResult, error)) {
		c.node.AcquireGo(ctx, c.async(i), key, req, done)
	})
	a := attempt{start: start, minWait: c.o.waiterTimeout, missed: make([]bool, len(rs)), level: req.Request}
	defer func() { fate.set(c, !a.ok) }()
	var errs []error
	unanswered, erred := 0, 0
	for _, r := range rs {
		a.missed[r.i] = r.done && (r.err != nil || !r.v.Held) // late answers leave by themselves
		switch {
		case !r.done: // not awaited (the round succeeded without it), or no answer in time
			unanswered++
			errs = append(errs, &NodeError{Node: r.i, Addr: c.addrs[r.i], Op: "acquire", Err: errNoAnswer})
		case r.err != nil:
			a.failed++
			erred++
			errs = append(errs, nodeErr(r.err, "acquire"))
		case r.v.Held:
			a.got++
			a.token = max(a.token, r.v.Token)
			if r.v.Fresh {
				a.fresh++
			} else {
				a.reentered++
			}
		default:
			a.elsewhere++
			a.minWait = min(a.minWait, r.v.Wait)
			errs = append(errs, &NodeError{Node: r.i, Addr: c.addrs[r.i], Op: "acquire", Err: errHeldElsewhere})
		}
	}
	var why error
	switch {
	case a.got < c.quorum:
		a.failed += unanswered
		why = ErrNoQuorum
	case ttl-c.o.now().Sub(start)-Drift(ttl) <= 0:
		why = ErrNoValidity
	default:
		if err := c.raiseFence(ctx, key, owner, rs, a.token); err != nil {
			why = err
		} else if ttl-c.o.now().Sub(start)-Drift(ttl) <= 0 {
			why = ErrNoValidity
		} else {
			a.ok = true
			return a
		}
	}
	// Release on every master that may hold the owner's new level: those
	// that said so, those whose answer was lost, and those that have not
	// answered. Not on the masters that answered that another owner holds
	// the lock (the script took nothing there). The release names the
	// round's level, so where the round took nothing (a lost answer of a
	// round that never ran) it drops nothing, not even a level of a hold
	// the owner has through another client.
	//
	// The masters that answered that they hold it are released before the
	// next attempt, each bounded by the slow bound. The silent ones and
	// those that answered with an error (a master down refuses every
	// command, its release too, and would hold the round for the slow
	// bound) are released in the background, so that such a master costs
	// the attempt the node timeout and no more; where such a release
	// arrives before the acquisition it would undo, the acquisition's late
	// answer (or its error) releases the level again (late above). An
	// attempt of the same owner that reaches the master in between
	// re-enters the hold with a level of its own, which this release does
	// not drop.
	held := func(i int) bool { return rs[i].done && rs[i].err == nil && rs[i].v.Held }
	c.releaseOn(context.WithoutCancel(ctx), key, owner, a.level, ttl, c.o.slowTimeout(), held, nil)
	if unanswered+erred > 0 {
		c.background(func() {
			c.releaseOn(context.WithoutCancel(ctx), key, owner, a.level, ttl, c.o.slowTimeout(),
				func(i int) bool { return !rs[i].done || rs[i].err != nil }, nil)
		})
	}
	a.err = errors.Join(append([]error{why}, errs...)...)
	return a
}

// raiseFence makes the lease's token t safe to compare across holders: it
// needs a quorum of the masters the owner holds to have a fencing counter
// of at least t before the lease is returned (any later holder's quorum
// shares one of them, where its fresh token exceeds t). Masters that
// answered t already count; the others are raised with raise_fence.lua,
// which also records t as the token of owner's hold there, so that a
// re-entry through another client answers t from any quorum.
func (c *Client) raiseFence(ctx context.Context, key, owner string, rs []reply[hashlock.NodeResult], t int64) error {
	have := 0
	for _, r := range rs {
		if r.err == nil && r.v.Held && r.v.Token == t {
			have++
		}
	}
	if have >= c.quorum {
		return nil
	}
	k := c.node.Keys(key)
	keys := []string{k.Fence, k.Lock}
	raised := fanOut(c, ctx, c.o.nodeTimeout,
		func(i int) bool { return rs[i].err == nil && rs[i].v.Held && rs[i].v.Token < t }, nil, nil,
		blocking(c, func(ctx context.Context, _ int, rdb redis.UniversalClient) (int64, error) {
			return raiseFenceScript.Run(ctx, rdb, keys, t, owner).Int64()
		}))
	var errs []error
	for _, r := range raised {
		switch {
		case !r.done:
			if rs[r.i].err == nil && rs[r.i].v.Held && rs[r.i].v.Token < t { // sent, no answer in time
				errs = append(errs, &NodeError{Node: r.i, Addr: c.addrs[r.i], Op: "fence", Err: errNoAnswer})
			}
		case r.err != nil:
			errs = append(errs, nodeErr(r.err, "fence"))
		case r.v >= t:
			have++
		}
	}
	if have >= c.quorum {
		return nil
	}
	return errors.Join(append([]error{ErrFence}, errs...)...)
}

// releaseOn releases level (hashlock.NodeRelease's Level) of owner's hold on
// the masters with on(i) (all if on is nil), in parallel, bounded by
// timeout and ctx; a hold that a release does not reach expires after the
// TTL. It returns the answers.
func (c *Client) releaseOn(ctx context.Context, key, owner, level string, ttl time.Duration,
	timeout time.Duration, on func(i int) bool, enough func([]reply[int64]) bool) []reply[int64] {
	req := c.node.WaiterID(c.id, c.nextSeq())
	return fanOut(c, ctx, timeout, on, enough, nil,
		func(ctx context.Context, i int, done func(int64, error)) {
			c.node.ReleaseGo(ctx, c.async(i), key, hashlock.NodeRelease{
				Owner: owner, Request: req, Window: c.o.releaseWindow, Level: level,
			}, done)
		})
}

// leave takes a waiter out of the queue on every master after its ctx
// ended or its client closed, on a ctx detached from that end.
func (c *Client) leave(ctx context.Context, key, waiter string, queued bool) {
	if queued {
		c.leaveOn(ctx, key, waiter, nil)
	}
}

// leaveOn takes a waiter out of the queue on the masters with on[i] (all
// if on is nil), on a ctx detached from ctx's cancellation, without
// waiting for the answers (the Client owns the round trips).
func (c *Client) leaveOn(ctx context.Context, key, waiter string, on []bool) {
	// A failure leaves the entry to be skipped after the waiter timeout.
	fanOut(c, context.WithoutCancel(ctx), c.o.slowTimeout(), func(i int) bool { return on == nil || on[i] },
		func([]reply[bool]) bool { return true }, nil,
		blocking(c, func(ctx context.Context, i int, _ redis.UniversalClient) (bool, error) {
			return c.node.Leave(ctx, c.server(i), key, waiter)
		}))
}

// leaveOne takes a waiter out of the queue on master i.
func (c *Client) leaveOne(ctx context.Context, i int, key, waiter string) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.slowTimeout())
	defer cancel()
	_, _ = c.node.Leave(lctx, c.server(i), key, waiter) // else skipped after the waiter timeout
}

// subscribed reports whether the client's subscriptions were started.
func (c *Client) subscribed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subs != nil
}

// chosenTTL is the TTL the call chose, or 0 if it gave none (the default:
// a re-entry then joins the hold as it is).
func chosenTTL(o lockopt.Obtain) time.Duration {
	if o.DefaultTTL {
		return 0
	}
	return o.TTL
}
