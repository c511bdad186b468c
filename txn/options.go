package txn

import (
	"log/slog"
	"time"

	"github.com/coordkit/coordkit/internal/sqldb"
)

// Defaults and limits.
const (
	// DefaultLeaseTTL is how long a driver owns a transaction without
	// renewing: every write to the log renews it, and so does a renewal
	// every TTL/3 while a branch func runs. Recover takes over a
	// transaction whose lease has expired.
	DefaultLeaseTTL = 30 * time.Second
	// MinLeaseTTL is the shortest lease accepted.
	MinLeaseTTL = 100 * time.Millisecond
	// DefaultTablePrefix starts the names of the log's tables:
	// coordkit_txn_global and coordkit_txn_branch.
	DefaultTablePrefix = "coordkit_txn_"
	// DefaultBarrierTable is the barrier's table in each resource database.
	DefaultBarrierTable = "coordkit_txn_barrier"
	// MaxPayload is the longest payload, in bytes, Run accepts (it is
	// stored in the log, a BLOB on MySQL).
	MaxPayload = 65535
	// MaxNameLen is the longest name of a transaction type.
	MaxNameLen = 255
	// maxReason bounds the reason stored in the log.
	maxReason = 4000
)

// Option configures a Manager.
type Option func(*options)

type options struct {
	prefix string
	ttl    time.Duration
	retry  func(attempt int) time.Duration
	logger *slog.Logger
	now    func() time.Time
}

func defaultOptions() options {
	return options{
		prefix: DefaultTablePrefix,
		ttl:    DefaultLeaseTTL,
		retry:  DefaultRetry,
		logger: slog.New(slog.DiscardHandler),
		now:    time.Now,
	}
}

func (o *options) validate() error {
	if !sqldb.ValidTable(o.prefix + "global") {
		return invalid("table prefix %q: want [a-z_][a-z0-9_]* (or schema.prefix)", o.prefix)
	}
	if o.ttl < MinLeaseTTL {
		return invalid("lease TTL %v is below MinLeaseTTL (%v)", o.ttl, MinLeaseTTL)
	}
	if o.retry == nil {
		return invalid("nil retry func")
	}
	if o.now == nil {
		return invalid("nil clock")
	}
	return nil
}

// DefaultRetry is the backoff between two calls of a failing branch func:
// 20 ms doubled at each attempt, at most 2 s.
func DefaultRetry(attempt int) time.Duration {
	d := 20 * time.Millisecond
	for i := 0; i < attempt && d < 2*time.Second; i++ {
		d *= 2
	}
	return min(d, 2*time.Second)
}

// WithTablePrefix sets the prefix of the log's table names (the tables are
// prefix+"global" and prefix+"branch"). Default: DefaultTablePrefix.
func WithTablePrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithLeaseTTL sets how long a driver owns a transaction without renewing
// (at least MinLeaseTTL). Default: DefaultLeaseTTL.
func WithLeaseTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithRetry sets the delay before the next call of a branch func that
// failed attempt+1 times. Default: DefaultRetry.
func WithRetry(f func(attempt int) time.Duration) Option { return func(o *options) { o.retry = f } }

// WithLogger sets where background events go (a lost lease renewal, a
// transaction Recover could not drive). Default: nil, discarded.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		o.logger = l
	}
}

// WithClock sets the clock of the local deadline checks (tests). Default:
// time.Now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }
