package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/coordkit/coordkit/internal/redisfn"
	"github.com/coordkit/coordkit/watchdog"
)

// lease is one level of a hold obtained from a Client. Besides Lease it has
// Err, which reports why it was lost.
type lease struct {
	c         *Client
	h         *hold
	key       string
	keys      []string // release.lua's KEYS: hash, queue, deadlines, this release's marker, fence
	owner     string
	id        string // the obtaining call's id: the level's id in Redis (release.lua)
	token     int64
	ttl       int64 // ms
	released  bool  // protected by c.mu
	releasing bool  // protected by c.mu: a Release of this lease is under way
}

func (l *lease) Key() string           { return l.key }
func (l *lease) Token() int64          { return l.token }
func (l *lease) Lost() <-chan struct{} { return l.h.wd.Lost() }

// Owner returns the owner that holds the lease.
func (l *lease) Owner() string { return l.owner }

// Err returns nil while the lease is not known to be lost, and then an
// error matching ErrLockLost that wraps the cause (ErrNotHeld and
// watchdog.ErrNotHeld, watchdog.ErrExpired, watchdog.ErrMaxHold,
// ErrClosed). See LeaseStatus.
func (l *lease) Err() error { return lostErr(l.h.wd.Err()) }

// Until returns the time until which the lease is known to be held (see
// LeaseStatus), or the zero Time once it is lost.
func (l *lease) Until() time.Time { return l.h.wd.Until() }

// lostErr is a lease's Err for its watchdog's error: nil, or an error
// matching ErrLockLost and the reason; a lock found held by another owner
// or by nobody matches ErrNotHeld too.
func lostErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, watchdog.ErrNotHeld) && !errors.Is(err, ErrNotHeld):
		return fmt.Errorf("%w: %w: %w", ErrLockLost, ErrNotHeld, err)
	}
	return fmt.Errorf("%w: %w", ErrLockLost, err)
}

// newLease records one more level of owner's hold on key, starting the
// hold's watchdog on the first level. id is the obtaining call's id (the
// release's request id), at is when the acquisition was sent.
// keys are the lock's keys (hashlock.LockKeys). gh, if not nil, is the local line's
// front the obtaining call holds: a new hold keeps it, re-entry gives it up.
func (c *Client) newLease(key string, keys []string, owner, id string, token int64, o obtainOptions, at time.Time, gh *gateHold) *lease {
	return c.newGrantedLease(key, keys, owner, id, token, o, at, 0, gh)
}

// newGrantedLease is newLease for a lock that Redis holds for first (> 0)
// from at, less than o.TTL: the watchdog renews it before then. A first
// of 0 means o.TTL.
//
// The new level joins owner's live hold on key only if Redis answered that
// hold's token: a hold is identified by its token, which Redis keeps in the
// lock hash and answers on re-entry. A fresh acquisition (a larger token)
// while a hold is live means Redis lost that hold (a failover, an eviction,
// a restart, ForceRelease): it is reported lost at once, and its levels
// are not merged into the new one. An answer with a smaller token comes
// from a hold that a newer one replaced already: its lease is lost from
// the start. If the request was sent after the live hold was made, Redis
// had an older hold of the owner instead of the live one when it ran it
// (restarted from a snapshot taken during that older hold): the live hold
// is reported lost at once too.
func (c *Client) newGrantedLease(key string, keys []string, owner, id string, token int64, o obtainOptions, at time.Time, first time.Duration, gh *gateHold) *lease {
	k := holdKey{key, owner}
	l := &lease{c: c, key: key, owner: owner, id: id, token: token, ttl: o.TTL.Milliseconds(),
		keys: []string{keys[0], keys[2], keys[3], keys[0] + ":r:" + id, keys[1], keys[4]}}
	c.mu.Lock()
	h := c.holds[k]
	if h != nil {
		select {
		case <-h.wd.Lost(): // that hold is gone; its leases keep it
			h = nil
		default:
		}
	}
	var lose []*hold // holds to report lost, after c.mu is released
	switch {
	case h != nil && h.token == token: // re-entry (the owner's hold began meanwhile): the hold has its place
		gh.leave()
		// With a TTL the caller chose, Redis set the key's expiry to at
		// least o.TTL from when it ran the re-entry, never lower than it
		// was (acquire.lua); without, the level joins the hold as it is.
		if !o.DefaultTTL {
			h.raise(o.TTL, at)
		}
	case h != nil && token < h.token: // an answer about a hold that a newer one replaced
		if at.After(h.made) { // sent while h was live: Redis has an older hold, not h
			lose = append(lose, h)
			delete(c.holds, k)
		}
		h = &hold{c: c, k: k, since: at, token: token, gate: gh}
		h.ttl.Store(o.TTL.Milliseconds())
		h.wd = c.startWatchdog(h, o, at, first)
		lose = append(lose, h)
	default:
		if h != nil { // Redis lost h: this owner's new hold replaces it
			lose = append(lose, h)
		}
		h = &hold{c: c, k: k, since: at, made: c.o.now(), token: token, gate: gh}
		h.ttl.Store(o.TTL.Milliseconds())
		h.wd = c.startWatchdog(h, o, at, first)
		c.holds[k] = h
	}
	closed := c.closed
	h.levels++
	l.h = h
	c.mu.Unlock()
	for _, old := range lose {
		old.wd.Lose(fmt.Errorf("%w: %w", ErrNotHeld, watchdog.ErrNotHeld))
	}
	if closed { // Close has stopped every watchdog it saw
		h.wd.Lose(ErrClosed)
	}
	return l
}

func (c *Client) startWatchdog(h *hold, o obtainOptions, at time.Time, first time.Duration) *watchdog.Watchdog {
	key, owner, token := h.k.key, h.k.owner, h.token
	if first <= 0 || first > o.TTL {
		first = o.TTL // as watchdog.Config takes FirstTTL
	}
	h.late = !c.o.now().Before(at.Add(first))
	cfg := watchdog.Config{
		TTL:         o.TTL,
		FirstTTL:    first,
		MaxHold:     o.MaxHold,
		LastRenewed: at,
		Now:         c.o.now,
		Renew: func(ctx context.Context) error {
			// Built here, not per hold: most holds end before their first renewal.
			keys := []string{c.o.prefix + "{" + key + "}"}
			// The hold's TTL now (raised by re-entries), read after the
			// watchdog read its own (watchdog.Raise).
			n, err := c.run.Run(ctx, c.rdb, redisfn.Renew, keys, owner, h.ttl.Load(), strconv.FormatInt(token, 10)).Int64()
			switch {
			case err != nil:
				return fmt.Errorf("lock: renew %q: %w", key, err)
			case n == 0:
				return fmt.Errorf("%w: %w", ErrNotHeld, watchdog.ErrNotHeld)
			}
			h.confirmed.Store(true) // before the watchdog moves the deadline
			return nil
		},
	}
	cfg.Observer = h
	wd, err := watchdog.Start(cfg)
	if err != nil { // o was validated against MinTTL: this is a bug
		panic(err)
	}
	return wd
}

// raise makes ttl the hold's TTL if it is longer than the hold's (a level
// never shortens the hold), and records that Redis extended the hold by ttl
// from at (a re-entry sent then). The hold's TTL is stored before the
// watchdog's, so a renewal always sets at least what the watchdog counts.
func (h *hold) raise(ttl time.Duration, at time.Time) {
	ms := ttl.Milliseconds()
	for {
		cur := h.ttl.Load()
		if ms <= cur || h.ttl.CompareAndSwap(cur, ms) {
			break
		}
	}
	h.confirmed.Store(true) // before the deadline moves (see hold.late)
	h.wd.Raise(ttl, at)
}

// Renewed logs a renewal that failed and reports every renewal to the
// metrics (watchdog.Observer).
func (h *hold) Renewed(err error) { h.c.obs.Renewed(h.k.key, h.k.owner, h.token, err) }

// Lost passes the hold's place in the local line on (a lost hold lets the
// next in line try), and logs and reports the loss (watchdog.Observer); a
// late hold never renewed was never handed out, and is logged at Debug as
// discarded instead.
func (h *hold) Lost(cause error) {
	h.gate.leave()
	if h.late && !h.confirmed.Load() {
		h.c.obs.Discarded(h.k.key, h.k.owner, h.token, cause)
		return
	}
	h.c.obs.Lost(h.k.key, h.k.owner, h.token, lostErr(cause))
}

// Release drops one level of the hold; the outermost release grants the
// lock to the first waiter queued in Redis, or frees it (or hands it to the
// next goroutine in the client's local line). It returns ErrNotHeld if the lock was no
// longer held by the lease's owner, or the lease was released before. A
// release that failed with a Redis error may be called again: the retry
// gets the first attempt's answer (kept for the client's release window)
// and never drops a second level. After such a failure of the outermost
// level the hold is no longer renewed (as Redisson's unlock cancels its
// renewal whatever the outcome): if no retry gets through, the lock expires
// after its TTL. A release that Redis does not answer after the hold's
// deadline had passed (on this client's clock, as Until reports it; the
// process was stopped or starved past it) reports the hold lost: Lost
// closes and the error matches ErrNotHeld too, since another owner may hold
// the lock by then.
func (l *lease) Release(ctx context.Context) error {
	err := l.release(ctx)
	if l.c.o.metrics != nil {
		l.c.obs.Released(l.key, err)
	}
	return err
}

func (l *lease) release(ctx context.Context) error {
	c := l.c
	c.mu.Lock()
	busy := l.released || l.releasing
	l.releasing = true
	c.mu.Unlock()
	if busy { // released, or being released by a concurrent call
		return ErrNotHeld
	}
	defer func() {
		c.mu.Lock()
		l.releasing = false // a Release that failed may be called again
		c.mu.Unlock()
	}()
	// Whether the hold's deadline had passed by this client's clock when the
	// release began, with no loss reported yet: if Redis cannot answer, the
	// hold is reported lost.
	expired := l.h.wd.Overdue()
	if done, err := l.handoff(ctx); done {
		if err != nil && !errors.Is(err, ErrNotHeld) {
			l.abandon()
			return unanswered(l.h.wd, expired, l.key, err)
		}
		return err
	}
	left, err := c.run.Run(ctx, c.pipe, redisfn.Release, l.keys, l.owner, c.argWindow, c.argChan, l.id).Int64()
	if err != nil {
		l.abandon()
		return unanswered(l.h.wd, expired, l.key, fmt.Errorf("lock: release %q: %w", l.key, err))
	}
	if left < 0 {
		// Redis has no such level: the hold was lost (deleted, expired,
		// taken over) before this release. Report it as a renewal would
		// have: Lost closes, for every level of the hold.
		l.h.wd.Lose(errReleasedLost)
	}
	if !l.end() { // a concurrent Release of this lease got there first
		return ErrNotHeld
	}
	if left < 0 {
		return ErrNotHeld
	}
	return nil
}

// unanswered is the error of a release of the lease with watchdog wd and
// key that Redis did not answer (err). If the lease was overdue when the
// release began (expired: wd.Overdue), another owner may hold the lock
// already: the lease is reported lost (Lost closes) and the error matches
// ErrNotHeld too, instead of leaving the holder to believe that it may
// still hold it. Client, Simple and RW leases all release this way.
func unanswered(wd *watchdog.Watchdog, expired bool, key string, err error) error {
	if !expired {
		return err
	}
	wd.Lose(errDeadlinePassed)
	return fmt.Errorf("%w: %q: the hold's deadline passed before its release: %w", ErrNotHeld, key, err)
}

// errReleasedLost is the cause of the loss of a hold that a release found
// gone from Redis.
var errReleasedLost = fmt.Errorf("%w: %w: found gone by its release", ErrNotHeld, watchdog.ErrNotHeld)

// errDeadlinePassed is the cause of the loss of a hold whose deadline had
// passed when its release began, with no report of the loss yet.
var errDeadlinePassed = fmt.Errorf("%w: %w: its deadline passed before its release", ErrNotHeld, watchdog.ErrExpired)

// abandon follows a release that failed with a Redis error: if l is its
// hold's last level, the hold stops being renewed (the lock expires after
// its TTL unless a retried Release frees it sooner), leaves the client's
// holds and passes its place in the local line on. Without this, a release
// that was not retried would leave the lock renewed, and held, for as long
// as the client lives.
func (l *lease) abandon() {
	c := l.c
	c.mu.Lock()
	last := l.h.levels == 1 && !l.released
	if last && c.holds[l.h.k] == l.h {
		delete(c.holds, l.h.k)
	}
	c.mu.Unlock()
	if last {
		l.h.wd.Stop()
		l.h.gate.leave()
	}
}

// end records that l was released in Redis: one level less, and at zero
// the hold ends (its watchdog stops, its place in the local line passes
// on). It returns false if l had been released already.
func (l *lease) end() bool {
	c := l.c
	c.mu.Lock()
	if l.released {
		c.mu.Unlock()
		return false
	}
	l.released = true
	l.h.levels--
	var ended *hold
	if l.h.levels == 0 {
		ended = l.h
		if c.holds[ended.k] == ended {
			delete(c.holds, ended.k)
		}
	}
	c.mu.Unlock()
	if ended != nil {
		ended.wd.Stop()
		ended.gate.leave() // after the release: the next in line finds the lock free
		// A discarded hold (hold.late) was nobody's: no Held hook.
		if c.o.metrics != nil && (!ended.late || ended.confirmed.Load()) {
			c.obs.Held(l.key, c.o.now().Sub(ended.since))
		}
	}
	return true
}
