package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/lockopt"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/watchdog"
)

// holdKey identifies a hold: the levels one owner holds on one key through
// one Client. They share one watchdog and one token.
type holdKey struct{ key, owner string }

type hold struct {
	c      *Client
	k      holdKey
	since  time.Time // when the acquisition was sent
	made   time.Time // when its round's answer made it (rounds sent later see it on the masters)
	levels int       // protected by Client.mu
	token  int64
	level  string // the id of the hold's level on the masters (hashlock.NodeRelease's Level)
	ttl    time.Duration
	// renewTTL is the TTL in ns that renewals set: the longest any of the
	// hold's levels asked for (a level never shortens the hold).
	renewTTL atomic.Int64
	wd       *watchdog.Watchdog
	place    *place // the local line's front, given up when the hold ends or is lost; or nil
}

// lease is one level of a hold. Besides lock.Lease it has Owner and Err.
type lease struct {
	c        *Client
	h        *hold
	released bool // protected by c.mu
}

func (l *lease) Key() string           { return l.h.k.key }
func (l *lease) Lost() <-chan struct{} { return l.h.wd.Lost() }

// Token returns the lease's fencing token: the largest of the tokens the
// quorum's masters gave, after raising the counters of a quorum of the held
// masters to it (see the package documentation). Re-entry through the same
// Client returns the same token.
func (l *lease) Token() int64 { return l.h.token }

// Owner returns the owner that holds the lease.
func (l *lease) Owner() string { return l.h.k.owner }

// Err returns nil while the lease is not known to be lost, and then an
// error matching lock.ErrLockLost that wraps the cause (lock.ErrNotHeld
// and watchdog.ErrNotHeld, watchdog.ErrExpired, watchdog.ErrMaxHold,
// lock.ErrClosed). See lock.LeaseStatus.
func (l *lease) Err() error { return lostErr(l.h.wd.Err()) }

// lostErr is a lease's Err for its watchdog's error.
func lostErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, watchdog.ErrNotHeld) && !errors.Is(err, lock.ErrNotHeld):
		return fmt.Errorf("%w: %w: %w", lock.ErrLockLost, lock.ErrNotHeld, err)
	default:
		return fmt.Errorf("%w: %w", lock.ErrLockLost, err)
	}
}

// Until returns the time until which the lease is known to be held (see
// lock.LeaseStatus): the start of its last successful round on a quorum
// plus the TTL less the drift; the zero Time once it is lost.
func (l *lease) Until() time.Time { return l.h.wd.Until() }

// reenter returns one more level of a live hold of owner on key through
// this client, or nil if there is none. A level with a longer TTL than the
// hold's (ttl: the TTL the caller chose, 0 if none) makes it the hold's TTL
// from the next renewal on.
func (c *Client) reenter(key, owner string, ttl time.Duration) *lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.holds[holdKey{key, owner}]
	if h == nil || h.wd.Err() != nil || c.closed {
		return nil
	}
	h.levels++
	if ttl > 0 {
		h.raise(ttl)
	}
	return &lease{c: c, h: h}
}

// raise makes ttl the TTL of the hold's renewals if it is longer than the
// hold's (a level never shortens the hold). The deadline is not moved: the
// level took nothing on the masters (or what its round took there is
// released again). The hold's TTL is stored before the watchdog's, so a
// renewal always sets at least what the watchdog counts.
func (h *hold) raise(ttl time.Duration) {
	for {
		cur := h.renewTTL.Load()
		if int64(ttl) <= cur || h.renewTTL.CompareAndSwap(cur, int64(ttl)) {
			break
		}
	}
	h.wd.Raise(ttl-Drift(ttl), time.Time{})
}

// newLease records the hold a successful attempt took and starts its
// watchdog. If a live hold of the same owner on key appeared meanwhile (two
// goroutines of one owner obtaining at once), the new acquisition is a
// level of that hold and the round's level is released again, unless the
// round, sent after that hold was made, took a fresh hold on more masters
// than that hold can spare (more than N − quorum): then the masters had
// lost that hold, which is reported lost at once and replaced. (A round
// sent before it was made raced its round, and is fresh wherever it came
// first: a level of it.) (A hold merged while it was in fact lost is
// found out by its next renewal.) pl, the local line's front the call
// holds, goes with a new hold.
func (c *Client) newLease(ctx context.Context, key, owner string, o lockopt.Obtain, a attempt, pl *place) *lease {
	k := holdKey{key, owner}
	c.mu.Lock()
	old := c.holds[k]
	// A round sent before old was made raced old's own round on the masters
	// (one owner's goroutines obtaining at once): on each master one of the
	// two came first and took the hold fresh, the other re-entered it, so
	// its fresh answers say nothing of a loss.
	raced := old != nil && a.start.Before(old.made)
	if old != nil && old.wd.Err() == nil && !c.closed && (raced || a.fresh <= len(c.masters)-c.quorum) {
		old.levels++
		if !o.DefaultTTL {
			old.raise(o.TTL)
		}
		c.mu.Unlock()
		c.releaseOn(context.WithoutCancel(ctx), key, owner, a.level, o.TTL, c.o.slowTimeout(), nil, nil)
		pl.leave()
		return &lease{c: c, h: old}
	}
	h := &hold{c: c, k: k, since: a.start, made: c.o.now(), levels: 1, token: a.token, level: a.level, ttl: o.TTL, place: pl}
	h.renewTTL.Store(int64(o.TTL))
	h.wd = c.startWatchdog(h, o, a.start)
	c.holds[k] = h
	closed := c.closed
	c.mu.Unlock()
	if old != nil && old.wd.Err() == nil {
		old.wd.Lose(fmt.Errorf("%w: %w", lock.ErrNotHeld, watchdog.ErrNotHeld))
	}
	if closed { // Close has stopped every watchdog it saw
		h.wd.Lose(lock.ErrClosed)
	}
	return &lease{c: c, h: h}
}

// startWatchdog renews the hold on every master every TTL/3; a renewal
// succeeds with a quorum of renewed masters. The watchdog counts the
// lease's life as TTL − drift from the start of the last successful round
// (the acquisition's for the first), so Lost closes before the masters'
// holds can have expired.
func (c *Client) startWatchdog(h *hold, o lockopt.Obtain, start time.Time) *watchdog.Watchdog {
	key, owner, level := h.k.key, h.k.owner, h.level
	wd, err := watchdog.Start(watchdog.Config{
		Observer:    h,
		TTL:         o.TTL - Drift(o.TTL),
		Interval:    o.TTL / 3,
		MaxHold:     o.MaxHold,
		LastRenewed: start,
		Now:         c.o.now,
		Renew: func(ctx context.Context) error {
			return c.renew(ctx, key, owner, level, time.Duration(h.renewTTL.Load()))
		},
	})
	if err != nil { // o was validated by checkTTL: this is a bug
		panic(err)
	}
	return wd
}

// Renewed logs a renewal round that failed and reports every round to the
// metrics (watchdog.Observer).
func (h *hold) Renewed(err error) { h.c.obs.Renewed(h.k.key, h.k.owner, h.token, err) }

// Lost passes the hold's place in the local line on (a lost hold lets the
// next in line try), and logs and reports the loss (watchdog.Observer).
func (h *hold) Lost(cause error) {
	h.place.leave()
	h.c.obs.Lost(h.k.key, h.k.owner, h.token, lostErr(cause))
}

// renew extends owner's hold on every master. It returns nil with a quorum
// of renewals, an error matching watchdog.ErrNotHeld (and lock.ErrNotHeld)
// when so many masters answered "not held" that a quorum is impossible,
// and otherwise an error joining ErrNoQuorum with the masters' errors.
//
// The round waits on ctx (the watchdog's: Stop and the lease's deadline
// end it), but each master's command runs on a ctx detached from it,
// bounded by the slow bound and owned by the Client (Close waits for it):
// once a quorum decided the round, the watchdog cancels ctx, and a master
// whose command was not sent yet (a starved goroutine, a busy connection
// pool) would otherwise never be renewed. Its key would then expire one
// interval before the Until the round set, and the hold, fresh on only the
// quorum, would no longer survive one master losing its data (see the
// package documentation). A late renewal extends nothing but this hold's
// own level (renew.lua), which only its release removes.
func (c *Client) renew(ctx context.Context, key, owner, level string, ttl time.Duration) error {
	n := len(c.masters)
	detached := context.WithoutCancel(ctx)
	rs := fanOut(c, ctx, c.o.slowTimeout(), nil, func(out []reply[bool]) bool {
		ok, notHeld := 0, 0
		for _, r := range out {
			switch {
			case !r.done || r.err != nil:
			case r.v:
				ok++
			default:
				notHeld++
			}
		}
		return ok >= c.quorum || notHeld > n-c.quorum
	}, nil, blocking(c, func(_ context.Context, i int, _ redis.UniversalClient) (bool, error) {
		cctx, cancel := context.WithTimeout(detached, c.o.slowTimeout())
		defer cancel()
		return c.node.Renew(cctx, c.server(i), key, owner, level, ttl)
	}))
	ok, notHeld := 0, 0
	var errs []error
	for _, r := range rs {
		switch {
		case !r.done:
		case r.err != nil:
			errs = append(errs, nodeErr(r.err, "renew"))
		case r.v:
			ok++
		default:
			notHeld++
			errs = append(errs, &NodeError{Node: r.i, Addr: c.addrs[r.i], Op: "renew", Err: lock.ErrNotHeld})
		}
	}
	switch {
	case ok >= c.quorum:
		return nil
	case notHeld > len(c.masters)-c.quorum:
		return fmt.Errorf("%w: %w: %d of %d masters: %w", lock.ErrNotHeld, watchdog.ErrNotHeld,
			notHeld, len(c.masters), errors.Join(errs...))
	}
	return errors.Join(append([]error{ErrNoQuorum}, errs...)...)
}

// Release drops one level of the hold. When another goroutine of this
// Client waits in the key's local line, the outermost level hands the lock
// over to it (see the package documentation) and returns once that is
// decided: nil if a quorum of masters held this lease, else an error (see
// below). Otherwise the outermost level releases the
// lock on every master in parallel (each bounded by 20 × the node timeout,
// at least 100 ms, and by ctx), which wakes the first waiter on each; it
// returns as soon as a quorum answered alike (the other releases go on in
// the background, owned by the Client), nil if a quorum of masters held it.
// Otherwise it returns an error joined with the masters' errors: matching
// lock.ErrNotHeld when so many masters answered "not held" that no quorum
// had the hold, and matching ErrNoQuorum when masters that did not answer in
// time (or failed) leave it unconfirmed — unless the hold's deadline (its
// validity on this client's clock, as Until reports it) had passed when the
// release began, with no loss reported yet (the process was stopped or
// starved past it): then another client may hold the lock already, the
// hold is reported lost (Lost closes) and the error matches
// lock.ErrNotHeld too, and no hand-off is made. An inner level returns
// lock.ErrNotHeld if the lease was lost, or its deadline had passed (it is
// then reported lost). Releasing a lease twice
// returns lock.ErrNotHeld. A release is not retried: masters it did not
// reach free the lock after the TTL.
func (l *lease) Release(ctx context.Context) error {
	err := l.release(ctx)
	if l.c.o.metrics != nil {
		l.c.obs.Released(l.h.k.key, err)
	}
	return err
}

func (l *lease) release(ctx context.Context) error {
	c, h := l.c, l.h
	// Whether the hold's deadline had passed by this client's clock when the
	// release began, with no loss reported yet (watchdog's Overdue).
	expired := h.wd.Overdue()
	c.mu.Lock()
	if l.released {
		c.mu.Unlock()
		return lock.ErrNotHeld
	}
	l.released = true
	h.levels--
	last := h.levels == 0
	if last && c.holds[h.k] == h {
		delete(c.holds, h.k)
	}
	c.mu.Unlock()
	if !last {
		if expired {
			h.wd.Lose(errDeadlinePassed)
		}
		if h.wd.Err() != nil {
			return lock.ErrNotHeld
		}
		return nil
	}
	h.wd.Stop()
	if c.o.metrics != nil {
		c.obs.Held(h.k.key, c.o.now().Sub(h.since))
	}
	if ctx.Err() == nil && h.wd.Err() == nil && !expired {
		if lr := h.place.next(); lr != nil {
			return c.handOff(ctx, h, lr)
		}
	}
	n := len(c.masters)
	rs := c.releaseOn(ctx, h.k.key, h.k.owner, h.level, h.ttl, c.o.slowTimeout(), nil, func(out []reply[int64]) bool {
		held, not := 0, 0
		for _, r := range out {
			switch {
			case !r.done || r.err != nil:
			case r.v >= 0:
				held++
			default:
				not++
			}
		}
		return held >= c.quorum || not > n-c.quorum
	})
	h.place.leave() // decided: the next in line attempts
	held, notHeld := 0, 0
	var errs []error
	for _, r := range rs {
		switch {
		case !r.done:
			errs = append(errs, &NodeError{Node: r.i, Addr: c.addrs[r.i], Op: "release", Err: errNoAnswer})
		case r.err != nil:
			errs = append(errs, nodeErr(r.err, "release"))
		case r.v >= 0:
			held++
		default:
			notHeld++
			errs = append(errs, &NodeError{Node: r.i, Addr: c.addrs[r.i], Op: "release", Err: lock.ErrNotHeld})
		}
	}
	err := releaseResult(c, h.k.key, held, notHeld, errs)
	if errors.Is(err, lock.ErrNotHeld) {
		// No quorum had the hold: it was lost before this release. Lost
		// closes, as a renewal would have reported.
		h.wd.Lose(fmt.Errorf("%w: %w: found gone by its release", lock.ErrNotHeld, watchdog.ErrNotHeld))
	}
	if err != nil && expired && !errors.Is(err, lock.ErrNotHeld) {
		// Not confirmed by a quorum, after the deadline: another client
		// may hold the lock already. The hold is lost; say so (Lost closes)
		// instead of leaving the holder to believe it may still hold it.
		h.wd.Lose(errDeadlinePassed)
		return fmt.Errorf("%w: %q: the hold's deadline passed before its release: %w", lock.ErrNotHeld, h.k.key, err)
	}
	return err
}

// errDeadlinePassed is the cause of the loss of a hold whose deadline (its
// validity, on the client's clock) had passed when its release began, with
// no report of the loss yet: the process was stopped or starved past it.
var errDeadlinePassed = fmt.Errorf("%w: %w: its deadline passed before its release", lock.ErrNotHeld, watchdog.ErrExpired)

// releaseResult is a Release's answer from its round: nil when a quorum of
// masters had the hold (and released it); lock.ErrNotHeld when so many
// answered "not held" that no quorum had it; otherwise the release is not
// confirmed (masters silent or failing: a slow network, a loaded host),
// which is not "not held": an error joining ErrNoQuorum and the masters'
// errors. Where the release did not run, the hold expires after its TTL.
func releaseResult(c *Client, key string, held, notHeld int, errs []error) error {
	switch {
	case held >= c.quorum:
		return nil
	case notHeld > len(c.masters)-c.quorum:
		return errors.Join(append([]error{lock.ErrNotHeld}, errs...)...)
	}
	return fmt.Errorf("redlock: release of %q not confirmed by a quorum (where it did not run, the hold expires after its TTL): %w",
		key, errors.Join(append([]error{ErrNoQuorum}, errs...)...))
}
