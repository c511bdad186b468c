package zklock

import (
	"log/slog"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/lock"
)

// DefaultRoot is the parent of every key's znode unless WithRoot says otherwise.
const DefaultRoot = "/coordkit/locks"

// DefaultSessionTimeout is the session timeout a Client (and workerid's
// ZooKeeper leaser) assumes unless WithSessionTimeout says otherwise: 4 s,
// the lowest timeout a server with the default tickTime of 2 s negotiates,
// so that the loss bound holds for any session such a server grants.
const DefaultSessionTimeout = 4 * time.Second

// Option configures a Client.
type Option func(*options)

type options struct {
	root           string
	acl            []zk.ACL
	sessionTimeout time.Duration
	metrics        lock.Metrics
	metricsKey     func(key string) string
	logger         *slog.Logger
}

func defaultOptions() options {
	return options{
		root:           DefaultRoot,
		acl:            zk.WorldACL(zk.PermAll),
		sessionTimeout: DefaultSessionTimeout,
	}
}

// WithMetrics sets the hooks that observe waits, holds, heartbeats (as
// renewals: each heartbeat of the session is a renewal of every lease
// held, reported with WithSessionTimeout only), losses and releases:
// lock.Metrics, the same hooks every coordkit lock takes. Default: none.
func WithMetrics(m lock.Metrics) Option { return func(o *options) { o.metrics = m } }

// WithMetricsKey sets the label the metrics hooks get for a lock's key.
// Default: none, the hooks get "" (see lock.Metrics).
func WithMetricsKey(fn func(key string) string) Option {
	return func(o *options) { o.metricsKey = fn }
}

// WithLogger sets where the client logs what happens in the background: a
// heartbeat that failed ("renewal failed"), a lease lost (Warn; Info when
// Close ended it), a lock node deleted in the background after a failed
// release (Debug). Nothing is logged on the hot path. Default:
// slog.Default() at New; a logger with slog.DiscardHandler logs nothing.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRoot sets the path under which every key gets its parent znode.
// Missing nodes of the path are created on demand (persistent). Default:
// DefaultRoot, "/coordkit/locks".
func WithRoot(path string) Option { return func(o *options) { o.root = path } }

// WithACL sets the ACL of every znode the Client creates (root path, key
// parents and lock nodes). For a digest ACL (zk.DigestACL(zk.PermAll, user,
// password)) the connection must have authenticated first with
// conn.AddAuth("digest", []byte(user+":"+password)); go-zookeeper re-sends it
// on every reconnection. Every Client locking the same keys needs the
// permissions to create and delete children of, and set data on, the key
// parents. Default: zk.WorldACL(zk.PermAll).
func WithACL(acl []zk.ACL) Option { return func(o *options) { o.acl = acl } }

// WithSessionTimeout tells the Client the session timeout T of its conn (the
// one given to zk.Connect; ZooKeeper clamps it to [2, 20] ticks by default,
// so pass the negotiated value if it differs). While leases are held the
// Client then sends a heartbeat (a sync, which goes through the leader)
// every T/6, and reports the leases lost once T/2 (T/3 just after an idle
// spell) has passed since the send of the last one answered: before the
// server can expire the session and give the lock to another client; see
// the package documentation for the bound and its assumptions. An outage up
// to about T/3 (T/6 right after an acquisition) loses nothing; go-zookeeper
// waits a second before dialling a standalone server again, so with d under
// about 3.5 s any blip loses the leases. Default: DefaultSessionTimeout
// (4 s), as workerid.WithSessionTimeout: the lowest timeout a server with
// the default tickTime of 2 s negotiates; pass the real value when the
// server's tickTime or minSessionTimeout is lower and the session shorter.
// d = 0 means unknown: a lease is then reported lost as soon as
// go-zookeeper reports its connection down, which is no bound at all
// against a silent or half-open link. A negative d makes New return
// ErrInvalidSessionTimeout.
func WithSessionTimeout(d time.Duration) Option {
	return func(o *options) { o.sessionTimeout = d }
}
