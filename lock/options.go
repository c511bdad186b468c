package lock

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/coordkit/coordkit/internal/hashlock"
)

// Defaults of the Redis lock's client options.
const (
	// DefaultTTL is the lease TTL when neither WithTTL nor WithDefaultTTL
	// says otherwise (Redisson's lockWatchdogTimeout).
	DefaultTTL = 30 * time.Second
	// MinTTL is the renewal floor: a TTL below it cannot be renewed reliably
	// (the watchdog renews every TTL/3) and is refused.
	MinTTL = 30 * time.Millisecond
	// DefaultPrefix starts every Redis key and channel name of the lock.
	DefaultPrefix = "coordkit:lock:"
	// DefaultWaiterTimeout is how long a queued waiter that stopped calling
	// in (crashed, partitioned) keeps its place before it is skipped.
	DefaultWaiterTimeout = 5 * time.Second
	// DefaultReleaseWindow is how long a release's answer is kept for a
	// retry of the same release.
	DefaultReleaseWindow = 10 * time.Second
)

// ClientOption configures a Client (New) or a Simple lock (NewSimple).
type ClientOption func(*clientOptions)

type clientOptions struct {
	prefix        string
	ttl           time.Duration
	fair          bool
	waiterTimeout time.Duration
	releaseWindow time.Duration
	replicas      int
	replicaWait   time.Duration
	metrics       Metrics
	metricsKey    func(key string) string
	logger        *slog.Logger
	now           func() time.Time
	meta          string
}

func defaultClientOptions() clientOptions {
	return clientOptions{
		prefix:        DefaultPrefix,
		ttl:           DefaultTTL,
		waiterTimeout: DefaultWaiterTimeout,
		releaseWindow: DefaultReleaseWindow,
		now:           time.Now,
	}
}

func (o *clientOptions) validate() error {
	switch {
	case o.prefix == "":
		return fmt.Errorf("%w: empty key prefix", ErrInvalid)
	case o.ttl < MinTTL:
		return fmt.Errorf("%w: default TTL %v below the minimum %v", ErrInvalid, o.ttl, MinTTL)
	case o.waiterTimeout < 3*time.Millisecond:
		return fmt.Errorf("%w: waiter timeout %v too short", ErrInvalid, o.waiterTimeout)
	case o.releaseWindow < time.Millisecond:
		return fmt.Errorf("%w: release window %v too short", ErrInvalid, o.releaseWindow)
	case o.replicas < 0 || o.replicas > 0 && o.replicaWait <= 0:
		return fmt.Errorf("%w: WithWaitReplicas(%d, %v)", ErrInvalid, o.replicas, o.replicaWait)
	case len(o.meta) > MaxHolderMeta:
		return fmt.Errorf("%w: holder metadata of %d bytes (at most %d)", ErrInvalid, len(o.meta), MaxHolderMeta)
	}
	return nil
}

// WithPrefix sets the prefix of every Redis key and channel the lock uses
// (see the key schema in the package documentation). Default: DefaultPrefix
// ("coordkit:lock:"). It must not contain '{' or '}'.
func WithPrefix(p string) ClientOption { return func(o *clientOptions) { o.prefix = p } }

// WithDefaultTTL sets the TTL of leases obtained without WithTTL.
// Default: DefaultTTL (30 s).
func WithDefaultTTL(d time.Duration) ClientOption { return func(o *clientOptions) { o.ttl = d } }

// WithFair makes the lock fair: waiters from every client are served in
// arrival order and a releaser cannot barge ahead of them. Every client
// that uses a key must agree on the mode. Default: not fair (a free lock is
// taken by whoever asks first; a release still grants the lock to the
// first queued waiter, and a client's goroutines wait in a local line).
func WithFair() ClientOption { return func(o *clientOptions) { o.fair = true } }

// WithWaiterTimeout sets how long a queued waiter keeps its place without
// calling in again; a waiter that crashed is skipped after it. Live waiters
// call in every third of it. Default: DefaultWaiterTimeout (5 s).
func WithWaiterTimeout(d time.Duration) ClientOption {
	return func(o *clientOptions) { o.waiterTimeout = d }
}

// WithReleaseWindow sets how long Redis keeps the answer to a release that
// leaves levels held or passes the lock to a waiter (a marker key of about
// 100 bytes each), so that the same release, sent again after its reply was
// lost, gets the same answer instead of dropping a second level or
// reporting a freed lock as not held. Default:
// DefaultReleaseWindow (10 s, longer than go-redis' read timeout times its
// retries).
func WithReleaseWindow(d time.Duration) ClientOption {
	return func(o *clientOptions) { o.releaseWindow = d }
}

// WithWaitReplicas makes every fresh acquisition wait (Redis WAIT) until n
// replicas acknowledged it, at most timeout; when fewer do, the lock is
// released again and Obtain fails with ErrTooFewReplicas. Default: 0, do
// not wait. WAIT narrows, but does not close, the window in which a
// failover to a replica loses a lock.
func WithWaitReplicas(n int, timeout time.Duration) ClientOption {
	return func(o *clientOptions) { o.replicas, o.replicaWait = n, timeout }
}

// WithMetrics sets the hooks that observe waits, holds, renewals, losses
// and releases. Default: none.
func WithMetrics(m Metrics) ClientOption { return func(o *clientOptions) { o.metrics = m } }

// WithMetricsKey sets the label the metrics hooks get for a lock's key
// (for instance the part before the first ':'). Default: none, the hooks
// get "": keys are unbounded, and a label per key would grow without end.
func WithMetricsKey(fn func(key string) string) ClientOption {
	return func(o *clientOptions) { o.metricsKey = fn }
}

// WithLogger sets where the client logs what happens in the background: a
// renewal that failed or a lease lost (Warn; Info when Close ended it), a
// clean-up that failed and a hold discarded because its acquisition was
// answered after its TTL, which Obtain never returned ("late grant
// discarded", Debug). Nothing is logged on the hot path. Default:
// slog.Default(); a logger with slog.DiscardHandler logs nothing.
func WithLogger(l *slog.Logger) ClientOption { return func(o *clientOptions) { o.logger = l } }

// WithClock sets the clock used to time leases (the watchdog's expiry
// estimate) and metrics. Default: time.Now. It is the hook for tests (a
// clock that jumps, a process stopped past its deadline); production code
// leaves it unset.
func WithClock(now func() time.Time) ClientOption {
	return func(o *clientOptions) {
		if now != nil {
			o.now = now
		}
	}
}

// MaxHolderMeta is the largest holder metadata WithHolderMeta accepts, in
// bytes.
const MaxHolderMeta = 512

// The engine's own limit is the same: the constant expression overflows
// (and the build fails) if they differ.
const _ = uint(MaxHolderMeta-hashlock.MaxMeta) + uint(hashlock.MaxMeta-MaxHolderMeta)

// WithHolderMeta stores meta with every hold the Client's locks take, for
// operators: Inspect returns it (Info.Meta, and Info.WaiterMetas for the
// Client's queued waiters), and so does coordctl lock inspect. It costs no
// command and no round trip: the acquisition's own HSET writes it (a
// waiter's metadata waits in a hash beside the queue, so that the release
// that grants it the lock writes it with the grant). At most MaxHolderMeta
// bytes; default: none stored. ProcessMeta makes the usual one. NewSimple
// refuses it (ErrInvalid): a Simple lock's value is its holder's token.
func WithHolderMeta(meta string) ClientOption { return func(o *clientOptions) { o.meta = meta } }

// ProcessMeta returns holder metadata naming this process:
// "service=<service> host=<hostname> pid=<pid>" (service left out when
// empty), for WithHolderMeta.
func ProcessMeta(service string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	m := "host=" + host + " pid=" + strconv.Itoa(os.Getpid())
	if service != "" {
		m = "service=" + service + " " + m
	}
	return m
}
