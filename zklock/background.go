package zklock

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
)

// closedAfter is how long a zk.Conn must stay in StateDisconnected before
// the Client takes it for closed: a live one moves on to StateConnecting at
// once, a closed one stays there.
const closedAfter = 2 * time.Second

// call runs op, one go-zookeeper request (which takes no ctx and, while the
// connection is down, waits for it), and returns its error, or ctx's error
// if ctx ends first. An abandoned request finishes in the background; the
// goroutine is the Client's (Close waits for it) and ends when conn answers,
// fails the request or is closed. op must write only to variables the caller
// reads after call returns nil or op's error.
func (c *Client) call(ctx context.Context, op func() error) error {
	if ctx.Done() == nil {
		return op()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	if !c.spawn(func() { done <- op() }) {
		return op() // closed: nothing may outlive Close
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// callCreate is call for the create of a protected node. If ctx ends first,
// the request may still create the node: callCreate waits for its reply
// and deletes the node before it returns, as abandon does, all within
// abandonTimeout; past that, or if the reply is lost (the node is then
// found by its UUID), the node is deleted in the background. A cancelled
// Obtain thus leaves no node behind when it returns while the server
// answers (a waiter cancelled just after its create was sent, under load,
// returned first and left its node for a moment).
func (c *Client) callCreate(ctx context.Context, parent, guid string, res *[]zk.MultiResponse, op func() error) error {
	if ctx.Done() == nil {
		return op()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	if !c.spawn(func() { done <- op() }) {
		return op()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		actx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
		defer cancel()
		select {
		case err := <-done: // *res was written before done was sent
			switch {
			case err == nil:
				path := (*res)[0].String
				err := c.call(actx, func() error { return c.conn.Delete(path, -1) })
				if err != nil && !errors.Is(err, zk.ErrNoNode) {
					c.reap(path)
				}
			case errors.Is(err, zk.ErrConnectionClosed):
				c.reapGUID(parent, guid)
			}
		case <-actx.Done():
			c.spawn(func() {
				switch err := <-done; {
				case err == nil:
					c.reapNow((*res)[0].String)
				case errors.Is(err, zk.ErrConnectionClosed):
					c.reapGUIDNow(parent, guid)
				}
			})
		}
		return ctx.Err()
	}
}

// spawn runs f in a goroutine of the Client, unless it is closed.
func (c *Client) spawn(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// reap deletes path in the background (see reapNow).
func (c *Client) reap(path string) { c.spawn(func() { c.reapNow(path) }) }

// reapLocked is reap with c.mu held.
func (c *Client) reapLocked(path string) {
	if c.closed {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.reapNow(path)
	}()
}

// reapNow deletes path, a node this Client created, if it belongs to the
// connection's current session. It judges the node by its ephemeralOwner
// against the session at the time of asking, never by a session captured
// earlier: a request queued while go-zookeeper had no session (ID 0, after
// an expiry) runs in the next one. It retries until the node is deleted, is
// gone, belongs to another session (an ended one: its ephemeral nodes go
// with it), or the Client or conn is closed.
func (c *Client) reapNow(path string) {
	var b backoff
	for {
		ok, st, err := c.conn.Exists(path)
		if err == nil {
			if !ok {
				return
			}
			sid := c.conn.SessionID()
			switch {
			case sid == 0:
				err = zk.ErrNoServer // between two sessions: ask again in the next one
			case st.EphemeralOwner != sid:
				return // its session ended, and the node with it
			default:
				err = c.conn.Delete(path, -1)
				if err == nil || errors.Is(err, zk.ErrNoNode) {
					return
				}
			}
		}
		if !transient(err) {
			return // not ours to retry (e.g. ErrNoAuth)
		}
		if c.pause(context.Background(), &b) != nil {
			return
		}
	}
}

// reapGUID deletes, in the background, the node of parent with UUID guid
// that a create whose reply was lost may have left (see reapNow).
func (c *Client) reapGUID(parent, guid string) {
	c.spawn(func() { c.reapGUIDNow(parent, guid) })
}

func (c *Client) reapGUIDNow(parent, guid string) {
	var b backoff
	for {
		names, err := c.syncedChildren(parent)
		if err == nil {
			for _, name := range names {
				if n, ok := parseNode(name); ok && n.guid == guid {
					c.reapNow(parent + "/" + name)
				}
			}
			return
		}
		if !transient(err) {
			return
		}
		if c.pause(context.Background(), &b) != nil {
			return
		}
	}
}

// syncedChildren lists parent's children after a sync, so that the list
// holds every create the leader has committed or has in flight (a sync
// waits for the proposals before it): the lookups of a create whose reply
// was lost with its connection. Without the sync, the server the session
// reconnected to may be behind the leader and list no node, while the
// create, sent on the old connection, is applied after: its node then
// queues or holds for no one until the session ends (chaos zk seed 4
// under load, key-stuck-after-heal: the head of the line was the node of
// an Obtain that had given up). A create sent on the old connection that
// reaches the leader after the session has moved to another server is
// refused (session moved); on the same server it comes before the sync.
func (c *Client) syncedChildren(parent string) ([]string, error) {
	if _, err := c.conn.Sync(parent); err != nil {
		return nil, err
	}
	names, _, err := c.conn.Children(parent)
	return names, err
}

// backoff paces retries: 5 ms doubling to 500 ms.
type backoff struct {
	n         int
	downSince time.Time
}

// pause waits before the next retry. It returns ctx's error, ErrClosed if
// the Client was closed or conn looks closed (see closedAfter).
func (c *Client) pause(ctx context.Context, b *backoff) error {
	if c.conn.State() != zk.StateDisconnected {
		b.downSince = time.Time{}
	} else if b.downSince.IsZero() {
		b.downSince = time.Now()
	} else if time.Since(b.downSince) > closedAfter {
		return ErrClosed
	}
	d := min(5*time.Millisecond<<min(b.n, 7), 500*time.Millisecond)
	b.n++
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stop:
		return ErrClosed
	case <-t.C:
		return nil
	}
}
