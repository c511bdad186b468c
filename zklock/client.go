package zklock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/internal/observe"
	"github.com/coordkit/coordkit/lock"
)

var (
	_ lock.Locker = (*Client)(nil)
	_ lock.Locker = (*RWLocker)(nil)
	_ lock.Lease  = (*Lease)(nil)
)

// abandonTimeout bounds the deletion of a waiter's node when its Obtain gives
// up (ctx ended); past it, deletion goes on in the background.
const abandonTimeout = time.Second

// Client obtains locks on keys in one ZooKeeper session (one *zk.Conn). It
// is safe for concurrent use. Its mutual exclusion lock is Obtain /
// TryObtain; Read and Write give the two sides of a read-write lock on the
// same keys.
type Client struct {
	conn    *zk.Conn
	o       options
	obs     observe.Lock // logger and metrics hooks
	root    string
	acl     []zk.ACL
	timeout time.Duration // the session timeout T (WithSessionTimeout), 0 if unknown
	beat    time.Duration // heartbeat period while leases are held: T/6 less two ticks
	tick    time.Duration // how often the monitor looks at the session

	stop chan struct{}  // closed by Close
	wg   sync.WaitGroup // the monitor, heartbeats, reapers and requests abandoned by their ctx

	mu         sync.Mutex // protects the fields below
	closed     bool
	live       map[*hold]struct{}        // held, not yet released nor lost
	owned      map[holdKey]*hold         // the live holds of ctx owners, for re-entry
	pending    map[holdKey]chan struct{} // owners' acquisitions under way; closed when done
	monitoring bool                      // the monitor goroutine runs
	// The session's liveness (see liveness.go). Only requests that go
	// through the leader (syncs, creates) count.
	aliveSession int64     // the session aliveUntil is about
	aliveUntil   time.Time // its leases are lost then, unless a later request is answered
	sentSession  int64     // the session lastSent and chainStart are about
	lastSent     time.Time // when the last request was sent
	chainStart   time.Time // since when requests were sent at most T/6 apart
	beating      int       // heartbeats in flight
	doubted      bool      // the monitor found the session in doubt at its last look
}

// holdKey identifies what an owner holds: re-entry is by owner, key and side.
type holdKey struct {
	owner, key string
	shared     bool
}

// New returns a Client that locks keys through conn, under the root path
// (WithRoot). conn must stay open while the Client is used; the Client does
// not close it. New does no I/O: parents are created on first use. It
// returns ErrNilConn or ErrInvalidRoot.
func New(conn *zk.Conn, opts ...Option) (*Client, error) {
	if conn == nil {
		return nil, ErrNilConn
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if !validRoot(o.root) {
		return nil, ErrInvalidRoot
	}
	if o.sessionTimeout < 0 {
		return nil, ErrInvalidSessionTimeout
	}
	c := &Client{
		conn:    conn,
		o:       o,
		obs:     observe.NewLock("coordkit/zklock", o.logger, o.metrics, o.metricsKey, ErrClosed),
		root:    o.root,
		acl:     o.acl,
		stop:    make(chan struct{}),
		live:    map[*hold]struct{}{},
		owned:   map[holdKey]*hold{},
		pending: map[holdKey]chan struct{}{},
		tick:    10 * time.Millisecond,
	}
	if o.sessionTimeout > 0 {
		c.timeout = o.sessionTimeout
		c.tick = min(max(o.sessionTimeout/30, 5*time.Millisecond), 100*time.Millisecond)
		c.beat = max(o.sessionTimeout/6-2*c.tick, time.Millisecond) // sent a tick late at most
	}
	return c, nil
}

// Close reports every lease of the Client lost (their Lost channels close),
// stops its background work and waits for it. Lock nodes of leases not
// released stay until their session ends; Release them first. Close may wait
// for requests in flight, which end when conn answers, fails them or is
// closed. Close does not close conn. It is idempotent, and returns nil (the
// error is there for the same shape on every coordkit client).
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.stop)
	for h := range c.live {
		c.loseLocked(h, ErrClosed)
	}
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

// Obtain blocks until key's exclusive lock is held by the caller, ctx ends
// (errors.Join(lock.ErrNotObtained, ctx.Err())), the Client is closed
// (ErrClosed) or ZooKeeper refuses a request (e.g. zk.ErrNoAuth). If ctx's
// owner (lock.WithOwner) already holds key on this Client, Obtain re-enters:
// the lease has the same token. Waiters are served in arrival order. The
// options TTL, MaxHold and Retry do not apply: the lock lives as long as
// the session, and waiters are woken by a watch on their predecessor.
func (c *Client) Obtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return c.obtain(ctx, key, kindLock, true)
}

// TryObtain makes one attempt on key's exclusive lock and returns
// lock.ErrNotObtained if another owner holds it or waits for it. It costs
// one round trip when the key is free, and leaves no node behind otherwise.
func (c *Client) TryObtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return c.obtain(ctx, key, kindLock, false)
}

// RWLocker is one side (read or write) of the read-write lock of a Client's
// keys. Readers share a key; a writer excludes readers and other writers;
// both queue in arrival order. The write side and the Client's own
// Obtain are the same exclusive lock (and re-enter each other). An owner
// holding the write lock may also take the read lock, at once even while
// other writers queue (their wait then lasts until both are released); the
// reverse returns ErrUpgrade. It is safe for concurrent use.
type RWLocker struct {
	c *Client
	k kind
}

// Read returns the shared side of the Client's read-write locks.
func (c *Client) Read() lock.Locker { return &RWLocker{c: c, k: kindRead} }

// Write returns the exclusive side of the Client's read-write locks.
func (c *Client) Write() lock.Locker { return &RWLocker{c: c, k: kindWrite} }

// Obtain is Client.Obtain for this side of the read-write lock.
func (l *RWLocker) Obtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return l.c.obtain(ctx, key, l.k, true)
}

// TryObtain is Client.TryObtain for this side of the read-write lock.
func (l *RWLocker) TryObtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return l.c.obtain(ctx, key, l.k, false)
}

func (c *Client) obtain(ctx context.Context, key string, k kind, block bool) (lock.Lease, error) {
	if c.o.metrics == nil {
		return c.obtainLease(ctx, key, k, block)
	}
	begin := time.Now()
	l, err := c.obtainLease(ctx, key, k, block)
	c.obs.Waited(key, time.Since(begin), err)
	return l, err
}

func (c *Client) obtainLease(ctx context.Context, key string, k kind, block bool) (lock.Lease, error) {
	esc, err := escapeKey(key)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, notObtained(ctx)
	}
	parent := c.root + "/" + esc
	owner, hasOwner := lock.OwnerFrom(ctx)
	hk := holdKey{owner: owner, key: key, shared: !k.exclusive()}
	var mine *hold // the owner's exclusive hold, which a reader ignores and may lean on
	for hasOwner {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if h := c.owned[hk]; h != nil {
			h.count++
			c.mu.Unlock()
			return &Lease{c: c, h: h}, nil
		}
		other := c.owned[holdKey{owner: owner, key: key, shared: k.exclusive()}]
		if k.exclusive() && other != nil {
			c.mu.Unlock()
			return nil, ErrUpgrade
		}
		if other != nil {
			mine = other
		}
		if ch := c.pending[hk]; ch != nil {
			c.mu.Unlock()
			select {
			case <-ch:
				continue // look again: re-enter what the other call obtained
			case <-ctx.Done():
				return nil, notObtained(ctx)
			}
		}
		ch := make(chan struct{})
		c.pending[hk] = ch
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			delete(c.pending, hk)
			close(ch)
			c.mu.Unlock()
		}()
		break
	}
	h, err := c.acquire(ctx, key, parent, k, mine, block, owner)
	if err != nil {
		return nil, err
	}
	h.count = 1
	h.hk, h.owned = hk, hasOwner
	if err := c.register(h); err != nil {
		c.conn.Delete(h.path, -1) // best effort: a closed Client no longer watches over it
		if h.anchor != nil {
			c.mu.Lock()
			h.anchor.count--
			c.mu.Unlock()
		}
		return nil, err
	}
	return &Lease{c: c, h: h}, nil
}

// register makes h live (watched by the monitor) and, for an owner, enterable.
func (c *Client) register(h *hold) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.live[h] = struct{}{}
	if h.owned {
		c.owned[h.hk] = h
	}
	if !c.monitoring {
		c.monitoring = true
		c.wg.Add(1)
		go c.monitor()
	}
	return nil
}

// notObtained is the error of an Obtain whose ctx ended.
func notObtained(ctx context.Context) error {
	return errors.Join(lock.ErrNotObtained, ctx.Err())
}

// Client is a lock.RWLocker, as the Redis lock.RW is.
var _ lock.RWLocker = (*Client)(nil)
