package semaphore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/lockopt"
	"github.com/coordkit/coordkit/internal/notify"
	"github.com/coordkit/coordkit/internal/observe"
	"github.com/coordkit/coordkit/internal/redisfn"
	"github.com/coordkit/coordkit/internal/redisver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/watchdog"
)

// Defaults of the options.
const (
	// DefaultPrefix starts every Redis key and channel name of the
	// semaphores of a Client.
	DefaultPrefix = "coordkit:sem:"
	// DefaultTTL is a permit's time to live, renewed every third of it.
	DefaultTTL = 30 * time.Second
	// DefaultWaiterTimeout is how long a queued waiter keeps its place
	// without calling in (it calls in every third of it).
	DefaultWaiterTimeout = 3 * time.Second
)

// ErrNoPermit is returned by TryAcquire when every permit is taken (or
// others queue for them). It matches lock.ErrNotObtained.
var ErrNoPermit = fmt.Errorf("semaphore: no permit free: %w", lock.ErrNotObtained)

// Option configures a Client.
type Option func(*options)

type options struct {
	prefix        string
	permits       int
	ttl           time.Duration
	waiterTimeout time.Duration
	metrics       lock.Metrics
	metricsKey    func(string) string
	logger        *slog.Logger
	now           func() time.Time
}

// WithPrefix sets the prefix of every key and channel. Default:
// DefaultPrefix. It must not be empty or contain a brace.
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithPermits sets N for the semaphores whose N was never set in Redis
// (SetPermits). Default: 1. Every client of a semaphore should agree on
// it, or SetPermits should set it once for all.
func WithPermits(n int) Option { return func(o *options) { o.permits = n } }

// WithDefaultTTL sets the TTL of permits acquired without lock.WithTTL.
// Default: DefaultTTL.
func WithDefaultTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithWaiterTimeout sets how long a queued waiter keeps its place without
// calling in. Default: DefaultWaiterTimeout.
func WithWaiterTimeout(d time.Duration) Option { return func(o *options) { o.waiterTimeout = d } }

// WithMetrics sets the hooks that observe acquisitions (Waited), holds,
// renewals, losses and releases: lock.Metrics, as every coordkit lock
// takes. Default: none.
func WithMetrics(m lock.Metrics) Option { return func(o *options) { o.metrics = m } }

// WithMetricsKey sets the label the metrics hooks get for a semaphore's
// name. Default: none, the hooks get "".
func WithMetricsKey(fn func(string) string) Option { return func(o *options) { o.metricsKey = fn } }

// WithClock sets the clock that times permits on this side: the
// watchdog's deadlines (Until, Lost), and whether a release began after
// the deadline (see Permit.Release). Default: time.Now. Tests use it to
// stand for a process stopped past its deadline.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// WithLogger sets where the client logs a renewal that failed or a permit
// lost (Warn; Info when Close ended it). Default: slog.Default() at New.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Client acquires permits of counting semaphores on one Redis (single
// node, Sentinel or Cluster through redis.UniversalClient). It implements
// lock.Locker: Obtain is Acquire, so lock.Do runs a function under a
// permit. It is safe for concurrent use.
type Client struct {
	ver  redisver.Gate // the server's version, checked at the first acquisition
	rdb  redis.UniversalClient
	run  *redisfn.Runner // FCALL or EVALSHA, chosen at the first call
	o    options
	obs  observe.Lock
	id   string // this client's id: its waiters are "<id>:<n>"
	wake string // this client's wake-up channel
	err  error  // invalid construction

	seq  atomic.Uint64
	quit chan struct{}

	mu      sync.Mutex
	closed  bool
	waiters map[string]chan int64 // by permit id: a wake-up (0) or a grant's token
	permits map[*Permit]struct{}
	listen  *notify.Listener // the wake-up channel, subscribed by the first wait on each server
}

var _ lock.Locker = (*Client)(nil)

// New returns a Client on rdb, which it does not close. Like lock.New it
// returns a Client even for invalid arguments: Err reports them, and every
// call returns that error (matching lock.ErrInvalid).
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	o := options{prefix: DefaultPrefix, permits: 1, ttl: DefaultTTL, waiterTimeout: DefaultWaiterTimeout, now: time.Now}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	c := &Client{rdb: rdb, run: redisfn.NewRunner(rdb, o.logger), o: o, id: strings.ReplaceAll(uuid.NewString(), "-", ""),
		quit: make(chan struct{}), waiters: map[string]chan int64{}, permits: map[*Permit]struct{}{}}
	c.wake = o.prefix + "wake:" + c.id
	c.listen = notify.NewListener(rdb, func(_, msg string) { c.deliver(msg) })
	c.obs = observe.NewLock("coordkit/semaphore", o.logger, o.metrics, o.metricsKey, ErrClosed)
	switch {
	case rdb == nil:
		c.err = fmt.Errorf("%w: semaphore: nil redis client", lock.ErrInvalid)
	case o.prefix == "" || strings.ContainsAny(o.prefix, "{}"):
		c.err = fmt.Errorf("%w: semaphore: key prefix %q (empty, or with a brace)", lock.ErrInvalid, o.prefix)
	case o.permits < 1:
		c.err = fmt.Errorf("%w: semaphore: %d permits", lock.ErrInvalid, o.permits)
	case o.ttl < watchdog.MinTTL:
		c.err = fmt.Errorf("%w: semaphore: TTL %v below %v", lock.ErrInvalid, o.ttl, watchdog.MinTTL)
	case o.waiterTimeout < 30*time.Millisecond:
		c.err = fmt.Errorf("%w: semaphore: waiter timeout %v below 30ms", lock.ErrInvalid, o.waiterTimeout)
	}
	return c
}

// ErrClosed is returned by calls after Close, and is the cause of the loss
// of the permits Close ended. It matches lock.ErrClosed.
var ErrClosed = fmt.Errorf("semaphore: client closed: %w", lock.ErrClosed)

// Err returns the error New found in its arguments, or nil.
func (c *Client) Err() error { return c.err }

// keys returns a semaphore's keys: holders, fence, limit, queue,
// deadlines, tokens. They share the hash tag {name}, hence one Cluster slot.
func (c *Client) keys(name string) []string {
	h := c.o.prefix + "{" + name + "}"
	return []string{h, h + ":fence", h + ":limit", h + ":q", h + ":qt", h + ":tok"}
}

// lateMax bounds the acquisitions in a row whose answer came after the
// TTL (a TTL shorter than the round trip never gets a permit).
const lateMax = 5

// releaseWindow is how long a release's marker is kept: a release sent
// again after a lost reply within it is answered as the first run was.
const releaseWindow = 10 * time.Second

// grantTTL is how long a release holds a permit for a queued waiter whose
// permit TTL is ttl (grant.lua): at most the waiter timeout, so that a
// waiter that vanished keeps a granted permit no longer than it would
// keep its place in the queue. Its watchdog renews it to ttl.
func (c *Client) grantTTL(ttl time.Duration) time.Duration { return min(ttl, c.o.waiterTimeout) }

func (c *Client) check(name string) error {
	switch {
	case c.err != nil:
		return c.err
	case name == "":
		return fmt.Errorf("%w: semaphore: empty name", lock.ErrInvalid)
	case strings.HasPrefix(name, "}"):
		return fmt.Errorf("%w: semaphore: name %q begins with '}'", lock.ErrInvalid, name)
	}
	return nil
}

// Obtain is Acquire, for lock.Locker (lock.Do).
func (c *Client) Obtain(ctx context.Context, name string, opts ...lock.Option) (lock.Lease, error) {
	return c.Acquire(ctx, name, opts...)
}

// TryObtain is TryAcquire, for lock.Locker.
func (c *Client) TryObtain(ctx context.Context, name string, opts ...lock.Option) (lock.Lease, error) {
	return c.TryAcquire(ctx, name, opts...)
}

// Acquire blocks until it holds a permit of the semaphore name, ctx ends
// (an error matching lock.ErrNotObtained and ctx's error) or the client is
// closed (ErrClosed). Waiters are served in arrival order: a release hands
// its permit to the first waiter in the same script and tells it so (a
// message on its client's one channel, with the permit's token),
// and the waiter holds it without another round trip; a waiter also calls
// again when a permit may expire, and then takes what was granted or
// freed.
// The option that applies is lock.WithTTL. A permit is not reentrant: an
// owner that holds one and acquires again takes a second.
func (c *Client) Acquire(ctx context.Context, name string, opts ...lock.Option) (*Permit, error) {
	return c.acquire(ctx, name, true, opts)
}

// TryAcquire makes one attempt: a permit, or ErrNoPermit.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...lock.Option) (*Permit, error) {
	return c.acquire(ctx, name, false, opts)
}

func (c *Client) acquire(ctx context.Context, name string, wait bool, opts []lock.Option) (*Permit, error) {
	begin := time.Now()
	p, err := c.acquirePermit(ctx, name, wait, opts)
	if c.o.metrics != nil {
		c.obs.Waited(name, time.Since(begin), err)
	}
	return p, redisver.Translate(err, redisver.Min, redisver.Need, lock.ErrServerVersion)
}

func (c *Client) acquirePermit(ctx context.Context, name string, wait bool, opts []lock.Option) (*Permit, error) {
	if err := c.check(name); err != nil {
		return nil, err
	}
	if err := c.ver.Check(ctx, c.rdb, redisver.Min, redisver.Need, lock.ErrServerVersion); err != nil {
		return nil, err
	}
	o := lockopt.Apply(opts)
	ttl := c.o.ttl
	if o.TTL != 0 {
		ttl = o.TTL
	}
	if ttl < watchdog.MinTTL {
		return nil, fmt.Errorf("%w: semaphore: TTL %v below %v", lock.ErrInvalid, ttl, watchdog.MinTTL)
	}
	id := c.id + ":" + strconv.FormatUint(c.seq.Add(1), 10)
	keys := c.keys(name)
	var woken chan int64
	if wait {
		if err := c.subscribe(ctx, keys[0]); err != nil {
			return nil, err
		}
		var err error
		if woken, err = c.register(id); err != nil {
			return nil, err
		}
		defer c.unregister(id)
	}
	argWait, argGrant := "0", ""
	grant := c.grantTTL(ttl)
	if wait {
		argWait, argGrant = "1", strconv.FormatInt(grant.Milliseconds(), 10)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	late := 0 // answers in this call that came after the TTL
	for {
		sent := c.o.now()
		res, err := c.run.Run(ctx, c.rdb, redisfn.SemAcquire, keys, id, ttl.Milliseconds(), c.o.permits, argWait,
			c.o.waiterTimeout.Milliseconds(), argGrant).Int64Slice()
		if err != nil {
			// The attempt may have run (its reply lost for good) and queued
			// the waiter, or taken a permit granted to it: leave gives
			// both back rather than let them wait for their deadlines.
			if wait {
				c.leave(context.WithoutCancel(ctx), keys, id, argGrant)
			}
			if ctx.Err() != nil {
				return nil, errors.Join(lock.ErrNotObtained, ctx.Err())
			}
			return nil, fmt.Errorf("semaphore: acquire %q: %w", name, err)
		}
		if len(res) >= 2 && res[0] == 1 {
			p := c.newPermit(name, keys, id, res[1], ttl, 0, o.MaxHold, sent)
			if p.wd.Held() {
				return p, nil
			}
			// The answer came after the permit's deadline (held up in the
			// network, the process stopped): Redis may have expired the
			// permit and given it to another holder meanwhile. It is never
			// returned: give it back (leave, which keeps no release
			// marker for the id the next attempt reuses) and try again.
			p.discard()
			c.leave(context.WithoutCancel(ctx), keys, id, argGrant)
			if late++; !wait || late == lateMax {
				return nil, fmt.Errorf("%w: %q: %d answers in a row came after the TTL %v had run out", ErrNoPermit, name, late, ttl)
			}
			continue
		}
		if !wait {
			return nil, ErrNoPermit
		}
		var fence int64 // a grant made after this attempt has a larger token
		if len(res) >= 4 {
			fence = res[3]
		}
		// Call in before the waiter is skipped, and before a permit
		// granted to it right after this attempt runs out: a waiter whose
		// message was lost would otherwise find the grant gone, and queue
		// again at the end.
		d := min(c.o.waiterTimeout/3, grant/2)
		if len(res) >= 2 && res[1] >= 0 {
			d = min(d, time.Duration(res[1])*time.Millisecond+time.Millisecond)
		}
		// Its connection dropped, or the semaphore moved, while it
		// waited: listen again within the wait's bound (notify.Relisten).
		_, d = c.listen.Relisten(ctx, keys[0], c.wake, d)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case token := <-woken:
			// A grant made after this attempt (the counter was fence then)
			// holds the permit for grant from the grant on, hence from
			// sent on at least. A late message, or one past that: the next
			// attempt finds out and takes what was granted.
			if token > fence && c.o.now().Before(sent.Add(grant)) {
				return c.newPermit(name, keys, id, token, ttl, grant, o.MaxHold, sent), nil
			}
		case <-timer.C:
		case <-c.quit:
			c.leave(context.WithoutCancel(ctx), keys, id, argGrant)
			return nil, ErrClosed
		case <-ctx.Done():
			c.leave(context.WithoutCancel(ctx), keys, id, argGrant)
			return nil, errors.Join(lock.ErrNotObtained, ctx.Err())
		}
	}
}

// leave takes a waiter out of the queue and gives back a permit granted
// to it (best effort: a waiter that does not call in is skipped after the
// waiter timeout anyway, and a grant expires after the grant TTL).
func (c *Client) leave(ctx context.Context, keys []string, id, grant string) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	entry := id
	if grant != "" {
		entry = id + "|" + grant
	}
	if err := c.run.Run(ctx, c.rdb, redisfn.SemLeave, []string{keys[0], keys[2], keys[3], keys[4], keys[5], keys[1]},
		id, c.o.permits, c.o.prefix+"wake:", entry).Err(); err != nil {
		c.obs.Debug("semaphore: leave failed", "waiter", id, "err", err)
	}
}

// SetPermits sets N, the number of permits of name, for every client. A
// larger N hands the new permits to waiters at once; a smaller one takes effect as permits
// come back (holders keep theirs).
func (c *Client) SetPermits(ctx context.Context, name string, n int) error {
	if err := c.check(name); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("%w: semaphore: %d permits", lock.ErrInvalid, n)
	}
	keys := c.keys(name)
	return c.run.Run(ctx, c.rdb, redisfn.SemSetLimit, []string{keys[0], keys[2], keys[3], keys[4], keys[5], keys[1]}, n, c.o.prefix+"wake:").Err()
}

// Usage returns name's N (SetPermits', or this client's default) and the
// number of permits held now (unexpired).
func (c *Client) Usage(ctx context.Context, name string) (permits, held int, err error) {
	if err := c.check(name); err != nil {
		return 0, 0, err
	}
	keys := c.keys(name)
	t, err := c.rdb.Time(ctx).Result()
	if err != nil {
		return 0, 0, err
	}
	p := c.rdb.Pipeline()
	lim := p.Get(ctx, keys[2])
	cnt := p.ZCount(ctx, keys[0], strconv.FormatInt(t.UnixMilli()+1, 10), "+inf")
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, err
	}
	permits = c.o.permits
	if v, err := lim.Int(); err == nil {
		permits = v
	}
	return permits, int(cnt.Val()), nil
}

// register records a waiter before its first attempt, so that no wake-up
// is missed.
func (c *Client) register(id string) (chan int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	ch := make(chan int64, 1)
	c.waiters[id] = ch
	return ch, nil
}

func (c *Client) unregister(id string) {
	c.mu.Lock()
	delete(c.waiters, id)
	c.mu.Unlock()
}

// subscribe makes sure the client's wake-up channel is subscribed on the
// server that holds key (the master of its slot on a Cluster) before the
// caller queues there, so that no wake-up is missed.
func (c *Client) subscribe(ctx context.Context, key string) error {
	switch _, err := c.listen.Listen(ctx, key, c.wake); {
	case err == nil:
		return nil
	case errors.Is(err, notify.ErrClosed):
		return ErrClosed
	case ctx.Err() != nil:
		return errors.Join(lock.ErrNotObtained, ctx.Err())
	default:
		return fmt.Errorf("semaphore: subscribe: %w", err)
	}
}

// deliver passes a message of the client's channel to the local waiter it
// names, if it still waits (notify.Deliver): "<id>" wakes it,
// "<id>|<token>" tells it a release granted it a permit with that token.
func (c *Client) deliver(msg string) { notify.Deliver(msg, &c.mu, c.waiterLocked) }

// waiterLocked returns the channel of the local waiter id, or nil. c.mu is
// held.
func (c *Client) waiterLocked(id string) chan int64 { return c.waiters[id] }

// Close stops the client: waiting calls return ErrClosed, held permits
// stop being renewed (their Lost channels close with cause ErrClosed; the
// permits expire after their TTL unless released), and its Pub/Sub
// connections are closed. It does not close the Redis client.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.quit)
	permits := make([]*Permit, 0, len(c.permits))
	for p := range c.permits {
		permits = append(permits, p)
	}
	c.mu.Unlock()
	c.listen.Close()
	for _, p := range permits {
		p.wd.Lose(ErrClosed)
	}
	return nil
}

// scripts returns the package's Lua scripts by file name.
func scripts() map[string]*redisfn.Script {
	return map[string]*redisfn.Script{
		"acquire.lua": redisfn.SemAcquire, "release.lua": redisfn.SemRelease, "renew.lua": redisfn.SemRenew,
		"leave.lua": redisfn.SemLeave, "setlimit.lua": redisfn.SemSetLimit,
	}
}
