package etcdworker

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/coordkit/coordkit/idgen/workerid"
)

// DefaultPrefix is the etcd key prefix of every service's keys unless
// WithPrefix says otherwise.
const DefaultPrefix = "/coordkit/workers"

// MinTTL is the shortest lease TTL WithTTL accepts: etcd counts a lease's
// TTL in whole seconds (and a server grants no lease shorter than 1.5 of
// its election timeouts; the Lease then runs on the TTL granted).
const MinTTL = time.Second

// Option configures a Leaser.
type Option func(*options)

type options struct {
	max        int64
	ttl        time.Duration
	checkpoint time.Duration
	prefix     string
	host       string
	now        func() time.Time
	logger     *slog.Logger
}

func defaults() options {
	host, _ := os.Hostname()
	return options{
		max:        1023,
		ttl:        10 * time.Second,
		checkpoint: 3 * time.Second,
		prefix:     DefaultPrefix,
		host:       host,
		now:        time.Now,
	}
}

func (o *options) validate() error {
	switch {
	case o.max < 0:
		return fmt.Errorf("%w: negative maximum worker ID %d", workerid.ErrInvalid, o.max)
	case o.max > 1<<22-1:
		return fmt.Errorf("%w: maximum worker ID %d above %d", workerid.ErrInvalid, o.max, 1<<22-1)
	case o.ttl < MinTTL:
		return fmt.Errorf("%w: lease TTL %v below etcd's minimum of 1s", workerid.ErrInvalid, o.ttl)
	case o.checkpoint < time.Millisecond:
		return fmt.Errorf("%w: checkpoint interval %v below 1ms", workerid.ErrInvalid, o.checkpoint)
	case o.prefix == "" || strings.HasSuffix(o.prefix, "/"):
		return fmt.Errorf("%w: key prefix %q empty or ending with /", workerid.ErrInvalid, o.prefix)
	case o.now == nil:
		return fmt.Errorf("%w: nil clock", workerid.ErrInvalid)
	}
	return nil
}

// WithMax sets the highest worker ID that may be leased; IDs are taken from
// [0, max], lowest free first. It must fit the Snowflake layout the lease is
// used with (NewSnowflake checks). Default: 1023 (10 worker bits).
func WithMax(max int64) Option { return func(o *options) { o.max = max } }

// WithTTL sets the TTL T of each Lease's etcd lease, rounded up to whole
// seconds; the Lease sends a keep-alive every T/6 and is lost (its
// generators stop) once 2T/3 has passed since the send of the last one
// that succeeded, before the server can expire the lease. A T under
// MinTTL makes New fail. Default: 10 s.
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithCheckpoint sets how often a Snowflake made by Lease.NewSnowflake
// saves its high-water mark; at least 1 ms. Default: 3 s.
func WithCheckpoint(d time.Duration) Option { return func(o *options) { o.checkpoint = d } }

// WithPrefix sets the etcd key prefix; it must not be empty or end with
// '/'. Default: DefaultPrefix, "/coordkit/workers".
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithHost sets the host name recorded with a lease. Default: os.Hostname().
func WithHost(h string) Option { return func(o *options) { o.host = h } }

// WithClock sets the clock of the lease records' Since. Default: time.Now.
// It is the hook for tests; production code leaves it unset.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithLogger sets where the Leaser's leases log what happens in the
// background: a renewal that failed (Warn), a lease lost and its
// generators stopped (Error). Default: slog.Default() at New; a logger
// with slog.DiscardHandler logs nothing.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }
