package etcdlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordkit/coordkit/lock"
)

// hold is one hold key of the Client: the levels of one owner's re-entry
// share it.
type hold struct {
	key   string
	path  string // the hold key, "<prefix>/<key>/<lease hex>-<n>"
	names string // the prefix of its name (Client.name)
	token int64  // its create revision
	gen   *generation
	// doubtful: a creation of path got no answer (its first copy may
	// still come): once released, path is swept (Client.sweep).
	doubtful bool
	lost     chan struct{}
	hk       ownedKey  // set before the hold is registered, then read-only
	owned    bool      // hk is in Client.owned
	since    time.Time // when it was registered (granted), then read-only: for the Held hook

	// Protected by Client.mu.
	count  int  // the levels held (both sides, for a writer's hold)
	writes int  // a writer's hold: the levels of the write side among count
	reads  bool // a writer's hold: also registered as its owner's read side
	isLost bool
	why    error // the reason of the loss, set before lost is closed
	inSlot bool  // the hold still has its key's slot
}

// Lease is one level of hold on a key's lock. Its methods are safe for
// concurrent use.
type Lease struct {
	c        *Client
	h        *hold
	write    bool // a level of the read-write lock's write side
	released atomic.Bool
}

// Key returns the key the lease holds.
func (l *Lease) Key() string { return l.h.key }

// Token returns the fencing token: the create revision of the hold key.
// etcd's revision grows with every write to the cluster, and a hold key is
// created anew for every acquisition, so each new acquisition of a key has
// a larger token than the one before, across leader changes. Re-entry
// returns the same token.
func (l *Lease) Token() int64 { return l.h.token }

// Lost returns a channel that is closed once the lock is no longer known to
// be held: the Client's etcd lease was refused by the server, no keep-alive
// was answered within its window (2T/3 from the send of the last answered
// one), or the Client was closed. Release does not close it.
func (l *Lease) Lost() <-chan struct{} { return l.h.lost }

// Err returns nil while the lease is not known to be lost, and then an
// error matching lock.ErrLockLost and the reason: ErrLeaseLost, or ErrClosed
// (which matches lock.ErrClosed). See lock.LeaseStatus.
func (l *Lease) Err() error {
	l.c.mu.Lock()
	why := l.h.why
	l.c.mu.Unlock()
	if why == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", lock.ErrLockLost, why)
}

// Until returns the time until which the lease is known to be held (see
// lock.LeaseStatus): the send time of the last keep-alive the server
// answered plus 2T/3. It is the zero Time once the lease is lost.
func (l *Lease) Until() time.Time {
	c, h := l.c, l.h
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.isLost || !c.checkLocked(h.gen) {
		return time.Time{}
	}
	return h.gen.until
}

// Release drops one level of re-entry; the last one deletes the hold key,
// which wakes the next waiter. It returns lock.ErrNotHeld if the lease was
// already released or lost, or its key was gone (deleted by ForceRelease);
// also when the lease's window has passed (the process was paused, say)
// and the loss had not been reported yet: Lost closes then. If the deletion
// fails, Release returns the error and keeps deleting in the background
// until it succeeds, the lease ends, or the Client is closed.
func (l *Lease) Release(ctx context.Context) error {
	err := l.release(ctx)
	l.c.obs.Released(l.h.key, err)
	return err
}

func (l *Lease) release(ctx context.Context) error {
	if !l.released.CompareAndSwap(false, true) {
		return lock.ErrNotHeld
	}
	c, h := l.c, l.h
	c.mu.Lock()
	if !h.isLost {
		c.checkLocked(h.gen)
	}
	if h.isLost {
		c.mu.Unlock()
		return lock.ErrNotHeld
	}
	if l.write {
		if h.writes--; h.writes == 0 && h.owned && c.owned[h.hk] == h {
			// The owner keeps only reads on this hold: taking the
			// write side again is an upgrade (ErrUpgrade).
			delete(c.owned, h.hk)
		}
	}
	if h.count--; h.count > 0 {
		c.mu.Unlock()
		return nil
	}
	c.dropLocked(h)
	c.mu.Unlock()
	c.obs.Held(h.key, c.now().Sub(h.since))
	err := c.deleteOwn(ctx, h.path)
	c.mu.Lock()
	if !h.doubtful && (err == nil || err == lock.ErrNotHeld) {
		// The deletion answered: the key is gone, and nothing is on
		// the wire to make or delete a key at its name later.
		c.freeLocked(h.gen, h.names, h.path)
	}
	if h.inSlot {
		h.inSlot = false
		c.leaveLocked(h.key)
	}
	c.mu.Unlock()
	if h.doubtful {
		c.sweep(h.path, h.gen)
	}
	if err != nil && err != lock.ErrNotHeld {
		c.reap(h.path, h.token)
		return fmt.Errorf("etcdlock: release %q: %w (deletion goes on in the background)", h.key, err)
	}
	return err
}

// dropLocked removes h from the live holds. c.mu must be held.
func (c *Client) dropLocked(h *hold) {
	delete(h.gen.holds, h)
	if h.owned && c.owned[h.hk] == h {
		delete(c.owned, h.hk)
	}
	if rk := (ownedKey{h.hk.owner, h.hk.key, 'r'}); h.reads && c.owned[rk] == h {
		delete(c.owned, rk)
	}
}

// loseLocked reports h lost for reason why and gives its key's slot back
// (this Client's next owner of the key holds on a new lease). c.mu must be
// held.
func (c *Client) loseLocked(h *hold, why error) {
	if h.isLost {
		return
	}
	h.isLost, h.why = true, why
	close(h.lost)
	c.dropLocked(h)
	if h.inSlot {
		h.inSlot = false
		c.leaveLocked(h.key)
	}
}

// deleteOwn deletes the hold key path of a hold being released: one
// request, with no condition, since no other key is made at path until
// the deletion has answered (Client.name). A deletion that returned an
// error may still be applied later, and then deletes nothing else: its
// name is not used again (TestLateReleaseSparesNextHold). It returns
// lock.ErrNotHeld if the key was gone (ForceRelease, or the lease ended).
func (c *Client) deleteOwn(ctx context.Context, path string) error {
	resp, err := c.cli.Delete(ctx, path)
	if err != nil {
		return err
	}
	if resp.Deleted == 0 {
		return lock.ErrNotHeld
	}
	return nil
}

// deleteHold deletes the hold key path if its create revision is rev: one
// round trip. It returns lock.ErrNotHeld if it was gone.
func (c *Client) deleteHold(ctx context.Context, path string, rev int64) error {
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(path), "=", rev)).
		Then(clientv3.OpDelete(path)).
		Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return lock.ErrNotHeld
	}
	return nil
}

// reap deletes the hold key path (create revision rev) in the
// background, retrying until it is deleted or gone, or the Client is
// closed (Close revokes the lease, which deletes it).
func (c *Client) reap(path string, rev int64) { c.reapRev(path, rev, nil) }

// reapThen is reap for a hold key of unknown create revision (whatever is
// there is deleted: the caller keeps the key's slot, so nothing of this
// Client's can be there but what is to go), and calls done once it is
// deleted or gone.
func (c *Client) reapThen(path string, done func()) { c.reapRev(path, 0, done) }

func (c *Client) reapRev(path string, rev int64, done func()) {
	c.spawn(func() {
		for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
			ctx, cancel := context.WithTimeout(c.life, opTimeout)
			var err error
			if rev == 0 {
				_, err = c.cli.Delete(ctx, path)
			} else {
				err = c.deleteHold(ctx, path, rev)
			}
			cancel()
			if err == nil || err == lock.ErrNotHeld {
				c.log.Debug("etcdlock: hold key deleted in the background", "key", path)
				if done != nil {
					done()
				}
				return
			}
			select {
			case <-c.life.Done():
				return
			case <-time.After(wait):
			}
		}
	})
}
