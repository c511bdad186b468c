package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/lock"
)

// hold is one lock node held by the Client: the levels of one owner's
// re-entry share it.
type hold struct {
	key     string
	path    string    // the lock node
	name    string    // its last path element
	token   int64     // its creation zxid
	session int64     // the session that owns it (its ephemeralOwner)
	since   time.Time // when its node's creation was sent
	lost    chan struct{}

	hk     holdKey // set before register, then read-only
	owned  bool    // hk is in Client.owned
	anchor *hold   // for a read granted to the holder of the exclusive side: that hold, one level of which this read holds

	// Protected by Client.mu.
	count  int
	isLost bool
	why    error // the reason of the loss, set before lost is closed
}

// Lease is one level of hold on a key's lock. Its methods are safe for
// concurrent use.
type Lease struct {
	c        *Client
	h        *hold
	released atomic.Bool
}

// Key returns the key the lease holds.
func (l *Lease) Key() string { return l.h.key }

// Token returns the lock node's creation zxid: ZooKeeper's zxids grow with
// every write to the ensemble, so each new acquisition of a key has a larger
// token than the one before. Re-entry returns the same token.
func (l *Lease) Token() int64 { return l.h.token }

// Lost returns a channel that is closed once the lock is no longer known to
// be held: the session expired or changed, no heartbeat sent within the
// last T/2 (T/3 after an idle spell) was answered (with
// WithSessionTimeout(T); without it: the connection is down), or the Client
// was closed. Release does not close it.
func (l *Lease) Lost() <-chan struct{} { return l.h.lost }

// Err returns nil while the lease is not known to be lost, and then an
// error matching lock.ErrLockLost and the reason: ErrSessionExpired, or
// ErrClosed (which matches lock.ErrClosed). See lock.LeaseStatus.
func (l *Lease) Err() error {
	l.c.mu.Lock()
	why := l.h.why
	l.c.mu.Unlock()
	if why == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", lock.ErrLockLost, why)
}

// Until returns the end of the lease's window (see lock.LeaseStatus): it
// is held at least until then unless reported lost, as the last answered
// heartbeat shows (WithSessionTimeout). It is the zero Time once the lease
// is lost, and with WithSessionTimeout(0), where no bound is known.
func (l *Lease) Until() time.Time {
	c, h := l.c, l.h
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.isLost || c.timeout == 0 || c.aliveSession != h.session {
		return time.Time{}
	}
	return c.aliveUntil
}

// Release drops one level of re-entry; the last one deletes the lock node,
// which wakes the next waiter. It returns lock.ErrNotHeld if the lease was
// already released or lost, or the node was gone; with WithSessionTimeout,
// also when the lease's window has passed (the process was paused, say) and
// the loss had not been reported yet: Lost closes then. If the deletion fails
// (connection loss, ctx ended) Release returns the error and keeps deleting
// in the background until it succeeds or the session ends.
func (l *Lease) Release(ctx context.Context) error {
	err := lock.ErrNotHeld
	if l.released.CompareAndSwap(false, true) {
		err = l.c.release(ctx, l.h)
	}
	l.c.obs.Released(l.h.key, err)
	return err
}

// release drops one level of h, deleting its node at the last one; a read
// anchored on its owner's exclusive hold then drops its level of that hold.
func (c *Client) release(ctx context.Context, h *hold) error {
	c.mu.Lock()
	if !h.isLost && c.timeout > 0 && (c.aliveSession != h.session || !time.Now().Before(c.aliveUntil)) {
		// The lease's window passed (the process was paused, say) and the
		// monitor has not run since: the lease is lost, and the holder is
		// told so here rather than by a deletion error.
		c.loseLocked(h, ErrSessionExpired)
	}
	if h.isLost {
		c.mu.Unlock()
		return lock.ErrNotHeld
	}
	if h.count--; h.count > 0 {
		c.mu.Unlock()
		return nil
	}
	delete(c.live, h)
	if h.owned && c.owned[h.hk] == h {
		delete(c.owned, h.hk)
	}
	c.mu.Unlock()
	if c.o.metrics != nil {
		c.obs.Held(h.key, time.Since(h.since))
	}
	err := c.deleteHeld(ctx, h)
	if h.anchor != nil {
		// After the reader's node: the writers queued behind the anchor
		// wait for the anchor's node, and may enter once it is gone.
		err = errors.Join(err, c.release(ctx, h.anchor))
	}
	return err
}

// deleteHeld deletes the node of h, no longer held by anyone.
func (c *Client) deleteHeld(ctx context.Context, h *hold) error {
	if c.conn.SessionID() != h.session {
		return lock.ErrNotHeld // the node ended with its session
	}
	err := c.call(ctx, func() error { return c.conn.Delete(h.path, -1) })
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrSessionExpired):
		return lock.ErrNotHeld
	default:
		c.reap(h.path)
		return fmt.Errorf("zklock: release %q: %w (deletion goes on in the background)", h.key, err)
	}
}

// loseLocked reports h lost for reason why and, while the Client runs,
// deletes its node in the background in case its session survived. c.mu
// must be held.
func (c *Client) loseLocked(h *hold, why error) {
	if h.isLost {
		return
	}
	h.isLost, h.why = true, why
	owner := h.hk.owner // "" for a lease obtained without an owner in ctx: log its node
	if owner == "" {
		owner = h.name
	}
	c.obs.Lost(h.key, owner, h.token, fmt.Errorf("%w: %w", lock.ErrLockLost, why))
	close(h.lost)
	delete(c.live, h)
	if h.owned && c.owned[h.hk] == h {
		delete(c.owned, h.hk)
	}
	c.reapLocked(h.path)
}
