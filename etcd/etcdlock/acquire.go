package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordkit/coordkit/internal/lockopt"
	"github.com/coordkit/coordkit/lock"
)

// errRestart tells acquire that its hold key went with its lease: it starts
// again on a new one.
var errRestart = errors.New("etcdlock: hold key gone with its lease")

// Obtain blocks until key is held by ctx's owner, ctx ends (then the error
// matches lock.ErrNotObtained and ctx.Err()), or the Client is closed
// (ErrClosed). If ctx carries an owner (lock.WithOwner) that holds key on
// this Client, it re-enters and returns a lease with the same token. The
// options of package lock do not apply, but a lock.WithTTL(d ≤ 0) returns
// ErrInvalidTTL: the Client's lease has one TTL for all its holds (WithTTL).
// An invalid key returns ErrInvalidKey. When Obtain returns an error, the
// attempt has left no key behind (see the package documentation for the
// two exceptions, where the Client deletes it in the background).
func (c *Client) Obtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return c.observed(key, func() (lock.Lease, error) { return c.obtain(ctx, key, opts, true) })
}

// TryObtain is Obtain without waiting: lock.ErrNotObtained if another owner
// holds key, or this Client's other owner holds or waits for it.
func (c *Client) TryObtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return c.observed(key, func() (lock.Lease, error) { return c.obtain(ctx, key, opts, false) })
}

// observed runs an acquisition of key and reports it to the Waited hook.
func (c *Client) observed(key string, f func() (lock.Lease, error)) (lock.Lease, error) {
	if c.obs.Metrics == nil {
		return f()
	}
	begin := c.now()
	l, err := f()
	c.obs.Waited(key, c.now().Sub(begin), err)
	return l, err
}

func validKey(key string) error {
	if key == "" || len(key) > MaxKeyLen || strings.Contains(key, "/") {
		return ErrInvalidKey
	}
	return nil
}

func (c *Client) obtain(ctx context.Context, key string, opts []lock.Option, block bool) (lock.Lease, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	if o := lockopt.Apply(opts); o.TTL < 0 {
		return nil, ErrInvalidTTL
	}
	owner, hasOwner := lock.OwnerFrom(ctx)
	hk := ownedKey{owner: owner, key: key}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if h := c.owned[hk]; hasOwner && h != nil && !h.isLost && c.checkLocked(h.gen) {
		h.count++
		c.mu.Unlock()
		return &Lease{c: c, h: h}, nil
	}
	c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, notObtained(ctx)
	}
	if err := c.enter(ctx, key, block); err != nil {
		return nil, err
	}
	pfx := c.prefix + "/" + key + "/"
	q := queue{key: key, pfx: pfx, first: pfx, names: pfx, slot: true}
	for {
		h, reaping, err := c.acquire(ctx, q, owner, block)
		c.mu.Lock()
		if err == nil && c.closed {
			// Close revoked (or is revoking) the lease, and the key with it.
			err = ErrClosed
		}
		if err == nil && !c.checkLocked(h.gen) {
			// The lease was lost since the hold was granted, and the hold
			// key goes with it: start again on a new lease.
			if err = ctx.Err(); err == nil {
				c.mu.Unlock()
				continue
			}
			err = notObtained(ctx)
		}
		if err != nil {
			if !reaping {
				c.leaveLocked(key)
			}
			c.mu.Unlock()
			return nil, err
		}
		h.inSlot = true
		h.count = 1
		h.since = c.now()
		h.gen.holds[h] = struct{}{}
		if hasOwner && c.owned[hk] == nil {
			h.hk, h.owned = hk, true
			c.owned[hk] = h
		}
		c.mu.Unlock()
		return &Lease{c: c, h: h}, nil
	}
}

// queue says where an attempt puts its hold key and which keys it waits
// for.
type queue struct {
	key string
	pfx string // "<prefix>/<key>/" (mutex), "<prefix>.rw/<key>/" (read-write lock)
	// first is the prefix of the keys that a hold key waits for when they
	// were made before it: pfx for an exclusive hold (every key), the
	// writers' "<pfx>w/" for a reader.
	first string
	// names is the prefix of the attempt's hold key name on a lease:
	// "<names><lease hex>-<n>" (see Client.name).
	names string
	// slot: the attempt holds key's slot (the mutex: one hold key per
	// Client and key); a creation of unknown outcome keeps it until its
	// key is deleted.
	slot bool
}

// acquire queues a hold key for q on the Client's lease and, if block,
// waits until no key under q.first has a lower create revision. It returns
// the hold, with its generation and token set. When the creation's
// outcome is unknown, it returns reaping: the hold key is being deleted in
// the background, which (q.slot) gives the key's slot back when done, so
// that this Client has one hold key for the key at a time.
func (c *Client) acquire(ctx context.Context, q queue, owner string, block bool) (h *hold, reaping bool, err error) {
	key := q.key
	pause := 20 * time.Millisecond
	var (
		path     string
		pathGen  *generation // the lease path was named for
		doubtful bool        // a creation of path got no answer: see sweep
	)
	for {
		g, err := c.lease(ctx)
		if err != nil {
			if !block || ctx.Err() != nil || errors.Is(err, ErrClosed) {
				return nil, false, err
			}
			if err := c.sleep(ctx, &pause); err != nil {
				return nil, false, err
			}
			continue
		}
		if g != pathGen {
			// A new name on each lease, the same one for every try on
			// it: a creation sent again after no answer must find the
			// first copy's key, if it made one.
			path, pathGen, doubtful = c.name(q.names, g), g, false
		}
		rev, w, err := c.create(ctx, q.first, path, owner, g)
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			// The server revoked or expired the lease: no hold is
			// granted on it (the put in the transaction is refused).
			c.kill(g, fmt.Errorf("%w: the server no longer has lease %x", ErrLeaseLost, int64(g.id)))
			if ctx.Err() != nil {
				return nil, false, notObtained(ctx)
			}
			continue
		case errors.Is(err, errUnknown) && block && ctx.Err() == nil:
			// The creation's outcome is unknown: try again. The same hold
			// key (same lease) is made at most once, its transaction being
			// conditional on its absence, and one found is made anew.
			doubtful = true
			if err := c.sleep(ctx, &pause); err != nil {
				c.abandonUnknown(q, path, g)
				return nil, true, err
			}
			continue
		case errors.Is(err, errUnknown):
			// The creation's outcome is unknown: delete what it may have
			// made before the slot is free for this Client's next try.
			c.abandonUnknown(q, path, g)
			if ctx.Err() != nil {
				return nil, true, notObtained(ctx)
			}
			return nil, true, err
		case err != nil:
			return nil, false, err // none: create returns only the two above
		}
		if ctx.Err() != nil {
			c.abandon(q.names, path, rev, g, doubtful)
			return nil, false, notObtained(ctx)
		}
		if w.pred == "" {
			return &hold{key: key, path: path, names: q.names, token: rev, gen: g, doubtful: doubtful, lost: make(chan struct{})}, false, nil
		}
		if !block {
			c.abandon(q.names, path, rev, g, doubtful)
			return nil, false, lock.ErrNotObtained
		}
		err = c.await(ctx, q.first, path, rev, g, w)
		switch {
		case err == nil:
			return &hold{key: key, path: path, names: q.names, token: rev, gen: g, doubtful: doubtful, lost: make(chan struct{})}, false, nil
		case errors.Is(err, errRestart):
			continue
		default:
			c.abandon(q.names, path, rev, g, doubtful)
			return nil, false, err
		}
	}
}

// errUnknown marks a creation whose outcome is unknown (no answer).
var errUnknown = errors.New("etcdlock: no answer to the hold key's creation")

// wait is what a read found before a hold key: pred, the key made last
// before it (its predecessor; "" if none: the lock is held), from, the
// read's revision + 1 (where a watch of pred starts), and only, whether
// pred was the only key made before it. Since etcd's revisions only grow,
// no key made later can come before the hold key: once an only
// predecessor is deleted, the hold key is the first.
type wait struct {
	pred string
	from int64
	only bool
}

// predsOpts are the options of a range request that reads the keys made
// last under a prefix, latest first, at most three (the hold key itself
// when the read ran in the transaction that made it and the prefix holds
// it, which a reader's, the writers' prefix, does not; then its
// predecessor, and one more, which tells that the predecessor is not the
// only key before it), bounded by create revision maxRev (none: 0).
func predsOpts(maxRev int64) []clientv3.OpOption {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(3)}
	if maxRev > 0 {
		opts = append(opts, clientv3.WithMaxCreateRev(maxRev))
	}
	return opts
}

// waitOf makes a wait of the keys a read found under the prefix, latest
// first, path's own dropped (the read ran in the transaction that made
// path, or bounded by its create revision), at revision rev.
func waitOf(kvs []*mvccpb.KeyValue, path string, rev int64) wait {
	if len(kvs) > 0 && string(kvs[0].Key) == path {
		kvs = kvs[1:]
	}
	if len(kvs) == 0 {
		return wait{}
	}
	return wait{pred: string(kvs[0].Key), from: rev + 1, only: len(kvs) == 1}
}

// create makes the hold key path on g's lease, with owner as its value,
// if it does not exist, and reads the keys under before made last before
// it: one transaction, one round trip. Its revision is the hold key's
// create revision rev; the wait it returns has no predecessor when the
// lock is held. It runs detached from ctx (bounded by opTimeout), so that
// its outcome is known when ctx ends meanwhile. A key found at path (the
// first copy of a creation that got no answer) is deleted and made anew,
// so that every acquisition has a new create revision; if that deletion
// fails, the outcome is unknown. It returns rpctypes.ErrLeaseNotFound, an
// error matching errUnknown, or nil.
func (c *Client) create(ctx context.Context, before, path, owner string, g *generation) (rev int64, w wait, err error) {
	for {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		resp, err := c.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.CreateRevision(path), "=", 0)).
			Then(clientv3.OpPut(path, owner, clientv3.WithLease(g.id)), clientv3.OpGet(before, predsOpts(0)...)).
			Else(clientv3.OpGet(path)).
			Commit()
		cancel()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return 0, wait{}, err
		case err != nil:
			return 0, wait{}, fmt.Errorf("%w: %w", errUnknown, err)
		}
		if !resp.Succeeded {
			kvs := resp.Responses[0].GetResponseRange().Kvs
			if len(kvs) > 0 {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
				err := c.deleteHold(dctx, path, kvs[0].CreateRevision)
				cancel()
				if err != nil && err != lock.ErrNotHeld {
					// The key may stay: as a creation without an answer,
					// the caller tries again or deletes it in the
					// background and sweeps the name.
					return 0, wait{}, fmt.Errorf("%w: delete leftover hold key %s: %w", errUnknown, path, err)
				}
			}
			continue
		}
		rev = resp.Header.Revision
		return rev, waitOf(resp.Responses[1].GetResponseRange().Kvs, path, rev), nil
	}
}

// await waits until no key under pfx has a create revision below rev, the
// one of the hold key path, starting from w, what the last read found. It
// watches only its predecessor, the key under pfx with the highest create
// revision below rev, for its deletion (a release wakes one waiter: no
// herd; all the readers behind a writer). If the predecessor was the only
// key before path, its deletion makes path the first: a read of path from
// the nearest member (serializable) at a revision no older than the
// deletion confirms that path is still there, and the lock is held.
// Otherwise it reads again (linearizable): path, and the keys before it.
// It returns errRestart if path is gone (its lease with it), the error of
// ctx's end, or ErrClosed.
func (c *Client) await(ctx context.Context, pfx, path string, rev int64, g *generation, w wait) error {
	pause := 20 * time.Millisecond
	for {
		if w.pred == "" {
			resp, err := c.cli.Txn(ctx).Then(clientv3.OpGet(pfx, predsOpts(rev-1)...), clientv3.OpGet(path)).Commit()
			if err != nil {
				if ctx.Err() != nil {
					return notObtained(ctx)
				}
				if err := c.sleep(ctx, &pause); err != nil {
					return err
				}
				continue
			}
			if mine := resp.Responses[1].GetResponseRange().Kvs; len(mine) == 0 || mine[0].CreateRevision != rev {
				return errRestart
			}
			if w = waitOf(resp.Responses[0].GetResponseRange().Kvs, path, resp.Header.Revision); w.pred == "" {
				return c.alive(g)
			}
		}
		deleted, err := c.watchDeletion(ctx, w.pred, w.from, g)
		if err != nil {
			return err
		}
		if deleted == 0 { // the watch failed: look again after a pause
			if err := c.sleep(ctx, &pause); err != nil {
				return err
			}
		}
		if w.only && deleted > 0 {
			if ok, err := c.confirm(ctx, path, rev, deleted); err != nil || ok {
				if err == nil {
					err = c.alive(g)
				}
				return err
			}
		}
		w = wait{} // look again
	}
}

// alive returns nil if g is alive, else errRestart.
func (c *Client) alive(g *generation) error {
	c.mu.Lock()
	alive := c.checkLocked(g)
	c.mu.Unlock()
	if !alive {
		return errRestart
	}
	return nil
}

// confirm reads the hold key path from the nearest member without a
// quorum (serializable) and reports whether it is there with create
// revision rev at a revision no older than after, errRestart if it is
// gone, and false if the member's state is older than after, or the read
// failed: the caller then reads again with a quorum.
func (c *Client) confirm(ctx context.Context, path string, rev, after int64) (bool, error) {
	resp, err := c.cli.Get(ctx, path, clientv3.WithSerializable())
	switch {
	case err != nil && ctx.Err() != nil:
		return false, notObtained(ctx)
	case err != nil || resp.Header.Revision < after:
		return false, nil
	case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != rev:
		return false, errRestart
	}
	return true, nil
}

// watchDeletion waits until key is deleted after revision from, and
// returns the deletion's revision, or 0 if the watch failed (the caller
// looks again); or until ctx ends, g is lost (errRestart), or the Client
// is closed.
func (c *Client) watchDeletion(ctx context.Context, key string, from int64, g *generation) (int64, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := c.cli.Watch(wctx, key, clientv3.WithRev(from), clientv3.WithFilterPut())
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				if ctx.Err() != nil {
					return 0, notObtained(ctx)
				}
				return 0, nil // look again
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return ev.Kv.ModRevision, nil
				}
			}
		case <-ctx.Done():
			return 0, notObtained(ctx)
		case <-g.dead:
			return 0, errRestart
		case <-c.life.Done():
			return 0, ErrClosed
		}
	}
}

// abandonUnknown deletes, in the background, the hold key path that a
// creation of unknown outcome may have made, and then (q.slot) gives the
// key's slot back; a copy of the creation that comes later is swept.
func (c *Client) abandonUnknown(q queue, path string, g *generation) {
	c.reapThen(path, func() {
		if q.slot {
			c.mu.Lock()
			c.leaveLocked(q.key)
			c.mu.Unlock()
		}
		c.sweep(path, g)
	})
}

// abandonTimeout bounds the deletion of an abandoned attempt's hold key
// before Obtain returns; past it, deletion goes on in the background.
const abandonTimeout = time.Second

// abandon deletes the hold key of an attempt given up, before Obtain
// returns; if that fails, in the background. If a creation of it got no
// answer (doubtful), path is swept from then on; otherwise, once the
// deletion has answered, the name (under names) is free for the next
// attempt.
func (c *Client) abandon(names, path string, rev int64, g *generation, doubtful bool) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
	defer cancel()
	err := c.deleteHold(ctx, path, rev)
	switch {
	case doubtful:
		c.sweep(path, g)
	case err == nil || err == lock.ErrNotHeld:
		c.mu.Lock()
		c.freeLocked(g, names, path)
		c.mu.Unlock()
	}
	if err != nil && err != lock.ErrNotHeld {
		c.reap(path, rev)
	}
}

// maxFreeNames bounds the names a lease keeps for reuse: one per prefix
// (a key's mutex, or a side of its read-write lock) released last.
const maxFreeNames = 1024

// name returns the name of a new attempt's hold key under names on g's
// lease: the one this Client's last attempt there gave back, if any, else
// a new one, "<names><lease hex>-<n>" (c.seq). A name is given back only
// when every request that touched it has answered and its key is known to
// be gone (Release's deletion answered; an abandoned attempt's, likewise);
// never when a request on it got no answer (a creation, which the Client
// then sweeps, or a deletion, which could still be applied late): so a
// request applied late deletes or makes nothing at a name in use again
// (TestLateReleaseSparesNextHold, TestLateCreationSwept). Reusing names
// keeps the keys under a lock's prefix few: etcd's index keeps every
// deleted key until the next compaction, and each read of a prefix walks
// them all, so with a new name per attempt every acquisition of a busy
// key would grow slower until then (TestNamesReused).
func (c *Client) name(names string, g *generation) string {
	c.mu.Lock()
	path, ok := g.free[names]
	if ok {
		delete(g.free, names)
	}
	c.mu.Unlock()
	if ok {
		return path
	}
	return names + strconv.FormatInt(int64(g.id), 16) + "-" + strconv.FormatUint(c.seq.Add(1), 10)
}

// freeLocked gives the name path under names back for g's next attempt
// there (see name); at most maxFreeNames are kept, an arbitrary one
// dropped for a new one. c.mu must be held.
func (c *Client) freeLocked(g *generation, names, path string) {
	if g.why != nil {
		return
	}
	if _, ok := g.free[names]; !ok && len(g.free) >= maxFreeNames {
		for k := range g.free {
			delete(g.free, k)
			break
		}
	}
	g.free[names] = path
}

// sweep keeps path free of keys on g's lease from now until g ends or the
// Client is closed. It is called once path's attempt has ended (released,
// given up) if a creation of path got no answer: that request may still
// reach the server late (held on the wire) and make the key again, which
// would then hold or queue with no one to delete it, since no attempt uses
// the name again (TestLateCreationSwept). It deletes what is there, then
// watches path for creations and deletes each, every deletion conditional
// on the key's create revision. One watch per such name, for the lease's
// life: only creations that got no answer within opTimeout make one.
func (c *Client) sweep(path string, g *generation) {
	c.spawn(func() {
		for pause := 50 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
			if from, ok := c.sweepOnce(c.life, path, g); ok {
				c.sweepWatch(c.life, path, g, from)
			}
			select {
			case <-c.life.Done():
				return
			case <-g.dead:
				return
			case <-time.After(pause):
			}
		}
	})
}

// sweepOnce deletes the key at path if it carries g's lease, and returns
// the revision of the read (ok false if the read or the deletion failed).
func (c *Client) sweepOnce(ctx context.Context, path string, g *generation) (int64, bool) {
	rctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	resp, err := c.cli.Get(rctx, path)
	if err != nil {
		return 0, false
	}
	if len(resp.Kvs) > 0 && resp.Kvs[0].Lease == int64(g.id) {
		if err := c.deleteHold(rctx, path, resp.Kvs[0].CreateRevision); err != nil && err != lock.ErrNotHeld {
			return 0, false
		}
		c.log.Info("etcdlock: a late copy of a creation made a hold key again; deleted", "key", path)
	}
	return resp.Header.Revision, true
}

// sweepWatch watches path from revision from+1 and deletes each key made
// there on g's lease, until the watch ends, a deletion fails, g ends or
// ctx does.
func (c *Client) sweepWatch(ctx context.Context, path string, g *generation, from int64) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := c.cli.Watch(wctx, path, clientv3.WithRev(from+1), clientv3.WithFilterDelete())
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case wr, ok = <-wch:
		case <-g.dead:
			return
		}
		if !ok || wr.Err() != nil {
			return
		}
		for _, ev := range wr.Events {
			if ev.Kv.Lease != int64(g.id) {
				continue
			}
			dctx, dcancel := context.WithTimeout(ctx, opTimeout)
			err := c.deleteHold(dctx, path, ev.Kv.CreateRevision)
			dcancel()
			if err != nil && err != lock.ErrNotHeld {
				return // sweepOnce again
			}
			c.log.Info("etcdlock: a late copy of a creation made a hold key again; deleted", "key", path)
		}
	}
}

// sleep waits *pause (doubled for the next time, up to a second), or until
// ctx ends or the Client is closed.
func (c *Client) sleep(ctx context.Context, pause *time.Duration) error {
	t := time.NewTimer(*pause)
	defer t.Stop()
	*pause = min(2**pause, time.Second)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return notObtained(ctx)
	case <-c.life.Done():
		return ErrClosed
	}
}
