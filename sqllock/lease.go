package sqllock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/watchdog"
)

// hold is one lock the Client holds: the levels of one owner's re-entry
// share it, and its watchdog.
type hold struct {
	c          *Client
	key, owner string
	name       string // prefix + key
	id         any    // session lock: MySQL lock name or PostgreSQL key
	token      int64
	since      time.Time     // when the acquiring statement was sent
	ttl        time.Duration // set before register, then read-only
	wd         *watchdog.Watchdog
	hk         holdKey // set before register, then read-only
	owned      bool    // hk is in Client.owned

	// Protected by Client.mu.
	levels int
	ending bool      // the outermost Release is under way: it owns conn
	lost   bool      // reported lost
	conn   *sql.Conn // session lock: the pinned connection; nil once given up
	line   *line     // the place at the front of the local line; nil once left
}

// Lease is one level of hold on a key. Its methods are safe for concurrent
// use.
type Lease struct {
	h        *hold
	released atomic.Bool
}

// Key returns the key the lease holds.
func (l *Lease) Key() string { return l.h.key }

// Owner returns the owner that holds the lease: ctx's (lock.WithOwner) or
// a random one.
func (l *Lease) Owner() string { return l.h.owner }

// Token returns the fencing token: strictly larger for every new
// acquisition of the key (see the package documentation), the same on
// re-entry.
func (l *Lease) Token() int64 { return l.h.token }

// Lost returns a channel that is closed once the lock is no longer known
// to be held: a session lock's connection broke or was found not holding
// the lock, a lease-table row was found taken or gone, checks or renewals
// failed for a whole TTL, MaxHold passed, or the Client was closed. Release
// does not close it.
func (l *Lease) Lost() <-chan struct{} { return l.h.wd.Lost() }

// Err returns nil while the lease is not known to be lost, and then an
// error matching lock.ErrLockLost and the reason: ErrSessionLost and
// lock.ErrNotHeld (the session ended, or no longer holds the lock),
// lock.ErrNotHeld (a lease-table row taken or gone), watchdog.ErrExpired,
// watchdog.ErrMaxHold or ErrClosed. See lock.LeaseStatus.
func (l *Lease) Err() error { return lostErr(l.h.wd.Err()) }

// Until returns the time until which the lease is known to be held (see
// lock.LeaseStatus): the send time of the last successful renewal (lease
// table) or check (session lock), or of the acquisition, plus the TTL; the
// zero Time once it is lost. A session lock has no expiry in the
// database: it ends with its session, which a cut connection ends at any
// moment, so Until bounds how late the loss is reported, not the hold.
func (l *Lease) Until() time.Time { return l.h.wd.Until() }

// Release drops one level of re-entry; the outermost one frees the lock: a
// session lock's RELEASE_LOCK or pg_advisory_unlock, after which its
// connection goes back to the pool (or is closed, freeing the lock with its
// session, if the release cannot be confirmed); a lease-table row is marked
// free. It returns lock.ErrNotHeld if the lease was released before, or
// was lost, or the lock was no longer held, and the database's error if
// the release failed (a lease-table row then expires after its TTL).
func (l *Lease) Release(ctx context.Context) error {
	err := lock.ErrNotHeld
	if l.released.CompareAndSwap(false, true) {
		err = l.h.release(ctx)
	}
	l.h.c.obs.Released(l.h.key, err)
	return err
}

func (h *hold) release(ctx context.Context) error {
	c := h.c
	c.mu.Lock()
	if h.lost {
		c.mu.Unlock()
		return lock.ErrNotHeld
	}
	if h.levels--; h.levels > 0 {
		c.mu.Unlock()
		return nil
	}
	h.ending = true
	c.forgetLocked(h)
	c.mu.Unlock()

	h.wd.Stop() // waits for a check or renewal in flight
	c.mu.Lock()
	conn, ln := h.conn, h.line
	h.conn, h.line = nil, nil
	c.mu.Unlock()
	var err error
	switch {
	case h.wd.Err() != nil: // lost meanwhile; Lost left the connection to this release
		if conn != nil {
			discard(conn)
		}
		err = lock.ErrNotHeld
	case c.kind == kindSession:
		err = c.sessionRelease(ctx, h, conn)
	default:
		err = c.leaseRelease(ctx, h)
	}
	if ln != nil {
		c.leaveLine(h.key, ln)
	}
	if c.o.metrics != nil {
		c.obs.Held(h.key, c.o.now().Sub(h.since))
	}
	return err
}

// forgetLocked removes h from the live and enterable holds. c.mu is held.
func (c *Client) forgetLocked(h *hold) {
	delete(c.live, h)
	if h.owned && c.owned[h.hk] == h {
		delete(c.owned, h.hk)
	}
}

// Renewed logs a check or renewal that failed and reports every one to
// the metrics (watchdog.Observer).
func (h *hold) Renewed(err error) { h.c.obs.Renewed(h.key, h.owner, h.token, err) }

// Lost marks h lost, gives its place in the local line on, and makes sure
// the database lets go of a session lock: its connection is closed in the
// background (watchdog.Observer; called with the watchdog's mutex held, so
// it must not wait for the watchdog, nor for a statement in flight).
func (h *hold) Lost(cause error) {
	c := h.c
	c.mu.Lock()
	h.lost = true
	c.forgetLocked(h)
	var conn *sql.Conn
	if !h.ending && !c.closed { // else Release, or Close, closes it
		conn, h.conn = h.conn, nil
	}
	bg := conn != nil && !c.closed
	if bg {
		c.wg.Add(1)
	}
	ln := h.line
	h.line = nil
	c.mu.Unlock()
	c.obs.Lost(h.key, h.owner, h.token, lostErr(cause))
	if bg {
		go func() { // owned by c: Close waits for it
			defer c.wg.Done()
			discard(conn) // after the check in flight, which the watchdog cancels
		}()
	}
	if ln != nil {
		c.leaveLine(h.key, ln)
	}
}

// discard closes conn's database connection instead of returning it to
// the pool: its session ends, and with it every session lock it held.
func discard(conn *sql.Conn) {
	conn.Raw(func(any) error { return driver.ErrBadConn })
	conn.Close()
}

// lostErr is a lease's Err for its watchdog's error: nil, or an error
// matching lock.ErrLockLost and the reason.
func lostErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, watchdog.ErrNotHeld) && !errors.Is(err, lock.ErrNotHeld):
		return fmt.Errorf("%w: %w: %w", lock.ErrLockLost, lock.ErrNotHeld, err)
	}
	return fmt.Errorf("%w: %w", lock.ErrLockLost, err)
}
