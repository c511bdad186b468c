package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coordkit/coordkit/internal/lockopt"
	"github.com/coordkit/coordkit/internal/observe"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/watchdog"
)

var (
	_ lock.Locker      = (*Client)(nil)
	_ lock.Lease       = (*Lease)(nil)
	_ lock.LeaseStatus = (*Lease)(nil)
)

// Timeouts of the clean-ups that run after the caller's ctx ended.
const (
	cleanupTimeout = 5 * time.Second
	closeTimeout   = 2 * time.Second // Close's freeing of lease-table rows, in all
)

// maxRetries bounds the attempts of an acquisition that fail with a
// deadlock or a lock wait timeout of the database (Retryable).
const maxRetries = 5

type kind int

const (
	kindSession kind = iota // GET_LOCK / advisory lock on a pinned connection
	kindLease               // a row per lock in a table
)

// Client obtains locks on keys from one database (see the package
// documentation): a session lock (NewMySQL, NewPostgres) or the lease
// table (NewLeaseTable). It is safe for concurrent use. The zero value is
// not usable.
type Client struct {
	db    *sql.DB
	d     Dialect
	kind  kind
	o     options
	obs   observe.Lock // logger and metrics hooks
	table string
	ses   sessionSQL
	lsq   leaseSQL

	schemaOK atomic.Bool // the table was found right; checked until it is

	wg sync.WaitGroup // background statements and discards; Add only under mu, while not closed

	mu      sync.Mutex // protects the fields below and every hold's mutable fields
	closed  bool
	live    map[*hold]struct{}        // held: not released nor lost
	owned   map[holdKey]*hold         // the live holds of ctx owners, for re-entry
	pending map[holdKey]chan struct{} // owners' acquisitions under way; closed when done
	lines   map[string]*line          // local lines, by key
}

// holdKey identifies what an owner holds: re-entry is by owner and key.
type holdKey struct{ key, owner string }

// line is a key's local line: the goroutines of one Client that want the
// key take turns in process (the channel holds the place of the one at the
// front), so that only one of them talks to the database at a time.
type line struct {
	place chan struct{} // capacity 1: full while someone is at the front
	users int           // protected by Client.mu: goroutines in or waiting for the line
}

// NewMySQL returns a Client of MySQL or MariaDB session locks (GET_LOCK on
// a connection pinned for the hold) over db, with fencing counters in the
// table WithTable names (default DefaultFenceTable; see CreateTable). db
// must be a MySQL-protocol pool (github.com/go-sql-driver/mysql, for
// instance); the Client does not close it. NewMySQL does no I/O; it
// returns an error wrapping ErrInvalid for a nil db or a bad option. The
// first Obtain checks that db's sessions have autocommit on (a DSN with
// autocommit=0 is refused with ErrInvalid).
func NewMySQL(db *sql.DB, opts ...Option) (*Client, error) {
	return newClient(db, MySQL, kindSession, opts)
}

// NewPostgres returns a Client of PostgreSQL session locks (advisory locks
// on a connection pinned for the hold) over db, with fencing counters in
// the table WithTable names (default DefaultFenceTable). Session locks do
// not work through a pooler in transaction mode (PgBouncer): use
// NewLeaseTable there. NewPostgres does no I/O; it returns an error
// wrapping ErrInvalid for a nil db or a bad option.
func NewPostgres(db *sql.DB, opts ...Option) (*Client, error) {
	return newClient(db, Postgres, kindSession, opts)
}

// NewLeaseTable returns a Client of the lease-table lock: one row per lock
// in the table WithTable names (default DefaultLeaseTable), taken and
// renewed by single conditional statements whose expiry follows the
// database's clock. It holds no connection between statements, so it works
// through connection poolers. NewLeaseTable does no I/O; it returns an
// error wrapping ErrInvalid for a nil db, an unknown d or a bad option.
func NewLeaseTable(db *sql.DB, d Dialect, opts ...Option) (*Client, error) {
	if !d.Valid() {
		return nil, invalid("unknown dialect %v", d)
	}
	return newClient(db, d, kindLease, opts)
}

func newClient(db *sql.DB, d Dialect, k kind, opts []Option) (*Client, error) {
	if db == nil {
		return nil, invalid("nil *sql.DB")
	}
	o := defaultOptions()
	o.table = DefaultFenceTable
	if k == kindLease {
		o.table = DefaultLeaseTable
	}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	c := &Client{
		db: db, d: d, kind: k, o: o, table: o.table,
		live:    map[*hold]struct{}{},
		owned:   map[holdKey]*hold{},
		pending: map[holdKey]chan struct{}{},
		lines:   map[string]*line{},
	}
	component := "coordkit/sqllock"
	c.obs = observe.NewLock(component, o.logger, o.metrics, o.metricsKey, ErrClosed)
	if k == kindLease {
		c.lsq = newLeaseSQL(d, o.table)
	} else {
		c.ses = newSessionSQL(d, o.table)
	}
	return c, nil
}

// Dialect returns the SQL dialect the Client speaks.
func (c *Client) Dialect() Dialect { return c.d }

// Table returns the Client's table: fencing counters or lease rows.
func (c *Client) Table() string { return c.table }

// CreateTable creates the Client's table if it does not exist (CREATE
// TABLE IF NOT EXISTS, with the schema of the package documentation). An
// existing table is left as it is: a later Obtain checks its columns.
func (c *Client) CreateTable(ctx context.Context) error {
	if _, err := c.db.ExecContext(ctx, ddl(c.d, c.table, c.kind == kindLease)); err != nil {
		return fmt.Errorf("sqllock: create table %s: %w", c.table, err)
	}
	return nil
}

// ensureSchema checks the table, and on MySQL that the pool's sessions
// commit every statement, once (until they are found right).
func (c *Client) ensureSchema(ctx context.Context) error {
	if c.schemaOK.Load() {
		return nil
	}
	if c.d == MySQL {
		if err := checkAutocommit(ctx, c.db); err != nil {
			return err
		}
	}
	if err := checkSchema(ctx, c.db, c.d, c.table, c.kind == kindLease); err != nil {
		return err
	}
	c.schemaOK.Store(true)
	return nil
}

// Obtain blocks until key is held by the caller, ctx ends
// (errors.Join(lock.ErrNotObtained, ctx.Err())), the Client is closed
// (ErrClosed), the table is wrong (ErrSchema), a MySQL session has
// autocommit off (an error wrapping ErrInvalid; both are checked by the
// Client's first Obtain or TryObtain) or the database fails. If
// ctx's owner (lock.WithOwner) already holds key on this Client, Obtain
// re-enters: the lease has the same token. Goroutines of one Client that
// want the same key wait in a local line; the one at the front waits in the
// database (session locks: in GET_LOCK or pg_advisory_lock, a slice at a
// time; lease table: polling, see WithPoll). lock.WithTTL sets the lease's
// TTL, lock.WithMaxHold its longest hold, lock.WithRetry fixed delays
// between attempts instead of waiting in the database.
func (c *Client) Obtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return c.obtain(ctx, key, opts, true)
}

// TryObtain makes one attempt and returns lock.ErrNotObtained if another
// owner holds key (or, on this Client, is in line for it).
func (c *Client) TryObtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return c.obtain(ctx, key, opts, false)
}

func (c *Client) obtain(ctx context.Context, key string, opts []lock.Option, block bool) (lock.Lease, error) {
	if c.o.metrics == nil {
		return c.obtainLease(ctx, key, opts, block)
	}
	begin := c.o.now()
	l, err := c.obtainLease(ctx, key, opts, block)
	c.obs.Waited(key, c.o.now().Sub(begin), err)
	return l, err
}

// request is one acquisition's resolved arguments.
type request struct {
	key, owner string
	name       string // prefix + key: the row's name
	id         any    // the session lock's id: MySQL lock name or PostgreSQL key
	o          lockopt.Obtain
	block      bool
}

// checkKey returns an error wrapping ErrInvalid if key cannot name a lock:
// empty, longer than MaxKeyLen bytes, not valid UTF-8, or holding a NUL
// byte (PostgreSQL's text refuses both).
func checkKey(key string) error {
	switch {
	case key == "":
		return invalid("empty key")
	case len(key) > MaxKeyLen:
		return invalid("key of %d bytes (at most %d)", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return invalid("key %q is not valid UTF-8", key)
	case containsNUL(key):
		return invalid("key %q holds a NUL byte", key)
	}
	return nil
}

func checkOwner(owner string) error {
	switch {
	case len(owner) > MaxOwnerLen:
		return invalid("owner of %d bytes (at most %d)", len(owner), MaxOwnerLen)
	case !utf8.ValidString(owner) || containsNUL(owner):
		return invalid("owner %q is not valid UTF-8 without NUL bytes", owner)
	}
	return nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// resolve checks the call's arguments and applies the defaults.
func (c *Client) resolve(key string, opts []lock.Option) (lockopt.Obtain, error) {
	o := lockopt.Apply(opts)
	if c == nil {
		return o, invalid("nil *sqllock.Client")
	}
	if err := checkKey(key); err != nil {
		return o, err
	}
	if o.TTL == 0 {
		o.TTL = c.o.ttl
	}
	// MySQL's DATETIME(6) and PostgreSQL's timestamptz count microseconds.
	o.TTL = o.TTL.Truncate(time.Microsecond)
	if o.TTL < MinTTL {
		return o, invalid("TTL %v (minimum %v)", o.TTL, MinTTL)
	}
	if o.MaxHold < 0 {
		return o, invalid("negative MaxHold %v", o.MaxHold)
	}
	return o, nil
}

func (c *Client) obtainLease(ctx context.Context, key string, opts []lock.Option, block bool) (lock.Lease, error) {
	o, err := c.resolve(key, opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, notObtainedCtx(err)
	}
	owner, hasOwner := lock.OwnerFrom(ctx)
	if !hasOwner {
		owner = lock.NewOwner()
	} else if err := checkOwner(owner); err != nil {
		return nil, err
	}
	hk := holdKey{key: key, owner: owner}
	for hasOwner {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if h := c.owned[hk]; h != nil {
			h.levels++ // re-entry: the hold is live (owned holds are)
			c.mu.Unlock()
			return &Lease{h: h}, nil
		}
		if ch := c.pending[hk]; ch != nil {
			c.mu.Unlock()
			select {
			case <-ch:
				continue // look again: re-enter what the other call obtained
			case <-ctx.Done():
				return nil, notObtainedCtx(ctx.Err())
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
	if err := c.ensureSchema(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, notObtainedCtx(ctx.Err())
		}
		return nil, err
	}
	ln, err := c.enterLine(ctx, key, block)
	if err != nil {
		return nil, err
	}
	r := &request{key: key, owner: owner, name: c.o.prefix + key, o: o, block: block}
	var h *hold
	if c.kind == kindSession {
		if c.d == MySQL {
			r.id = mysqlLockName(c.o.prefix, key)
		} else {
			r.id = pgLockKey(r.name)
		}
		h, err = c.sessionAcquire(ctx, r)
	} else {
		h, err = c.leaseAcquire(ctx, r)
	}
	if err != nil {
		c.leaveLine(key, ln)
		return nil, err
	}
	h.line, h.hk, h.owned = ln, hk, hasOwner
	if err := c.register(h, o); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		c.releaseHeld(cctx, h)
		cancel()
		c.leaveLine(key, ln)
		return nil, err
	}
	return &Lease{h: h}, nil
}

// register makes h live (and, for an owner, enterable) and starts its
// watchdog, unless the Client is closed.
func (c *Client) register(h *hold, o lockopt.Obtain) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	h.levels, h.ttl = 1, o.TTL
	c.live[h] = struct{}{}
	if h.owned {
		c.owned[h.hk] = h
	}
	renew := c.leaseRenewal(h)
	if c.kind == kindSession {
		renew = c.sessionCheck(h)
	}
	// Started under c.mu, so that Close sees every live hold with its
	// watchdog; the watchdog calls h (Observer) only from its own
	// goroutine, which waits for c.mu.
	wd, err := watchdog.Start(watchdog.Config{
		TTL:         o.TTL,
		MaxHold:     o.MaxHold,
		LastRenewed: h.since,
		Now:         c.o.now,
		Renew:       renew,
		Observer:    h,
	})
	if err != nil { // o was validated against MinTTL: a bug
		panic(err)
	}
	h.wd = wd
	return nil
}

// releaseHeld frees a lock that was obtained but is not handed out (the
// Client was closed meanwhile): cleanly, since Obtain had waited out any
// previous holder's expiry before it got here.
func (c *Client) releaseHeld(ctx context.Context, h *hold) {
	if c.kind == kindSession {
		c.sessionRelease(ctx, h, h.conn) // returns or closes the connection
		return
	}
	c.exec(ctx, c.db, c.lsq.release, h.name, h.token)
}

// enterLine takes key's place at the front of the Client's local line,
// waiting (block) until ctx ends, or not at all (ErrNotObtained).
func (c *Client) enterLine(ctx context.Context, key string, block bool) (*line, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	ln := c.lines[key]
	if ln == nil {
		ln = &line{place: make(chan struct{}, 1)}
		c.lines[key] = ln
	}
	ln.users++
	c.mu.Unlock()
	if block {
		select {
		case ln.place <- struct{}{}:
			return ln, nil
		case <-ctx.Done():
			c.dropLine(key, ln)
			return nil, notObtainedCtx(ctx.Err())
		}
	}
	select {
	case ln.place <- struct{}{}:
		return ln, nil
	default:
		c.dropLine(key, ln)
		return nil, lock.ErrNotObtained
	}
}

// leaveLine gives up the front of key's line.
func (c *Client) leaveLine(key string, ln *line) {
	<-ln.place
	c.dropLine(key, ln)
}

func (c *Client) dropLine(key string, ln *line) {
	c.mu.Lock()
	if ln.users--; ln.users == 0 && c.lines[key] == ln {
		delete(c.lines, key)
	}
	c.mu.Unlock()
}

// track counts one more background goroutine, unless the Client is closed.
func (c *Client) track() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

// Holder returns the owner and fencing token of key's current holder, or
// "" and 0 if nobody holds it. For a session lock the holder is the
// connection that holds the lock in the database, if it is one of a
// coordkit Client (its fencing row names its connection). It returns an
// error wrapping ErrInvalid for a bad key.
func (c *Client) Holder(ctx context.Context, key string) (owner string, token int64, err error) {
	if err := checkKey(key); err != nil {
		return "", 0, err
	}
	name := c.o.prefix + key
	var row *sql.Row
	switch {
	case c.kind == kindLease:
		row = c.queryRow(ctx, c.db, c.lsq.holder, name)
	case c.d == MySQL:
		row = c.queryRow(ctx, c.db, c.ses.holder, name, mysqlLockName(c.o.prefix, key))
	default:
		row = c.queryRow(ctx, c.db, c.ses.holder, pgLockKey(name), name)
	}
	switch err := row.Scan(&owner, &token); {
	case errors.Is(err, sql.ErrNoRows):
		return "", 0, nil
	case err != nil:
		return "", 0, fmt.Errorf("sqllock: holder of %q: %w", key, err)
	}
	return owner, token, nil
}

// Close reports every lease of the Client lost (their Lost channels close,
// with ErrClosed), then releases their locks, within a few seconds in all
// (a session lock whose release fails has its connection closed, which
// frees it; a lease-table row expires after its TTL), and waits for the
// Client's background statements. Obtain and TryObtain
// return ErrClosed afterwards. Close does not close the *sql.DB. It is
// idempotent and returns nil.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.wg.Wait()
		return nil
	}
	c.closed = true
	holds := make([]*hold, 0, len(c.live))
	for h := range c.live {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	for _, h := range holds {
		h.wd.Lose(ErrClosed) // waits for its renewal in flight
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	// The leases are lost (their holders were told): their locks can be
	// released cleanly, so that the next owner need not wait for a
	// session lock's row to expire.
	for _, h := range holds {
		c.mu.Lock()
		conn := h.conn
		ending := h.ending
		if !ending {
			h.conn = nil
		}
		c.mu.Unlock()
		switch {
		case ending: // its Release frees it
		case conn != nil:
			if err := c.sessionRelease(ctx, h, conn); err != nil {
				c.obs.Debug("releasing a session lock at Close failed; its connection was closed",
					"key", h.key, "token", h.token, "err", err)
			}
		case c.kind == kindLease:
			if _, err := c.exec(ctx, c.db, c.lsq.release, h.name, h.token); err != nil {
				c.obs.Debug("freeing a lease-table row at Close failed; it expires after its TTL",
					"key", h.key, "token", h.token, "err", err)
			}
		}
	}
	c.wg.Wait()
	return nil
}

// sleep waits d on t (reused by one waiting loop) or until ctx ends; it
// reports whether the full delay passed.
func sleep(ctx context.Context, t **time.Timer, d time.Duration) bool {
	if *t == nil {
		*t = time.NewTimer(d)
	} else {
		(*t).Reset(d)
	}
	select {
	case <-(*t).C:
		return true
	case <-ctx.Done():
		(*t).Stop()
		return false
	}
}
