package zklock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"

	"github.com/coordkit/coordkit/lock"
)

// created is a lock node this attempt created.
type created struct {
	path, name, guid string
	seq              int64
	token            int64     // creation zxid
	session          int64     // ephemeralOwner
	children         int32     // the parent's children right after the create, -1 if unknown
	sent             time.Time // when the create was sent
}

// acquire creates a lock node for key and waits until it is first in line.
// A node lost with its session while waiting is replaced by a new attempt.
// mine is the owner's exclusive hold on key when k is a read (nil
// otherwise); a read it backs is granted at once (see await).
func (c *Client) acquire(ctx context.Context, key, parent string, k kind, mine *hold, block bool, owner string) (*hold, error) {
	for {
		cr, err := c.create(ctx, parent, k, owner)
		if err != nil {
			return nil, err
		}
		ok, anchored, err := c.await(ctx, parent, cr, k, mine, block)
		if err != nil {
			return nil, err
		}
		if ok && c.timeout > 0 {
			ok, err = c.confirm(ctx, cr)
			if (err != nil || !ok) && anchored {
				c.giveBack(mine)
			}
			if err != nil {
				c.abandon(cr)
				return nil, c.ctxErr(ctx, err)
			}
		}
		if ok {
			h := &hold{key: key, path: cr.path, name: cr.name, token: cr.token,
				session: cr.session, since: cr.sent, lost: make(chan struct{})}
			if anchored {
				h.anchor = mine
			}
			return h, nil
		}
	}
}

// create makes this attempt's protected ephemeral sequential node,
// "_c_<uuid>-<kind>-<seq>", in one round trip: a multi of the create and an
// empty setData on the parent, whose returned Stat gives the transaction's
// zxid (the node's czxid, the fencing token) and the parent's number of
// children (1: nobody else queues, the lock is ours). If the reply is lost
// with the connection, the node is looked for by its UUID before trying
// again with the same UUID; if ctx ends meanwhile, the Client keeps looking
// in the background and deletes what it finds.
func (c *Client) create(ctx context.Context, parent string, k kind, owner string) (created, error) {
	guid := uuid.NewString()
	prefix := parent + "/" + protectedPrefix + guid + "-" + string(k) + "-"
	var b backoff
	for {
		sess := c.conn.SessionID()
		sent := c.noteSent(sess)
		var res []zk.MultiResponse
		err := c.callCreate(ctx, parent, guid, &res, func() (err error) {
			res, err = c.conn.Multi(
				&zk.CreateRequest{Path: prefix, Data: []byte(owner), Acl: c.acl, Flags: zk.FlagEphemeralSequential},
				&zk.SetDataRequest{Path: parent, Version: -1})
			return err
		})
		switch {
		case err == nil:
			st := res[1].Stat
			cr := created{path: res[0].String, guid: guid, token: st.Mzxid, session: sess, children: st.NumChildren, sent: sent}
			cr.name = cr.path[len(parent)+1:]
			n, _ := parseNode(cr.name)
			cr.seq = n.seq
			if sess == 0 || c.conn.SessionID() != sess {
				// The session changed around the request: ask the node.
				ok, err := c.statCreated(ctx, &cr)
				if err != nil {
					return created{}, err
				}
				if !ok {
					continue
				}
			} else {
				c.noteAlive(sess, sent) // a write: answered by way of the leader
			}
			return cr, nil
		case errors.Is(err, zk.ErrNoNode):
			if err := c.ensureParent(ctx, parent); err != nil && !transient(err) {
				return created{}, c.ctxErr(ctx, err)
			}
		case errors.Is(err, zk.ErrConnectionClosed):
			// Protected mode: the create may have been applied.
			cr, found, err := c.findCreated(ctx, parent, guid)
			if err != nil {
				c.reapGUID(parent, guid)
				return created{}, c.ctxErr(ctx, err)
			}
			if found {
				return cr, nil
			}
		case !transient(err):
			return created{}, c.ctxErr(ctx, err)
		}
		if err := c.pause(ctx, &b); err != nil {
			c.reapGUID(parent, guid)
			return created{}, c.ctxErr(ctx, err)
		}
	}
}

// findCreated looks for this attempt's node among parent's children. A node
// found whose session is not the current one is on its way out: it is
// deleted and reported not found. The list is read after a sync (see
// syncedChildren).
func (c *Client) findCreated(ctx context.Context, parent, guid string) (created, bool, error) {
	var b backoff
	for {
		var names []string
		err := c.call(ctx, func() (err error) { names, err = c.syncedChildren(parent); return err })
		if errors.Is(err, zk.ErrNoNode) {
			return created{}, false, nil
		}
		if err == nil {
			for _, name := range names {
				n, ok := parseNode(name)
				if !ok || n.guid != guid {
					continue
				}
				cr := created{path: parent + "/" + name, name: name, guid: guid, seq: n.seq, children: -1}
				ok, err := c.statCreated(ctx, &cr)
				if err != nil {
					return created{}, false, err
				}
				return cr, ok, nil
			}
			return created{}, false, nil
		}
		if !transient(err) {
			return created{}, false, err
		}
		if err := c.pause(ctx, &b); err != nil {
			return created{}, false, err
		}
	}
}

// statCreated fills cr's token and session from the node's Stat. It reports
// false (after deleting the node) if the node is gone or belongs to a
// session other than the current one.
func (c *Client) statCreated(ctx context.Context, cr *created) (bool, error) {
	var b backoff
	for {
		var ok bool
		var st *zk.Stat
		err := c.call(ctx, func() (err error) { ok, st, err = c.conn.Exists(cr.path); return err })
		if err == nil {
			if !ok {
				return false, nil
			}
			if st.EphemeralOwner != c.conn.SessionID() {
				c.call(ctx, func() error { return c.conn.Delete(cr.path, -1) })
				return false, nil
			}
			cr.token, cr.session = st.Czxid, st.EphemeralOwner
			return true, nil
		}
		if !transient(err) {
			return false, err
		}
		if err := c.pause(ctx, &b); err != nil {
			return false, err
		}
	}
}

// ensureParent creates the key's parent as a container node (the server
// deletes it once it is empty again), and the root path first if needed.
func (c *Client) ensureParent(ctx context.Context, parent string) error {
	mk := func() error {
		return c.call(ctx, func() error {
			_, err := c.conn.CreateContainer(parent, nil, zk.FlagContainer, c.acl)
			return err
		})
	}
	err := mk()
	if !errors.Is(err, zk.ErrNoNode) {
		return ignoreExists(err)
	}
	segs := strings.Split(c.root[1:], "/")
	for i := range segs {
		p := "/" + strings.Join(segs[:i+1], "/")
		err := c.call(ctx, func() error {
			_, err := c.conn.Create(p, nil, zk.FlagPersistent, c.acl)
			return err
		})
		if err := ignoreExists(err); err != nil {
			return err
		}
	}
	return ignoreExists(mk())
}

func ignoreExists(err error) error {
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

// await waits until cr is first in line for its kind. It reports false if
// cr is gone (its session ended, or someone deleted it): the caller tries
// again with a new node. Exclusive nodes wait for every node before them,
// readers for the exclusive ones (but mine, their owner's own). Each waiter
// watches only the last node it waits for.
//
// A reader whose owner holds the exclusive side (mine) does not wait for
// the exclusive nodes queued behind mine (Curator's semantics; waiting would
// deadlock: they wait for mine). It is granted at once, anchored: it takes
// a level of mine, so that mine's node, which those writers wait for, stays
// until the reader is released too (anchored reports this).
func (c *Client) await(ctx context.Context, parent string, cr created, k kind, mine *hold, block bool) (ok, anchored bool, err error) {
	if cr.children == 1 {
		return true, false, nil // alone under the parent right after the create
	}
	mineName := ""
	if mine != nil {
		mineName = mine.name
	}
	var b backoff
	var timer *time.Timer
	watches := map[string]<-chan zk.Event{} // armed data watches, by node name
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var names []string
		err := c.call(ctx, func() (err error) { names, _, err = c.conn.Children(parent); return err })
		if errors.Is(err, zk.ErrNoNode) {
			return false, false, nil // the parent went, so did cr
		}
		if err != nil {
			if transient(err) {
				if err = c.pause(ctx, &b); err == nil {
					continue
				}
			}
			c.abandon(cr)
			return false, false, c.ctxErr(ctx, err)
		}
		pred, pred2, blockers, found := c.queue(names, cr, k, mineName)
		if !found {
			return false, false, nil
		}
		if pred == "" {
			return true, false, nil
		}
		if mine != nil && c.anchor(mine) {
			return true, true, nil
		}
		if !block {
			c.abandon(cr)
			return false, false, lock.ErrNotObtained
		}
		// Watch pred, and also the node before it (pred2): when pred2 goes,
		// pred normally holds, and listing again then (while pred holds, off
		// the hand-off's path) shows pred as the last node cr waits for, so
		// that pred's deletion hands the lock over with no round trip. In an
		// exclusive queue a deletion wakes two waiters at most.
		chPred, err := c.watch(ctx, watches, parent, pred)
		var chPred2 <-chan zk.Event
		if err == nil && blockers >= 2 {
			chPred2, err = c.watch(ctx, watches, parent, pred2)
		}
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			if transient(err) {
				if err = c.pause(ctx, &b); err == nil {
					continue
				}
			}
			c.abandon(cr)
			return false, false, c.ctxErr(ctx, err)
		}
		b = backoff{}
		// Wait, looking at the connection every second: a closed zk.Conn
		// never fires its watches.
		var downSince time.Time
	wait:
		for {
			if timer == nil {
				timer = time.NewTimer(time.Second)
			} else {
				timer.Reset(time.Second)
			}
			var ev zk.Event
			select {
			case ev = <-chPred:
				delete(watches, pred)
				if ev.Type == zk.EventNodeDeleted && blockers == 1 {
					// Nodes before cr never appear later; the only one it
					// waited for is gone.
					return true, false, nil
				}
			case ev = <-chPred2:
				delete(watches, pred2)
			case <-timer.C:
				if c.conn.State() != zk.StateDisconnected {
					downSince = time.Time{}
				} else if downSince.IsZero() {
					downSince = time.Now()
				} else if time.Since(downSince) > closedAfter {
					c.abandon(cr)
					return false, false, ErrClosed
				}
				continue
			case <-ctx.Done():
				c.abandon(cr)
				return false, false, notObtained(ctx)
			case <-c.stop:
				c.abandon(cr)
				return false, false, ErrClosed
			}
			if ev.Err != nil && c.conn.SessionID() != cr.session {
				return false, false, nil // the watch ended with the session, and cr with it
			}
			break wait
		}
	}
}

// anchor takes one level of the exclusive hold mine for a reader of the
// same owner, if mine is still held; the reader's release gives it back.
func (c *Client) anchor(mine *hold) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if mine.isLost || mine.count == 0 {
		return false
	}
	mine.count++
	return true
}

// giveBack drops the level of mine that an anchored reader took, if that
// reader is not granted after all.
func (c *Client) giveBack(mine *hold) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
	defer cancel()
	c.release(ctx, mine)
}

// watch returns the channel of a data watch on parent's child name, set by
// getData unless one is already armed in watches. getData, unlike exists,
// fails on a node already gone (zk.ErrNoNode) and then leaves no watch on
// the server.
func (c *Client) watch(ctx context.Context, watches map[string]<-chan zk.Event, parent, name string) (<-chan zk.Event, error) {
	if ch, ok := watches[name]; ok {
		return ch, nil
	}
	var ch <-chan zk.Event
	err := c.call(ctx, func() (err error) { _, _, ch, err = c.conn.GetW(parent + "/" + name); return err })
	if err != nil {
		return nil, err
	}
	watches[name] = ch
	return ch, nil
}

// queue finds, in parent's children, the last node cr waits for (pred, ""
// if none), the one before it (pred2), and how many nodes it waits for. found is false if cr is not among
// the children. Other nodes with cr's UUID are duplicates of a create whose
// reply was lost: they are deleted, never waited for.
func (c *Client) queue(names []string, cr created, k kind, mine string) (pred, pred2 string, blockers int, found bool) {
	var predSeq, pred2Seq int64 = -1, -1
	for _, name := range names {
		if name == cr.name {
			found = true
			continue
		}
		n, ok := parseNode(name)
		if !ok {
			continue
		}
		if n.guid == cr.guid {
			path := cr.path[:len(cr.path)-len(cr.name)] + name
			c.call(context.Background(), func() error { return c.conn.Delete(path, -1) })
			continue
		}
		if n.seq >= cr.seq || (!k.exclusive() && (!n.kind.exclusive() || name == mine)) {
			continue
		}
		blockers++
		switch {
		case n.seq > predSeq:
			pred2, pred2Seq = pred, predSeq
			pred, predSeq = name, n.seq
		case n.seq > pred2Seq:
			pred2, pred2Seq = name, n.seq
		}
	}
	return pred, pred2, blockers, found
}

// abandon deletes the node of an attempt that gives up, within
// abandonTimeout, then in the background.
func (c *Client) abandon(cr created) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
	defer cancel()
	err := c.call(ctx, func() error { return c.conn.Delete(cr.path, -1) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		c.reap(cr.path)
	}
}

// ctxErr turns an error caused by ctx's end into Obtain's error for it.
func (c *Client) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return notObtained(ctx)
	}
	return err
}

// transient reports whether err may go away on a retry (the connection or
// the session was lost; the request was not or may not have been applied).
func transient(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved) ||
		errors.Is(err, zk.ErrClosing)
}
