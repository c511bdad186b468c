package semaphore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/coordkit/coordkit/internal/redisfn"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/watchdog"
)

// Permit is one permit of a semaphore, held until Release or loss. It
// implements lock.Lease and lock.LeaseStatus.
type Permit struct {
	c     *Client
	name  string
	keys  []string
	id    string
	token int64
	since time.Time
	wd    *watchdog.Watchdog

	released bool // protected by c.mu
	// late: the acquisition's answer came after the permit's first
	// deadline (written before the watchdog starts); until a renewal
	// moves that deadline (confirmed), such a permit is not held and never
	// handed to a caller, and its end is no permit lost (Discarded, at
	// Debug, no hook).
	late      bool
	confirmed atomic.Bool
}

var (
	_ lock.Lease       = (*Permit)(nil)
	_ lock.LeaseStatus = (*Permit)(nil)
)

// newPermit starts the watchdog of a permit that Redis holds from sent on
// for first (a grant's TTL), or ttl if first is 0.
func (c *Client) newPermit(name string, keys []string, id string, token int64, ttl, first, maxHold time.Duration, sent time.Time) *Permit {
	p := &Permit{c: c, name: name, keys: keys, id: id, token: token, since: sent}
	if first <= 0 || first > ttl {
		first = ttl // as watchdog.Config takes FirstTTL
	}
	p.late = !c.o.now().Before(sent.Add(first))
	wd, err := watchdog.Start(watchdog.Config{
		TTL:         ttl,
		FirstTTL:    first,
		MaxHold:     maxHold,
		LastRenewed: sent,
		Now:         c.o.now,
		Observer:    permitEvents{p},
		Renew: func(ctx context.Context) error {
			n, err := c.run.Run(ctx, c.rdb, redisfn.SemRenew, []string{keys[0], keys[5]}, id, ttl.Milliseconds()).Int64()
			switch {
			case err != nil:
				return fmt.Errorf("semaphore: renew %q: %w", name, err)
			case n == 0:
				return fmt.Errorf("%w: %w", lock.ErrNotHeld, watchdog.ErrNotHeld)
			}
			p.confirmed.Store(true) // before the watchdog moves the deadline
			return nil
		},
	})
	if err != nil { // ttl was checked against MinTTL: this is a bug
		panic(err)
	}
	p.wd = wd
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.permits[p] = struct{}{}
	}
	c.mu.Unlock()
	if closed {
		wd.Lose(ErrClosed)
	}
	return p
}

// permitEvents logs and reports a permit's watchdog events.
type permitEvents struct{ p *Permit }

func (e permitEvents) Renewed(err error) { e.p.c.obs.Renewed(e.p.name, e.p.id, e.p.token, err) }
func (e permitEvents) Lost(cause error) {
	if e.p.late && !e.p.confirmed.Load() { // never handed out
		e.p.c.obs.Discarded(e.p.name, e.p.id, e.p.token, cause)
		return
	}
	e.p.c.obs.Lost(e.p.name, e.p.id, e.p.token, lostErr(cause))
}

// discard ends a permit that was never handed out (a late answer): its
// watchdog stops; the caller gives the permit back in Redis.
func (p *Permit) discard() {
	c := p.c
	c.mu.Lock()
	p.released = true
	delete(c.permits, p)
	c.mu.Unlock()
	p.wd.Stop()
}

// Key returns the semaphore's name.
func (p *Permit) Key() string { return p.name }

// ID returns the permit's id (its member in the holders' sorted set).
func (p *Permit) ID() string { return p.id }

// Token returns the permit's fencing token: larger than the token of every
// permit of the semaphore acquired before it.
func (p *Permit) Token() int64 { return p.token }

// Lost returns a channel that is closed once the permit is no longer known
// to be held (renewals failed past its TTL, it was found expired, the
// client was closed).
func (p *Permit) Lost() <-chan struct{} { return p.wd.Lost() }

// Err returns nil while the permit is held, then an error matching
// lock.ErrLockLost and the reason (lock.ErrNotHeld, watchdog.ErrExpired,
// watchdog.ErrMaxHold, ErrClosed).
func (p *Permit) Err() error { return lostErr(p.wd.Err()) }

// Until returns the time until which the permit is known to be held, or
// the zero Time once it is lost.
func (p *Permit) Until() time.Time { return p.wd.Until() }

// errDeadlinePassed is the cause of the loss of a permit whose deadline
// had passed when its release began, and that Redis did not answer.
var errDeadlinePassed = fmt.Errorf("%w: %w: its deadline passed before its release", lock.ErrNotHeld, watchdog.ErrExpired)

func lostErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, watchdog.ErrNotHeld) && !errors.Is(err, lock.ErrNotHeld):
		return fmt.Errorf("%w: %w: %w", lock.ErrLockLost, lock.ErrNotHeld, err)
	}
	return fmt.Errorf("%w: %w", lock.ErrLockLost, err)
}

// Release gives the permit back and hands it to the first waiter, if one
// is queued. It returns lock.ErrNotHeld if the permit had expired on
// Redis's clock (swept or not), or was released before. If Redis does not
// answer, it returns the error and the permit expires after its TTL
// (renewals stop); a release that began after the permit's deadline had
// passed (on this client's clock, as Until reports it: the process was
// stopped or starved past it) and gets no answer reports the permit lost
// instead: Lost closes and the error matches lock.ErrNotHeld too, since
// the permit may be another holder's by then. A second Release returns
// lock.ErrNotHeld without asking Redis.
func (p *Permit) Release(ctx context.Context) error {
	err := p.release(ctx)
	if p.c.o.metrics != nil {
		p.c.obs.Released(p.name, err)
	}
	return err
}

func (p *Permit) release(ctx context.Context) error {
	c := p.c
	c.mu.Lock()
	done := p.released
	p.released = true
	delete(c.permits, p)
	c.mu.Unlock()
	if done {
		return lock.ErrNotHeld
	}
	// Whether the deadline had passed by this client's clock when the
	// release began, with no loss reported yet (as package lock judges it).
	expired := p.wd.Overdue()
	p.wd.Stop()
	if c.o.metrics != nil {
		c.obs.Held(p.name, time.Since(p.since))
	}
	keys := []string{p.keys[0], p.keys[2], p.keys[3], p.keys[4], p.keys[5], p.keys[0] + ":r:" + p.id, p.keys[1]}
	n, err := c.run.Run(ctx, c.rdb, redisfn.SemRelease, keys, p.id, c.o.permits, c.o.prefix+"wake:", releaseWindow.Milliseconds()).Int64()
	if err != nil {
		err = fmt.Errorf("semaphore: release %q: %w (the permit expires after its TTL)", p.name, err)
		if expired {
			p.wd.Lose(errDeadlinePassed)
			return fmt.Errorf("%w: %q: the permit's deadline passed before its release: %w", lock.ErrNotHeld, p.name, err)
		}
		return err
	}
	if n == 0 {
		return lock.ErrNotHeld
	}
	return nil
}
