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
	path    string // the lock node
	name    string // its last path element
	token   int64  // its creation zxid
	session int64  // the session that owns it (its ephemeralOwner)
	lost    chan struct{}

	hk     holdKey // set before register, then read-only
	owned  bool    // hk is in Client.owned
	anchor *hold   // for a read granted to the holder of the exclusive side: that hold, one level of which this read holds

	// Protected by Client.mu.
	count  int
	isLost bool
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
// last T/2 was answered (with WithSessionTimeout(T); without it: the
// connection is down), or the Client was closed. Release does not close it.
func (l *Lease) Lost() <-chan struct{} { return l.h.lost }

// Release drops one level of re-entry; the last one deletes the lock node,
// which wakes the next waiter. It returns lock.ErrNotHeld if the lease was
// already released or lost, or the node was gone. If the deletion fails
// (connection loss, ctx ended) Release returns the error and keeps deleting
// in the background until it succeeds or the session ends.
func (l *Lease) Release(ctx context.Context) error {
	if !l.released.CompareAndSwap(false, true) {
		return lock.ErrNotHeld
	}
	return l.c.release(ctx, l.h)
}

// release drops one level of h, deleting its node at the last one; a read
// anchored on its owner's exclusive hold then drops its level of that hold.
func (c *Client) release(ctx context.Context, h *hold) error {
	c.mu.Lock()
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

// loseLocked reports h lost and, while the Client runs, deletes its node in
// the background in case its session survived. c.mu must be held.
func (c *Client) loseLocked(h *hold) {
	if h.isLost {
		return
	}
	h.isLost = true
	close(h.lost)
	delete(c.live, h)
	if h.owned && c.owned[h.hk] == h {
		delete(c.owned, h.hk)
	}
	c.reapLocked(h.path)
}

// monitor watches the session while leases are held, and reports them lost
// when the session changes (it expired: go-zookeeper sets the ID to 0, then
// to the new session's) or, with WithSessionTimeout, when the session's last
// answered heartbeat was sent too long ago (see the package documentation);
// without it, as soon as the connection is down. It sends the heartbeats.
// It ends when no lease is live, or on Close.
func (c *Client) monitor() {
	defer c.wg.Done()
	t := time.NewTicker(c.tick)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		state, sid, now := c.conn.State(), c.conn.SessionID(), time.Now()
		c.mu.Lock()
		var doubt bool
		if c.timeout > 0 {
			doubt = c.aliveSession != sid || now.Sub(c.aliveAt) >= c.doubt
		} else {
			doubt = state != zk.StateHasSession
		}
		for h := range c.live {
			if doubt || sid != h.session {
				c.loseLocked(h)
			}
		}
		if len(c.live) == 0 {
			c.monitoring = false
			c.mu.Unlock()
			return
		}
		c.beatLocked(sid, now)
		c.mu.Unlock()
	}
}

// beatLocked sends a heartbeat of session sid if one is due: every beat
// since the last heartbeat or answered request, whether or not earlier ones
// were answered (up to maxBeating in flight). c.mu must be held.
func (c *Client) beatLocked(sid int64, now time.Time) {
	if c.timeout == 0 || sid == 0 || c.closed || c.beating >= maxBeating {
		return
	}
	last := c.lastBeat
	if c.aliveSession == sid && c.aliveAt.After(last) {
		last = c.aliveAt
	}
	if now.Sub(last) < c.beat {
		return
	}
	c.lastBeat = now
	c.beating++
	c.wg.Add(1)
	go func() { // owned by the Client: Close waits for it
		defer c.wg.Done()
		c.heartbeat(sid, now)
		c.mu.Lock()
		c.beating--
		c.mu.Unlock()
	}()
}

// heartbeat sends a sync, which a follower forwards to the leader: its
// answer proves that the ensemble's leader (the server that expires
// sessions) was reachable through the connection after sent, the time the
// request was handed to go-zookeeper, no later than it went out. A read
// would not do: a follower cut off from its leader answers reads alone, for
// as long as its syncLimit, while the leader expires the session.
func (c *Client) heartbeat(sid int64, sent time.Time) error {
	_, err := c.conn.Sync(c.root)
	if err == nil {
		c.noteAlive(sid, sent)
	}
	return err
}

// noteAlive records that a request sent at sent in session sid was answered
// (by way of the leader). A request answered after the session changed
// proves nothing about sid: go-zookeeper runs a request queued without a
// session in the next one.
func (c *Client) noteAlive(sid int64, sent time.Time) {
	if sid == 0 || c.conn.SessionID() != sid {
		return
	}
	c.mu.Lock()
	if c.aliveSession != sid || sent.After(c.aliveAt) {
		c.aliveSession, c.aliveAt = sid, sent
	}
	c.mu.Unlock()
}

// fresh reports whether session sid was heard from recently enough to grant
// a new lease in it: within half the time after which leases are lost.
func (c *Client) fresh(sid int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.aliveSession == sid && time.Since(c.aliveAt) < c.doubt/2
}

// confirm makes sure, before cr is granted, that its session was heard from
// recently (fresh), with a heartbeat if needed: a lock handed over by a
// watch notification after a long wait must not start out in doubt. It
// reports false if cr's session has ended (cr went with it).
func (c *Client) confirm(ctx context.Context, cr created) (bool, error) {
	var b backoff
	for {
		if c.conn.SessionID() != cr.session {
			return false, nil
		}
		if c.fresh(cr.session) {
			return true, nil
		}
		sent := time.Now()
		err := c.call(ctx, func() error { _, err := c.conn.Sync(c.root); return err })
		if err == nil {
			c.noteAlive(cr.session, sent)
			continue
		}
		if !transient(err) {
			return false, err
		}
		if err := c.pause(ctx, &b); err != nil {
			return false, err
		}
	}
}
