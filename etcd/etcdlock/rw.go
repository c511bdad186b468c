package etcdlock

import (
	"context"

	"github.com/coordkit/coordkit/internal/lockopt"
	"github.com/coordkit/coordkit/lock"
)

// Client is a lock.RWLocker, as the Redis lock.RW and zklock.Client are.
var _ lock.RWLocker = (*Client)(nil)

// Read returns the shared side of the Client's read-write locks: readers
// share a key, a writer (Write) excludes readers and other writers. The
// read-write lock of a key is another lock than Obtain's mutex of the same
// key (its keys live under "<prefix>.rw/", see the package documentation).
// The side is safe for concurrent use.
func (c *Client) Read() lock.Locker { return rwSide{c: c, write: false} }

// Write returns the exclusive side of the Client's read-write locks (see
// Read).
func (c *Client) Write() lock.Locker { return rwSide{c: c, write: true} }

type rwSide struct {
	c     *Client
	write bool
}

// Obtain blocks until ctx's owner holds key's side, as Client.Obtain does
// for the mutex: the same errors, and ErrUpgrade for the write side when
// ctx's owner holds the read side on this Client. An owner holding the
// write side takes the read side at once (see the package documentation).
func (s rwSide) Obtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return s.c.observed(key, func() (lock.Lease, error) { return s.c.obtainRW(ctx, key, opts, s.write, true) })
}

// TryObtain is Obtain without waiting: lock.ErrNotObtained if a writer (or,
// for the write side, anyone) holds key or queued before.
func (s rwSide) TryObtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return s.c.observed(key, func() (lock.Lease, error) { return s.c.obtainRW(ctx, key, opts, s.write, false) })
}

// rwQueue returns where a hold key of key's read-write lock goes: readers
// under "<prefix>.rw/<key>/r/", writers under "<prefix>.rw/<key>/w/", each
// named "<lease hex>-<n>" (Client.name: one Client may hold or wait for a
// key several times at once, its owners sharing the read side, and each
// attempt has a name of its own). A writer waits for every key made before
// it; a reader for the writers.
func (c *Client) rwQueue(key string, write bool) queue {
	pfx := c.prefix + ".rw/" + key + "/"
	names, first := pfx+"r/", pfx+"w/"
	if write {
		names, first = pfx+"w/", pfx
	}
	return queue{key: key, pfx: pfx, first: first, names: names}
}

func (c *Client) obtainRW(ctx context.Context, key string, opts []lock.Option, write, block bool) (lock.Lease, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	if o := lockopt.Apply(opts); o.TTL < 0 {
		return nil, ErrInvalidTTL
	}
	owner, hasOwner := lock.OwnerFrom(ctx)
	side := byte('r')
	if write {
		side = 'w'
	}
	hk := ownedKey{owner: owner, key: key, side: side}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if hasOwner {
		alive := func(h *hold) bool { return h != nil && !h.isLost && c.checkLocked(h.gen) }
		if h := c.owned[hk]; alive(h) {
			// Re-entry: a writer's hold also serves its owner's reads.
			h.count++
			if write {
				h.writes++
			}
			c.mu.Unlock()
			return &Lease{c: c, h: h, write: write}, nil
		}
		if write {
			if alive(c.owned[ownedKey{owner, key, 'r'}]) {
				c.mu.Unlock()
				return nil, ErrUpgrade
			}
		} else if h := c.owned[ownedKey{owner, key, 'w'}]; alive(h) {
			// The writer takes the read side: a level of its exclusive
			// hold, whose key stays until both sides are released, so
			// that no writer queued behind it enters while the owner
			// reads.
			h.count++
			h.reads = true
			c.owned[hk] = h
			c.mu.Unlock()
			return &Lease{c: c, h: h}, nil
		}
	}
	c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, notObtained(ctx)
	}
	q := c.rwQueue(key, write)
	for {
		h, _, err := c.acquire(ctx, q, owner, block)
		c.mu.Lock()
		if err == nil && c.closed {
			err = ErrClosed // Close revoked (or is revoking) the lease, and the key with it
		}
		if err == nil && !c.checkLocked(h.gen) {
			// Lost since granted, the key with it: start again on a new lease.
			if err = ctx.Err(); err == nil {
				c.mu.Unlock()
				continue
			}
			err = notObtained(ctx)
		}
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		h.count = 1
		h.since = c.now()
		if write {
			h.writes = 1
		}
		h.gen.holds[h] = struct{}{}
		if hasOwner && c.owned[hk] == nil {
			h.hk, h.owned = hk, true
			c.owned[hk] = h
		}
		c.mu.Unlock()
		return &Lease{c: c, h: h, write: write}, nil
	}
}
