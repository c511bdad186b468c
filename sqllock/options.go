package sqllock

import (
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/coordkit/coordkit/internal/sqldb"
	"github.com/coordkit/coordkit/lock"
)

// Defaults and limits.
const (
	// DefaultTTL is the lease TTL when neither WithTTL nor WithDefaultTTL
	// says otherwise: the lease-table row's expiry, renewed every TTL/3,
	// and for session locks the bound on noticing a broken session (the
	// pinned connection is checked every TTL/3).
	DefaultTTL = 30 * time.Second
	// MinTTL is the shortest TTL accepted.
	MinTTL = 30 * time.Millisecond
	// DefaultPrefix starts every lock name (MySQL lock names, the input of
	// PostgreSQL's advisory keys, the name column of the tables).
	DefaultPrefix = "coordkit:"
	// DefaultFenceTable holds the fencing counters of the session locks
	// (NewMySQL, NewPostgres).
	DefaultFenceTable = "coordkit_fences"
	// DefaultLeaseTable holds the rows of the lease-table lock
	// (NewLeaseTable).
	DefaultLeaseTable = "coordkit_locks"
	// DefaultWaitSlice is how long one statement of a session lock waits in
	// the server (GET_LOCK's timeout, PostgreSQL's lock_timeout) before the
	// Client looks at ctx again.
	DefaultWaitSlice = time.Second
	// MaxKeyLen is the longest key, in bytes, that Obtain accepts.
	MaxKeyLen = 255
	// MaxOwnerLen is the longest owner (lock.WithOwner), in bytes.
	MaxOwnerLen = 255
	// MaxPrefixLen is the longest prefix (WithPrefix), in bytes.
	MaxPrefixLen = 32
)

// Option configures a Client.
type Option func(*options)

type options struct {
	ttl        time.Duration
	prefix     string
	table      string // "" until set: the kind's default
	slice      time.Duration
	poll       func(attempt int) time.Duration
	metrics    lock.Metrics
	metricsKey func(key string) string
	logger     *slog.Logger
	now        func() time.Time
}

func defaultOptions() options {
	return options{
		ttl:    DefaultTTL,
		prefix: DefaultPrefix,
		slice:  DefaultWaitSlice,
		poll:   defaultPoll,
		now:    time.Now,
	}
}

func (o *options) validate() error {
	switch {
	case o.ttl < MinTTL:
		return invalid("default TTL %v below the minimum %v", o.ttl, MinTTL)
	case o.prefix == "" || len(o.prefix) > MaxPrefixLen || !plainName(o.prefix):
		return invalid("prefix %q: want 1 to %d bytes of a-z, 0-9 and _.:/-", o.prefix, MaxPrefixLen)
	case !validTable(o.table):
		return invalid("table name %q: want [a-z_][a-z0-9_]* (optionally schema.table), at most 63 bytes each", o.table)
	case o.slice < 10*time.Millisecond:
		return invalid("wait slice %v below 10ms", o.slice)
	case o.poll == nil:
		return invalid("nil poll function")
	}
	return nil
}

// WithDefaultTTL sets the TTL of leases obtained without lock.WithTTL.
// Default: DefaultTTL (30 s).
func WithDefaultTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithPrefix sets the prefix of every lock name. Clients that lock the same
// keys must agree on it. Default: DefaultPrefix ("coordkit:"). It must be
// 1 to MaxPrefixLen bytes of a-z, 0-9 and the characters _.:/- (MySQL lock
// names are server-wide, across databases: the prefix is their namespace).
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithTable sets the Client's table: the fencing counters of a session lock
// (default DefaultFenceTable, "coordkit_fences"), the lock rows of a lease
// table (default DefaultLeaseTable, "coordkit_locks"). It must match
// [a-z_][a-z0-9_]*, optionally qualified by a schema ("locks.coordkit").
func WithTable(name string) Option { return func(o *options) { o.table = name } }

// WithWaitSlice sets how long one statement of a session lock waits in the
// server for the lock (GET_LOCK's timeout, rounded up to whole seconds on
// MySQL and MariaDB; PostgreSQL's lock_timeout) before the next one. A
// waiter whose ctx ends returns at once; its statement runs out its slice
// in the background, holding a pooled connection until then. Default:
// DefaultWaitSlice (1 s). Not used by the lease table.
func WithWaitSlice(d time.Duration) Option { return func(o *options) { o.slice = d } }

// WithPoll sets the delay between a lease-table waiter's attempts: attempt
// n (from 1) waits poll(n), and never past the holder's expiry when the
// database reports it (PostgreSQL). Default: exponential from 5 ms,
// doubling to at most 250 ms, with jitter (a uniformly drawn delay between
// half and all of it), so that waiters neither hammer the database nor wake
// together. lock.WithRetry overrides it for one call, for the session locks
// too.
func WithPoll(poll func(attempt int) time.Duration) Option {
	return func(o *options) { o.poll = poll }
}

// defaultPoll is the lease table's default delay between attempts (see
// WithPoll).
func defaultPoll(attempt int) time.Duration {
	d := 250 * time.Millisecond
	if attempt < 6 {
		d = 5 * time.Millisecond << max(attempt-1, 0)
	}
	return d/2 + rand.N(d/2+1)
}

// WithMetrics sets the hooks that observe waits, holds, renewals (the
// checks of a session lock's connection), losses and releases:
// lock.Metrics, the same hooks every coordkit lock takes. Default: none.
func WithMetrics(m lock.Metrics) Option { return func(o *options) { o.metrics = m } }

// WithMetricsKey sets the label the metrics hooks get for a lock's key.
// Default: none, the hooks get "" (see lock.Metrics).
func WithMetricsKey(fn func(key string) string) Option {
	return func(o *options) { o.metricsKey = fn }
}

// WithLogger sets where the Client logs what happens in the background: a
// renewal or check that failed, a lease lost (Warn; Info when Close ended
// it), a clean-up that failed (Debug). Nothing is logged on the hot path.
// Default: slog.Default(); a logger with slog.DiscardHandler logs nothing.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithClock sets the clock that times leases (the watchdog's deadlines)
// and metrics. Default: time.Now. Expiry in the database follows the
// database's clock, never this one. It is the hook for tests; production
// code leaves it unset.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// plainName reports whether s is made of a-z, 0-9 and _.:/- only: names
// that MySQL and MariaDB compare the same way (GET_LOCK names are compared
// without regard to case on some versions).
func plainName(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || strings.IndexByte("_.:/-", b) >= 0) {
			return false
		}
	}
	return true
}

// validTable reports whether name is [a-z_][a-z0-9_]* or schema.table of
// two such parts, each at most 63 bytes. Names are put in SQL unquoted.
func validTable(name string) bool { return sqldb.ValidTable(name) }
