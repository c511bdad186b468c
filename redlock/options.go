package redlock

import (
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/coordkit/coordkit/lock"
)

// Defaults of the client options.
const (
	// DefaultTTL is the TTL of leases obtained without lock.WithTTL.
	DefaultTTL = 10 * time.Second
	// DefaultNodeTimeout bounds each acquisition round trip to one master.
	// It also covers waiting for a pooled connection and for the scheduler:
	// at 5 ms, 32 goroutines on a loaded 2-core host lost most answers to
	// it (bench/README.md), so the default sits at 20 ms.
	DefaultNodeTimeout = 20 * time.Millisecond
	// DefaultPrefix starts every Redis key and channel name of the lock on
	// every master. It differs from lock.DefaultPrefix, so a Redlock and a
	// single-server lock of the same name are different locks.
	DefaultPrefix = "coordkit:redlock:"
	// DefaultRetryJitter bounds the random pause after an attempt that
	// took some masters but not a quorum (a split vote).
	DefaultRetryJitter = 2 * time.Millisecond
	// DefaultWaiterTimeout is how long a queued waiter keeps its place on a
	// master without calling in.
	DefaultWaiterTimeout = 5 * time.Second
	// DefaultReleaseWindow is how long a master keeps a release's answer for
	// a retry of the same release.
	DefaultReleaseWindow = 10 * time.Second
	// DefaultInFlight is how many calls (single or pipelined batches) a
	// Client keeps in flight to one master before further calls queue and
	// leave together in one pipeline. One master is single-threaded and
	// the client shares the host with it; one batch at a time costs the
	// fewest writes and reads per script: on the 2-core benchmark host,
	// uncontended pairs/s with 3 and 5 masters went from 1.45–1.5× redsync
	// at 4 to 2.1× at 1 (bench/README.md). An idle client sends at once.
	DefaultInFlight = 1
	// maxBackoff caps the pause between attempts when masters fail.
	maxBackoff = 250 * time.Millisecond
	// minSlowTimeout is the floor of the per-master bound of releases,
	// renewals and leaving the queue (20 × the node timeout otherwise).
	minSlowTimeout = 100 * time.Millisecond
)

// Drift returns the clock drift Redlock allows for a lease of ttl:
// ttl·0.01 + 2 ms. A lease is valid for TTL − elapsed − Drift(TTL) after its
// acquisition round.
func Drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// Option configures a Client.
type Option func(*options)

type options struct {
	ttl           time.Duration
	nodeTimeout   time.Duration
	prefix        string
	evenMasters   bool
	jitter        time.Duration
	waiterTimeout time.Duration
	releaseWindow time.Duration
	inFlight      int
	now           func() time.Time
	randN         func(n int64) int64
	metrics       lock.Metrics
	metricsKey    func(key string) string
	logger        *slog.Logger
	meta          string
}

func defaultOptions() options {
	return options{
		ttl:           DefaultTTL,
		nodeTimeout:   DefaultNodeTimeout,
		prefix:        DefaultPrefix,
		jitter:        DefaultRetryJitter,
		waiterTimeout: DefaultWaiterTimeout,
		releaseWindow: DefaultReleaseWindow,
		inFlight:      DefaultInFlight,
		now:           time.Now,
		randN:         rand.Int64N,
	}
}

// slowTimeout bounds one master's release, renewal or leave.
func (o *options) slowTimeout() time.Duration { return max(20*o.nodeTimeout, minSlowTimeout) }

// WithMetrics sets the hooks that observe waits, holds, renewals, losses
// and releases: lock.Metrics, the same hooks every coordkit lock takes.
// Default: none.
func WithMetrics(m lock.Metrics) Option { return func(o *options) { o.metrics = m } }

// WithMetricsKey sets the label the metrics hooks get for a lock's key.
// Default: none, the hooks get "" (see lock.Metrics).
func WithMetricsKey(fn func(key string) string) Option {
	return func(o *options) { o.metricsKey = fn }
}

// WithLogger sets where the client logs what happens in the background: a
// renewal round without a quorum or a lease lost (Warn; Info when Close
// ended it), a clean-up on a master that failed (Debug). Nothing is logged
// on the hot path. Default: slog.Default() at New; a logger with
// slog.DiscardHandler logs nothing.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithDefaultTTL sets the TTL of leases obtained without lock.WithTTL.
// Default: DefaultTTL (10 s).
func WithDefaultTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithNodeTimeout bounds each master's answer to an acquisition: a master
// that has not answered within d counts as failed for that attempt (and is
// released). Releases, renewals and leaving the queue get 20·d per master
// (at least 100 ms). Default: DefaultNodeTimeout (20 ms; Redis's Redlock
// description suggests 5–50 ms for a 10 s TTL; below 20 ms, busy clients
// lose answers to scheduling delay and retry). It must be positive and
// leave TTL − d − Drift(TTL) positive.
func WithNodeTimeout(d time.Duration) Option { return func(o *options) { o.nodeTimeout = d } }

// WithPrefix sets the prefix of every key and channel on the masters.
// Default: DefaultPrefix ("coordkit:redlock:"). It must not contain '{'
// or '}'.
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithEvenMasters allows an even number of masters. Default: refused, since
// an even N tolerates no more failures than N−1 (the quorum is N/2+1).
func WithEvenMasters() Option { return func(o *options) { o.evenMasters = true } }

// WithRetryJitter bounds the random pause (uniform in [0, d)) after an
// attempt that took some masters but not a quorum, so that competing
// clients do not split the masters again; failing masters back off from d
// doubling up to 250 ms. Default: DefaultRetryJitter (2 ms).
func WithRetryJitter(d time.Duration) Option { return func(o *options) { o.jitter = d } }

// WithWaiterTimeout sets how long a queued waiter keeps its place on a
// master without calling in again. Live waiters call in every third of it.
// Default: DefaultWaiterTimeout (5 s).
func WithWaiterTimeout(d time.Duration) Option { return func(o *options) { o.waiterTimeout = d } }

// WithReleaseWindow sets how long each master keeps a release's answer so
// that a retried release does not drop a second level. Default:
// DefaultReleaseWindow (10 s).
func WithReleaseWindow(d time.Duration) Option { return func(o *options) { o.releaseWindow = d } }

// WithInFlight sets how many acquisitions and releases (single calls or
// pipelined batches) may be in flight to one master at once; further calls
// queue and are sent together as one pipeline when a slot frees. More
// slots lower the latency under moderate load on hosts with spare cores;
// fewer send fewer, larger batches. Default: DefaultInFlight (1).
func WithInFlight(n int) Option { return func(o *options) { o.inFlight = n } }

// WithClock sets the clock that times acquisitions (validity) and leases
// (the watchdog). Default: time.Now. It is the hook for tests (a clock that
// jumps, a process stopped past its deadline); production code leaves it
// unset.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

func (o *options) validate() error {
	switch {
	case o.nodeTimeout <= 0:
		return invalid("node timeout %v", o.nodeTimeout)
	case o.prefix == "":
		return invalid("empty key prefix")
	case o.jitter < 0:
		return invalid("negative retry jitter %v", o.jitter)
	case o.waiterTimeout < 3*time.Millisecond:
		return invalid("waiter timeout %v too short", o.waiterTimeout)
	case o.releaseWindow < time.Millisecond:
		return invalid("release window %v too short", o.releaseWindow)
	case o.inFlight < 1:
		return invalid("in-flight limit %d: at least 1", o.inFlight)
	case len(o.meta) > lock.MaxHolderMeta:
		return invalid("holder metadata of %d bytes (at most %d)", len(o.meta), lock.MaxHolderMeta)
	}
	return o.checkTTL(o.ttl, "default TTL")
}

// checkTTL refuses a TTL that leaves no validity in the worst case.
func (o *options) checkTTL(ttl time.Duration, what string) error {
	if ttl < 0 {
		return invalid("%s not positive", what)
	}
	if ttl < lockMinTTL {
		return invalid("%s %v below the minimum %v", what, ttl, lockMinTTL)
	}
	if v := ttl - Drift(ttl) - o.nodeTimeout; v <= 0 {
		return invalid("%s %v too short for the drift %v plus the node timeout %v", what, ttl, Drift(ttl), o.nodeTimeout)
	}
	return nil
}

// WithHolderMeta stores meta with every hold on each master, as
// lock.WithHolderMeta does for the Redis lock (no extra command; at most
// lock.MaxHolderMeta bytes; default none): coordctl lock inspect --kind
// redlock shows it per master.
func WithHolderMeta(meta string) Option { return func(o *options) { o.meta = meta } }
