package etcdlock

import (
	"log/slog"
	"time"

	"github.com/coordkit/coordkit/lock"
)

// DefaultPrefix is the etcd key prefix under which every lock's keys live
// unless WithPrefix says otherwise.
const DefaultPrefix = "/coordkit/locks"

// DefaultTTL is the TTL of the Client's etcd lease unless WithTTL says
// otherwise.
const DefaultTTL = 10 * time.Second

// MinTTL is the shortest lease TTL WithTTL accepts: etcd counts a lease's
// TTL in whole seconds. A server also grants no lease shorter than 1.5 of
// its election timeouts (2 s with etcd's default of 1 s): the Client then
// runs on the TTL the server granted.
const MinTTL = time.Second

// MaxKeyLen is the longest key, in bytes, that Obtain accepts.
const MaxKeyLen = 1024

// Option configures a Client.
type Option func(*options)

type options struct {
	prefix     string
	ttl        time.Duration
	logger     *slog.Logger
	metrics    lock.Metrics
	metricsKey func(key string) string
}

func defaultOptions() options {
	return options{prefix: DefaultPrefix, ttl: DefaultTTL}
}

// WithPrefix sets the etcd key prefix of every lock: key k's holds are
// the keys under "<prefix>/<k>/". Every Client locking the same keys needs
// the same prefix. Default: DefaultPrefix, "/coordkit/locks".
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithTTL sets the TTL T of the Client's etcd lease, rounded up to whole
// seconds. The Client sends a keep-alive every T/6 and reports its leases
// lost once 2T/3 has passed since the send of the last keep-alive the
// server answered: before the server can expire the lease. A larger T
// rides out longer outages; a smaller one hands a dead holder's locks to
// the next waiter sooner. A T under MinTTL makes New return ErrInvalidTTL.
// Default: DefaultTTL, 10 s.
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithLogger sets where the Client logs what happens in the background: a
// keep-alive that failed (Info), the lease lost (Warn), a key deleted in the
// background after a failed release (Debug). Nothing is logged on the hot
// path. Default: slog.Default() at New; a logger with slog.DiscardHandler
// logs nothing.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithMetrics sets the hooks that observe the Client's locks (lock.Metrics;
// contrib/coordprom and contrib/coordotel implement it), as on every
// coordkit lock: Waited for each Obtain or TryObtain (both sides of the
// read-write lock too), Held when a hold ends (its outermost Release, or
// its loss), Renewed for each hold after each keep-alive of the Client's
// lease (one keep-alive renews them all), Lost for each hold the lease took
// with it (reported by the lease's keeper goroutine, after Lost is
// closed), Released for each Release. Hooks run on the caller's or the
// keeper's goroutine and must not block. Default: none.
func WithMetrics(m lock.Metrics) Option { return func(o *options) { o.metrics = m } }

// WithMetricsKey sets the label the metrics hooks get for a lock's key
// (keys are unbounded: a user ID in a key would make a label per user).
// Default: the empty label.
func WithMetricsKey(fn func(key string) string) Option {
	return func(o *options) { o.metricsKey = fn }
}
