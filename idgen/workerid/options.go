package workerid

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/sqldb"
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/zklock"
)

// Option configures a RedisLeaser, a ZKLeaser or a SQLLeaser.
type Option func(*options)

type options struct {
	max        int64
	ttl        time.Duration
	checkpoint time.Duration
	prefix     string // Redis key prefix
	root       string // ZooKeeper root path
	acl        []zk.ACL
	table      string          // SQL table
	dialect    sqllock.Dialect // SQL dialect; 0: detected from the driver
	host       string
	now        func() time.Time

	sessionTimeout time.Duration // ZooKeeper only

	metrics idgen.Metrics
	logger  *slog.Logger
}

func defaults() options {
	host, _ := os.Hostname()
	return options{
		max:        1023,
		ttl:        10 * time.Second,
		checkpoint: 3 * time.Second,
		prefix:     "coordkit:worker:",
		root:       "/coordkit/workers",
		acl:        zk.WorldACL(zk.PermAll),
		table:      DefaultTable,
		host:       host,
		now:        time.Now,

		sessionTimeout: zklock.DefaultSessionTimeout,
	}
}

func (o *options) validate() error {
	switch {
	case o.max < 0:
		return fmt.Errorf("%w: negative maximum worker ID %d", ErrInvalid, o.max)
	case o.max > 1<<22-1:
		return fmt.Errorf("%w: maximum worker ID %d above %d", ErrInvalid, o.max, 1<<22-1)
	case o.ttl < 300*time.Millisecond:
		return fmt.Errorf("%w: lease TTL %v below 300ms", ErrInvalid, o.ttl)
	case o.checkpoint <= 0:
		return fmt.Errorf("%w: checkpoint interval %v not positive", ErrInvalid, o.checkpoint)
	case o.prefix == "":
		return fmt.Errorf("%w: empty key prefix", ErrInvalid)
	case len(o.root) < 2 || o.root[0] != '/' || o.root[len(o.root)-1] == '/':
		return fmt.Errorf("%w: root path %q must start with / and not end with it", ErrInvalid, o.root)
	case !sqldb.ValidTable(o.table):
		return fmt.Errorf("%w: table name %q: want [a-z_][a-z0-9_]* (optionally schema.table), at most 63 bytes each", ErrInvalid, o.table)
	case o.dialect != 0 && o.dialect != sqllock.MySQL && o.dialect != sqllock.Postgres:
		return fmt.Errorf("%w: unknown SQL dialect %v", ErrInvalid, o.dialect)
	}
	return nil
}

// WithMetrics sets the hooks the leaser reports to: LeaseLost when a lease
// is lost, not released (idgen.Metrics, the hooks every coordkit ID
// generator takes). Default: none.
func WithMetrics(m idgen.Metrics) Option { return func(o *options) { o.metrics = m } }

// WithLogger sets where the leaser logs what happens in the background: a
// renewal (Redis) or heartbeat (ZooKeeper) that failed (Warn), a lease lost
// and its generators stopped (Error), with the service and worker ID.
// Default: slog.Default() at construction; a logger with
// slog.DiscardHandler logs nothing.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithMax sets the highest worker ID that may be leased; IDs are taken from
// [0, max], lowest free first. It must fit the Snowflake layout the lease is
// used with (NewSnowflake checks). Default: 1023 (10 worker bits).
func WithMax(max int64) Option { return func(o *options) { o.max = max } }

// WithTTL sets a Redis or SQL lease's time to live; the watchdog renews it
// every TTL/3 and the lease is lost (generators stop) once renewals have
// failed for 90 % of it. Default: 10 s. Ignored by ZooKeeper, where the
// session timeout plays this role.
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithCheckpoint sets how often a Snowflake made by Lease.NewSnowflake saves
// its high-water mark. Default: 3 s. A save may take up to the interval or
// 2 s, whichever is longer, before it is given up and retried at the next
// tick.
func WithCheckpoint(d time.Duration) Option { return func(o *options) { o.checkpoint = d } }

// WithPrefix sets the Redis key prefix. Default: "coordkit:worker:".
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithRoot sets the ZooKeeper root path. Default: "/coordkit/workers".
func WithRoot(path string) Option { return func(o *options) { o.root = path } }

// WithACL sets the ACL of the znodes a ZKLeaser creates. Default:
// zk.WorldACL(zk.PermAll).
func WithACL(acl []zk.ACL) Option { return func(o *options) { o.acl = acl } }

// WithTable sets a SQLLeaser's table. It must match [a-z_][a-z0-9_]*,
// optionally qualified by a schema ("ids.worker_node"). Default:
// DefaultTable ("coordkit_worker_node").
func WithTable(name string) Option { return func(o *options) { o.table = name } }

// WithDialect sets the SQL a SQLLeaser speaks: sqllock.MySQL (MySQL 8,
// MariaDB 10.5 or later) or sqllock.Postgres (PostgreSQL 12 or later).
// Default: detected from the pool's driver (github.com/go-sql-driver/mysql;
// github.com/jackc/pgx's stdlib or github.com/lib/pq); a pool with another
// driver (a wrapper, for instance) needs this option.
func WithDialect(d sqllock.Dialect) Option { return func(o *options) { o.dialect = d } }

// WithHost sets the host name recorded with a lease. Default: os.Hostname().
func WithHost(h string) Option { return func(o *options) { o.host = h } }

// WithClock sets the clock used for lease records and high-water marks.
// Default: time.Now. It is the hook for tests; production code leaves it
// unset.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }
