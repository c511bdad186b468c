package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordkit/coordkit/internal/observe"
	"github.com/coordkit/coordkit/lock"
)

var (
	_ lock.Locker      = (*Client)(nil)
	_ lock.Lease       = (*Lease)(nil)
	_ lock.LeaseStatus = (*Lease)(nil)
)

// opTimeout bounds the requests that run detached from the caller's ctx:
// the creation of a hold key (its outcome must be known, see acquire), the
// deletion of an abandoned one, the revocation at Close.
const opTimeout = 5 * time.Second

// Client obtains locks on keys with one etcd lease (see the package
// documentation). It is safe for concurrent use. Close it when done: that
// revokes the lease, which frees every key it holds.
type Client struct {
	cli    *clientv3.Client
	prefix string
	ttl    time.Duration // the lease TTL asked for, whole seconds
	log    *slog.Logger
	obs    observe.Lock // the metrics hooks (WithMetrics); it logs nothing: log does
	now    func() time.Time

	// life is the lifetime of the background goroutines (keepers,
	// reapers), cancelled by Close; wg waits for them.
	life context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	granting chan struct{} // a semaphore of one: one Grant in flight at a time
	seq      atomic.Uint64 // numbers the hold key names (Client.name)

	mu     sync.Mutex // protects the fields below, every generation's until, why and holds, every hold's mutable fields, every slot's refs
	closed bool
	gen    *generation        // the lease new holds use; nil before the first, and after its loss
	slots  map[string]*slot   // per key: this Client's one hold or attempt at a time
	owned  map[ownedKey]*hold // the live holds of ctx owners, for re-entry (a writer's hold also under its 'r' side while it has reads)
}

// generation is one etcd lease of the Client.
type generation struct {
	id   clientv3.LeaseID
	ttl  time.Duration // as granted
	dead chan struct{} // closed when the lease is lost or the Client closed
	// Protected by Client.mu.
	until time.Time          // the lease is known to be alive until then
	why   error              // set before dead is closed
	holds map[*hold]struct{} // the live holds on this lease
	free  map[string]string  // per names prefix, a hold key name to reuse (Client.name)
	// lost: the holds the lease took with it, for keep to report to the
	// metrics hooks once it ends.
	lost []*hold
}

// window is how long after the send of an answered keep-alive (or of the
// Grant) the lease is taken as alive: 2T/3, T/3 before the server, which
// renews it on receipt for T, can expire it.
func (g *generation) window() time.Duration { return g.ttl * 2 / 3 }

// beat is the period of the keep-alives: T/6, so three can fail in a row
// within the window.
func (g *generation) beat() time.Duration { return g.ttl / 6 }

// slot serialises this Client's holds and attempts on one key: one hold
// key of the Client's at a time (a creation of unknown outcome keeps the
// slot until its key is deleted). ch holds a token while an owner holds or
// waits for the key.
type slot struct {
	ch   chan struct{}
	refs int // the owners holding or waiting for ch; protected by Client.mu
}

// ownedKey names an owner's hold of a key: side is 0 for the mutex
// (Obtain), 'r' and 'w' for the two sides of the read-write lock.
type ownedKey struct {
	owner, key string
	side       byte
}

// New returns a Client that locks keys on the etcd cluster cli talks to,
// under WithPrefix's prefix, with one lease of WithTTL's TTL for all its
// holds. cli must stay open while the Client is used; the Client does not
// close it. New does no I/O: the lease is granted on first use. It returns
// ErrNilClient, ErrInvalidPrefix or ErrInvalidTTL.
func New(cli *clientv3.Client, opts ...Option) (*Client, error) {
	if cli == nil {
		return nil, ErrNilClient
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.prefix == "" || strings.HasSuffix(o.prefix, "/") {
		return nil, ErrInvalidPrefix
	}
	if o.ttl < MinTTL {
		return nil, ErrInvalidTTL
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	life, stop := context.WithCancel(context.Background())
	return &Client{
		cli:      cli,
		prefix:   o.prefix,
		ttl:      (o.ttl + time.Second - 1) / time.Second * time.Second, // rounded up
		log:      o.logger,
		obs:      observe.Lock{Metrics: o.metrics, KeyFn: o.metricsKey},
		now:      time.Now,
		life:     life,
		stop:     stop,
		granting: make(chan struct{}, 1),
		slots:    map[string]*slot{},
		owned:    map[ownedKey]*hold{},
	}, nil
}

// Close reports every lease still held lost (reason ErrClosed), revokes the
// Client's etcd lease, which deletes every key it holds and wakes the next
// waiters, and stops the Client's goroutines. Obtain and TryObtain then
// return ErrClosed. It returns the revocation's error, if any (the server
// then frees the keys when the lease expires). Closing twice does nothing.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	g := c.gen
	c.gen = nil
	if g != nil {
		c.killLocked(g, ErrClosed)
	}
	c.mu.Unlock()
	var err error
	if g != nil {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		if _, rerr := c.cli.Revoke(ctx, g.id); rerr != nil && !errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
			err = fmt.Errorf("etcdlock: close: revoke lease %x: %w", int64(g.id), rerr)
		}
		cancel()
	}
	c.stop()
	c.wg.Wait()
	return err
}

// spawn runs f in a goroutine the Client owns (Close waits for it), unless
// the Client is closed.
func (c *Client) spawn(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// lease returns the live lease, granting one if there is none.
func (c *Client) lease(ctx context.Context) (*generation, error) {
	if g, err := c.liveGen(); g != nil || err != nil {
		return g, err
	}
	select {
	case c.granting <- struct{}{}:
	case <-ctx.Done():
		return nil, notObtained(ctx)
	case <-c.life.Done():
		return nil, ErrClosed
	}
	defer func() { <-c.granting }()
	if g, err := c.liveGen(); g != nil || err != nil {
		return g, err // granted by another caller meanwhile
	}
	sent := c.now()
	resp, err := c.cli.Grant(ctx, int64(c.ttl/time.Second))
	if err != nil {
		if ctx.Err() != nil {
			return nil, notObtained(ctx)
		}
		return nil, fmt.Errorf("etcdlock: grant a lease: %w", err)
	}
	g := &generation{id: resp.ID, ttl: time.Duration(resp.TTL) * time.Second, dead: make(chan struct{}), holds: map[*hold]struct{}{}, free: map[string]string{}}
	g.until = sent.Add(g.window())
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		c.cli.Revoke(rctx, g.id)
		cancel()
		return nil, ErrClosed
	}
	c.gen = g
	c.wg.Add(1)
	go c.keep(g)
	c.mu.Unlock()
	return g, nil
}

// liveGen returns the current lease if it is alive, ErrClosed once the
// Client is closed, or neither.
func (c *Client) liveGen() (*generation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if g := c.gen; g != nil && g.why == nil {
		return g, nil
	}
	return nil, nil
}

// keep keeps g alive until it is lost or the Client closes: a keep-alive
// every g.beat(), each answered one extending g.until to its send time plus
// g.window(); once g.until has passed, or the server refuses a keep-alive,
// g is lost. A lost lease is revoked (the server may still keep it: the
// Client lost touch, not the lease), so that its keys go at once when
// the server hears of it.
func (c *Client) keep(g *generation) {
	defer c.wg.Done()
	defer c.reportLost(g)
	t := time.NewTimer(g.beat())
	defer t.Stop()
	next := c.now().Add(g.beat())
	for {
		c.mu.Lock()
		until := g.until
		c.mu.Unlock()
		now := c.now()
		if !now.Before(until) {
			c.kill(g, fmt.Errorf("%w: no keep-alive of lease %x answered since %v", ErrLeaseLost, int64(g.id), until.Add(-g.window()).Format(time.StampMilli)))
			break
		}
		t.Reset(min(next.Sub(now), until.Sub(now)))
		select {
		case <-c.life.Done():
			return
		case <-g.dead:
		case <-t.C:
		}
		if c.lostOrClosed(g) {
			break
		}
		if c.now().Before(next) {
			continue // the window's end came first: judged at the loop's top
		}
		sent := c.now()
		kctx, cancel := context.WithDeadline(c.life, until)
		resp, err := c.cli.KeepAliveOnce(kctx, g.id)
		cancel()
		c.reportRenewed(g, err)
		next = sent.Add(g.beat())
		switch {
		case err == nil:
			ttl := min(time.Duration(resp.TTL)*time.Second, g.ttl)
			c.mu.Lock()
			if u := sent.Add(ttl * 2 / 3); u.After(g.until) {
				g.until = u
			}
			c.mu.Unlock()
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			c.kill(g, fmt.Errorf("%w: the server no longer has lease %x", ErrLeaseLost, int64(g.id)))
		case c.life.Err() != nil:
			return
		default:
			c.log.Info("etcdlock: keep-alive failed", "lease", fmt.Sprintf("%x", int64(g.id)), "err", err)
			next = c.now().Add(g.beat() / 4)
		}
		if c.lostOrClosed(g) {
			break
		}
	}
	if c.life.Err() != nil {
		return
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return // Close revokes it
	}
	ctx, cancel := context.WithTimeout(c.life, opTimeout)
	if _, err := c.cli.Revoke(ctx, g.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		c.log.Debug("etcdlock: revoking a lost lease failed; the server expires it", "lease", fmt.Sprintf("%x", int64(g.id)), "err", err)
	}
	cancel()
}

// reportRenewed reports a keep-alive of g to the metrics hooks, once for
// each live hold on it.
func (c *Client) reportRenewed(g *generation, err error) {
	if c.obs.Metrics == nil {
		return
	}
	c.mu.Lock()
	hs := make([]*hold, 0, len(g.holds))
	for h := range g.holds {
		hs = append(hs, h)
	}
	c.mu.Unlock()
	for _, h := range hs {
		c.obs.Renewed(h.key, h.hk.owner, h.token, err)
	}
}

// reportLost reports the holds g took with it to the metrics hooks: Lost,
// then Held. keep calls it as it ends, which it does once g is lost (or
// the Client closed, which loses g first).
func (c *Client) reportLost(g *generation) {
	if c.obs.Metrics == nil {
		return
	}
	c.mu.Lock()
	hs, why := g.lost, g.why
	g.lost = nil
	c.mu.Unlock()
	now := c.now()
	for _, h := range hs {
		c.obs.Lost(h.key, h.hk.owner, h.token, fmt.Errorf("%w: %w", lock.ErrLockLost, why))
		c.obs.Held(h.key, now.Sub(h.since))
	}
}

// lostOrClosed reports whether g is lost (or the Client closed).
func (c *Client) lostOrClosed(g *generation) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return g.why != nil || c.closed
}

// kill reports g and every hold on it lost for reason why.
func (c *Client) kill(g *generation, why error) {
	c.mu.Lock()
	c.killLocked(g, why)
	c.mu.Unlock()
}

// killLocked is kill with c.mu held.
func (c *Client) killLocked(g *generation, why error) {
	if g.why != nil {
		return
	}
	g.why = why
	close(g.dead)
	if c.gen == g {
		c.gen = nil
	}
	for h := range g.holds {
		if c.obs.Metrics != nil {
			g.lost = append(g.lost, h)
		}
		c.loseLocked(h, why)
	}
	if !errors.Is(why, ErrClosed) {
		c.log.Warn("etcdlock: lease lost", "lease", fmt.Sprintf("%x", int64(g.id)), "reason", why)
	}
}

// checkLocked reports g lost if its window has passed (the keeper has not
// run since: the process was paused, say), and returns whether g is alive.
func (c *Client) checkLocked(g *generation) bool {
	if g.why == nil && !c.now().Before(g.until) {
		c.killLocked(g, fmt.Errorf("%w: no keep-alive of lease %x answered since %v", ErrLeaseLost, int64(g.id), g.until.Add(-g.window()).Format(time.StampMilli)))
	}
	return g.why == nil
}

// enter takes key's slot: at once, or (block) when this Client's other
// owner of key leaves it.
func (c *Client) enter(ctx context.Context, key string, block bool) error {
	c.mu.Lock()
	s := c.slots[key]
	if s == nil {
		s = &slot{ch: make(chan struct{}, 1)}
		c.slots[key] = s
	}
	s.refs++
	c.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
		return nil
	default:
	}
	var err error
	if !block {
		err = lock.ErrNotObtained
	} else {
		select {
		case s.ch <- struct{}{}:
			return nil
		case <-ctx.Done():
			err = notObtained(ctx)
		case <-c.life.Done():
			err = ErrClosed
		}
	}
	c.mu.Lock()
	c.unrefLocked(key, s)
	c.mu.Unlock()
	return err
}

// leaveLocked gives key's slot back. c.mu must be held.
func (c *Client) leaveLocked(key string) {
	s := c.slots[key]
	<-s.ch // ours: it never blocks
	c.unrefLocked(key, s)
}

func (c *Client) unrefLocked(key string, s *slot) {
	if s.refs--; s.refs == 0 {
		delete(c.slots, key)
	}
}

// notObtained is the error of an attempt given up because ctx ended.
func notObtained(ctx context.Context) error {
	return errors.Join(lock.ErrNotObtained, ctx.Err())
}
