package zklock

import (
	"context"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// The session's liveness, with WithSessionTimeout(T) (see the package
// documentation for the derivation of the windows):
//
//   - every request that goes through the leader (a sync or a create) is
//     noted when sent (noteSent), which keeps a chain of such requests sent
//     at most T/6 apart;
//   - when one is answered (noteAlive), the session's leases live until its
//     send time s plus T/2 if the chain had lasted 5T/12 by s (the leader
//     then knew of a packet of the client at most T/6 + tick/2 before s),
//     or T/3 otherwise (it knew of go-zookeeper's pings, T/3 apart), less a
//     tick of the monitor: aliveUntil;
//   - the monitor sends a heartbeat (a sync) once T/6 less two ticks has
//     passed since the last request was sent (it looks every tick, so they
//     go out at most T/6 apart), and reports the leases lost when
//     aliveUntil has passed.

// maxBeating bounds the heartbeats in flight: more would all wait on the same
// dead connection (by then the leases are lost anyway).
const maxBeating = 3

// monitor watches the session while leases are held, and reports them lost
// when the session changes (it expired: go-zookeeper sets the ID to 0, then
// to the new session's) or, with WithSessionTimeout, when aliveUntil has
// passed; without it, as soon as the connection is down. It sends the
// heartbeats. It ends when no lease is live, or on Close.
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
			doubt = c.aliveSession != sid || !now.Before(c.aliveUntil)
		} else {
			doubt = state != zk.StateHasSession
		}
		if doubt && !c.doubted && len(c.live) > 0 {
			// The leases are about to be reported lost: say why first, once.
			err := fmt.Errorf("zklock: no heartbeat answered in the session's window (connection %v)", state)
			c.obs.Warn("renewal failed", "session", c.aliveSession, "state", state.String(), "err", err)
			if m := c.obs.Metrics; m != nil {
				for h := range c.live {
					m.Renewed(c.obs.Key(h.key), err)
				}
			}
		}
		c.doubted = doubt
		for h := range c.live {
			if doubt || sid != h.session {
				c.loseLocked(h, ErrSessionExpired)
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

// beatLocked sends a heartbeat of session sid if one is due: a beat after
// the last request sent, whether or not earlier ones were answered (up to
// maxBeating in flight). c.mu must be held.
func (c *Client) beatLocked(sid int64, now time.Time) {
	if c.timeout == 0 || sid == 0 || c.closed || c.beating >= maxBeating {
		return
	}
	if c.sentSession == sid && now.Sub(c.lastSent) < c.beat {
		return
	}
	c.noteSentLocked(sid, now)
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
	if err != nil {
		c.obs.Warn("renewal failed", "session", sid, "err", err)
	}
	if m := c.obs.Metrics; m != nil { // a heartbeat renews every lease of the session
		c.mu.Lock()
		for h := range c.live {
			if h.session == sid {
				m.Renewed(c.obs.Key(h.key), err)
			}
		}
		c.mu.Unlock()
	}
	return err
}

// noteSent records that a request that goes through the leader is about to
// be sent in session sid, and returns the time it records.
func (c *Client) noteSent(sid int64) time.Time {
	now := time.Now()
	if c.timeout > 0 {
		c.mu.Lock()
		c.noteSentLocked(sid, now)
		c.mu.Unlock()
	}
	return now
}

// noteSentLocked is noteSent at t with c.mu held.
func (c *Client) noteSentLocked(sid int64, t time.Time) {
	if sid == 0 {
		return // go-zookeeper sends it in whichever session comes next
	}
	if c.sentSession != sid || t.Sub(c.lastSent) > c.timeout/6 {
		c.chainStart = t
	}
	if c.sentSession != sid || t.After(c.lastSent) {
		c.sentSession, c.lastSent = sid, t
	}
}

// noteAlive records that a request sent (and noted) at sent in session sid
// was answered by way of the leader. A request answered after the session
// changed proves nothing about sid: go-zookeeper runs a request queued
// without a session in the next one.
func (c *Client) noteAlive(sid int64, sent time.Time) {
	if c.timeout == 0 || sid == 0 || c.conn.SessionID() != sid {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	window := c.timeout / 3
	if c.sentSession == sid && !c.chainStart.After(sent.Add(-c.timeout*5/12)) {
		window = c.timeout / 2
	}
	until := sent.Add(window - c.tick)
	if c.aliveSession != sid || until.After(c.aliveUntil) {
		c.aliveSession, c.aliveUntil = sid, until
	}
}

// fresh reports whether session sid has been heard from recently enough to
// grant a new lease in it: its leases live a beat longer at least.
func (c *Client) fresh(sid int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.aliveSession == sid && time.Until(c.aliveUntil) > c.timeout/6
}

// confirm makes sure, before cr is granted, that its session is fresh, with
// a sync if needed: a lock handed over by a watch notification after a long
// wait must not start out in doubt. It reports false if cr's session has
// ended (cr went with it).
func (c *Client) confirm(ctx context.Context, cr created) (bool, error) {
	var b backoff
	for {
		if c.conn.SessionID() != cr.session {
			return false, nil
		}
		if c.fresh(cr.session) {
			return true, nil
		}
		sent := c.noteSent(cr.session)
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
