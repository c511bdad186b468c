package semaphore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/zklock"
)

// DefaultZKRoot is the parent of every ZooKeeper semaphore's znodes.
const DefaultZKRoot = "/coordkit/semaphores"

// ZKOption configures a ZK semaphore client.
type ZKOption func(*zkOptions)

type zkOptions struct {
	root    string
	permits int
	zklock  []zklock.Option
}

// WithZKRoot sets the path under which the semaphores' znodes live.
// Default: DefaultZKRoot.
func WithZKRoot(p string) ZKOption { return func(o *zkOptions) { o.root = p } }

// WithZKPermits sets N for the semaphores whose N was never set in
// ZooKeeper (SetPermits). Default: 1.
func WithZKPermits(n int) ZKOption { return func(o *zkOptions) { o.permits = n } }

// WithZKLockOptions passes options to the zklock client that holds the
// permits (zklock.WithSessionTimeout to bound how late a lost permit is
// reported, zklock.WithLogger, zklock.WithMetrics, zklock.WithACL).
func WithZKLockOptions(opts ...zklock.Option) ZKOption {
	return func(o *zkOptions) { o.zklock = append(o.zklock, opts...) }
}

// ZK is a counting semaphore on ZooKeeper: Curator's
// InterProcessSemaphoreV2 on coordkit's ZooKeeper lock. For a semaphore
// named name:
//
//	<root>/<name>#mutex   zklock lock: the acquirers' line, one at a time
//	<root>/<name>#leases  zklock read locks: one ephemeral node per permit
//	<root>/<name>#limit   persistent node whose data is N (SetPermits)
//
// (names escaped as zklock escapes keys). An acquisition takes the mutex
// (waiters queue in its FIFO line, each watching only its predecessor),
// counts the lease nodes, takes a read lock on #leases (a new ephemeral
// node: the permit, its czxid the fencing token) if fewer than N exist,
// and otherwise waits, holding the mutex, for the #leases children to
// change; then it releases the mutex. The count is worth something only
// while the mutex is held: the acquisition checks the mutex's loss just
// before it creates the permit, and after it reads the mutex's line (in
// the session's order, so after the create) to confirm that its mutex
// node still leads it; if not (the session expired in between and another
// acquirer may have taken the last permit) it deletes the permit and
// fails with the loss. Only the acquirer at the head of the line watches
// the leases: no herd. A permit is a zklock lease: it lives as long as the
// session, and is reported lost as zklock reports its leases (with
// zklock.WithSessionTimeout, before the server can expire the session).
// ZK implements lock.Locker.
type ZK struct {
	conn  *zk.Conn
	locks *zklock.Client
	o     zkOptions
}

var _ lock.Locker = (*ZK)(nil)

// NewZK returns a semaphore client on conn, which it does not close. It
// returns an error matching lock.ErrInvalid for a nil conn or bad options.
func NewZK(conn *zk.Conn, opts ...ZKOption) (*ZK, error) {
	o := zkOptions{root: DefaultZKRoot, permits: 1}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.permits < 1 {
		return nil, fmt.Errorf("%w: semaphore: %d permits", lock.ErrInvalid, o.permits)
	}
	locks, err := zklock.New(conn, append([]zklock.Option{zklock.WithRoot(o.root)}, o.zklock...)...)
	if err != nil {
		return nil, err
	}
	return &ZK{conn: conn, locks: locks, o: o}, nil
}

// Close ends the client's permits (their Lost channels close; their nodes
// are deleted when the session ends or in the background) and its
// background work. It does not close conn.
func (z *ZK) Close() error { return z.locks.Close() }

// Obtain is Acquire, for lock.Locker (lock.Do).
func (z *ZK) Obtain(ctx context.Context, name string, opts ...lock.Option) (lock.Lease, error) {
	return z.Acquire(ctx, name)
}

// TryObtain is TryAcquire, for lock.Locker.
func (z *ZK) TryObtain(ctx context.Context, name string, opts ...lock.Option) (lock.Lease, error) {
	return z.TryAcquire(ctx, name)
}

// Acquire blocks until it holds a permit of name, ctx ends (an error
// matching lock.ErrNotObtained and ctx's error) or the client is closed;
// it fails with an error matching lock.ErrLockLost if the acquirers' mutex
// is lost during the acquisition (the session expired).
// The permit is a *zklock.Lease. Permits are not reentrant.
func (z *ZK) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	return z.acquire(ctx, name, true)
}

// TryAcquire makes one attempt: a permit, or ErrNoPermit when every permit
// is taken or another acquisition is being decided (the mutex is held).
func (z *ZK) TryAcquire(ctx context.Context, name string) (lock.Lease, error) {
	return z.acquire(ctx, name, false)
}

// owner returns a fresh owner, so that no permit or mutex hold re-enters
// another (the caller's ctx may carry an owner of its own).
func owner() string {
	var b [8]byte
	rand.Read(b[:])
	return "semaphore#" + hex.EncodeToString(b[:])
}

func (z *ZK) acquire(ctx context.Context, name string, wait bool) (lock.Lease, error) {
	if name == "" || strings.Contains(name, "#") {
		return nil, fmt.Errorf("%w: semaphore: name %q (empty, or with '#')", lock.ErrInvalid, name)
	}
	leasesKey := name + "#leases"
	leases, err := z.locks.Path(leasesKey)
	if err != nil {
		return nil, err
	}
	mctx := lock.WithOwner(ctx, owner())
	var mutex lock.Lease
	if wait {
		mutex, err = z.locks.Obtain(mctx, name+"#mutex")
	} else {
		mutex, err = z.locks.TryObtain(mctx, name+"#mutex")
		if errors.Is(err, lock.ErrNotObtained) && ctx.Err() == nil {
			err = ErrNoPermit
		}
	}
	if err != nil {
		return nil, err
	}
	defer mutex.Release(context.WithoutCancel(ctx))
	for {
		limit, err := z.permits(ctx, name)
		if err != nil {
			return nil, err
		}
		names, _, ch, err := z.conn.ChildrenW(leases)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			names, ch = nil, nil // no permit ever: the read lock creates the node
		case err != nil:
			return nil, fmt.Errorf("semaphore: list the permits of %q: %w", name, err)
		}
		held := 0
		for _, n := range names {
			if strings.Contains(n, "-read-") {
				held++
			}
		}
		if held < limit {
			// The count was read under the mutex: it is worth something
			// only while the mutex is held. Checked before the create
			// (cheap, local), then after it against the server, since the
			// session may expire in between: the create would then run in
			// a new session, outside the mutex, while another acquirer
			// holding it takes the last permit.
			if err := mutexLost(name, mutex); err != nil {
				return nil, err
			}
			if h := zkHookBeforePermit; h != nil {
				h(name)
			}
			p, err := z.locks.Read().TryObtain(lock.WithOwner(ctx, owner()), leasesKey)
			if err != nil {
				return nil, fmt.Errorf("semaphore: take a permit of %q: %w", name, err)
			}
			if err := z.stillHeld(ctx, name, mutex); err != nil {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				p.Release(rctx) // zklock deletes it in the background if this fails
				cancel()
				return nil, err
			}
			return p, nil
		}
		if !wait {
			return nil, ErrNoPermit
		}
		// (ch is nil when #leases does not exist, with N = 0: the timer
		// looks again.)
		t := time.NewTimer(time.Second) // a closed zk.Conn never fires its watches
		select {
		case <-ch:
		case <-t.C:
		case <-mutex.Lost():
			t.Stop()
			return nil, mutexLost(name, mutex)
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(lock.ErrNotObtained, ctx.Err())
		}
		t.Stop()
	}
}

// mutexLost returns the error of an acquisition whose mutex was reported
// lost (matching lock.ErrLockLost and the reason), or nil.
func mutexLost(name string, mutex lock.Lease) error {
	if err := lock.LostCause(mutex); err != nil {
		return fmt.Errorf("semaphore: %q: the acquirers' mutex was lost: %w", name, err)
	}
	return nil
}

// stillHeld checks, after a permit's creation, that the acquirers' mutex
// was held throughout: its node, the one this acquisition created (the
// same czxid, the lease's token), still leads the mutex's line. ZooKeeper
// answers a session's requests in order, so this read sees the create; a
// mutex node that exists now existed when the permit was counted and
// created (ephemeral nodes are never re-created), and no other acquirer
// could hold the mutex meanwhile. A mutex whose session expired is gone
// with it, whatever the client has reported yet.
func (z *ZK) stillHeld(ctx context.Context, name string, mutex lock.Lease) error {
	if err := mutexLost(name, mutex); err != nil {
		return err
	}
	_, token, err := z.locks.Holder(ctx, name+"#mutex")
	switch {
	case err != nil && ctx.Err() != nil:
		return errors.Join(lock.ErrNotObtained, ctx.Err())
	case err != nil:
		return fmt.Errorf("semaphore: %q: confirm the acquirers' mutex after taking a permit (the permit is given back): %w", name, err)
	case token != mutex.Token():
		return fmt.Errorf("semaphore: %q: the acquirers' mutex was lost before the permit was taken (its node is gone; the permit is given back): %w: %w",
			name, lock.ErrLockLost, lock.ErrNotHeld)
	}
	return nil
}

// zkHookBeforePermit, if set (by tests only), is called with the name
// just before an acquisition creates its permit.
var zkHookBeforePermit func(name string)

// permits returns name's N: the data of its #limit node, or the client's
// default.
func (z *ZK) permits(ctx context.Context, name string) (int, error) {
	p, err := z.locks.Path(name + "#limit")
	if err != nil {
		return 0, err
	}
	data, _, err := z.conn.Get(p)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return z.o.permits, nil
	case err != nil:
		return 0, fmt.Errorf("semaphore: read the permits of %q: %w", name, err)
	}
	n, err := strconv.Atoi(string(data))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("semaphore: %s holds %q, not a number of permits", p, data)
	}
	return n, nil
}

// SetPermits sets N for every client of name. A larger N lets waiters in
// once the mutex holder looks again (at the next change of the leases, or
// within a second); a smaller one takes effect as permits come back.
func (z *ZK) SetPermits(ctx context.Context, name string, n int) error {
	if name == "" || strings.Contains(name, "#") {
		return fmt.Errorf("%w: semaphore: name %q (empty, or with '#')", lock.ErrInvalid, name)
	}
	if n < 0 {
		return fmt.Errorf("%w: semaphore: %d permits", lock.ErrInvalid, n)
	}
	p, err := z.locks.Path(name + "#limit")
	if err != nil {
		return err
	}
	data := []byte(strconv.Itoa(n))
	if _, err := z.conn.Set(p, data, -1); !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	// The node does not exist: create it and the path to it.
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i := 1; i < len(parts); i++ {
		_, err := z.conn.Create("/"+strings.Join(parts[:i], "/"), nil, 0, zk.WorldACL(zk.PermAll))
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	if _, err := z.conn.Create(p, data, 0, zk.WorldACL(zk.PermAll)); errors.Is(err, zk.ErrNodeExists) {
		_, err = z.conn.Set(p, data, -1)
		return err
	} else {
		return err
	}
}
