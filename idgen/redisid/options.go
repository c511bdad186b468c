package redisid

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

// Option configures Segments.
type Option func(*options)

type options struct {
	prefix       string
	step         int64
	minStep      int64
	maxStep      int64
	target       time.Duration
	fetchTimeout time.Duration
	now          func() time.Time
	metrics      idgen.Metrics
	logger       *slog.Logger
}

func defaultOptions() options {
	return options{
		prefix:       DefaultPrefix,
		step:         1000,
		minStep:      1000,
		maxStep:      10_000_000,
		target:       time.Minute,
		fetchTimeout: 5 * time.Second,
		now:          time.Now,
	}
}

// DefaultPrefix and LegacyPrefix start the Segments counter keys: tag t
// draws from DefaultPrefix+t, or from LegacyPrefix+t (the key of coordkit
// versions before the "coordkit:" key prefix) if that key exists. See
// "Redis keys" in the package documentation.
const (
	DefaultPrefix = "coordkit:id:seg:"
	LegacyPrefix  = "redisid:seg:"
)

// WithPrefix sets the prefix of the counter keys: tag t draws from the Redis
// key prefix+t, and from no other key. Default: DefaultPrefix (with the
// LegacyPrefix key kept for the tags that have one). It must not be empty.
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithKeyPrefix is WithPrefix.
//
// Deprecated: use WithPrefix, the name every coordkit client uses.
func WithKeyPrefix(prefix string) Option { return WithPrefix(prefix) }

// WithMetrics sets the hooks Segments reports to: Issued per Next,
// SegmentFetched per reservation, SegmentWaited per Next that waited for
// one (idgen.Metrics, the hooks every coordkit ID generator takes).
// Default: none.
func WithMetrics(m idgen.Metrics) Option { return func(o *options) { o.metrics = m } }

// WithLogger sets where Segments logs what happens in the background: a
// segment fetch that failed, a counter found behind the IDs already issued
// (both Warn). Default: slog.Default() at NewSegments; a logger with
// slog.DiscardHandler logs nothing.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithStep sets the size of a tag's first segment. Default: 1000 (or the
// lower bound, if WithStepBounds raises it above 1000).
func WithStep(step int64) Option { return func(o *options) { o.step = step } }

// WithStepBounds sets the range the adaptive step stays in. Default:
// [1000, 10_000_000]: at 10 million IDs/s a tag then pays one round trip a
// second, in the background, and the prefetch has 0.85 s to land even when
// the callers of Next keep every CPU busy. (Leaf's bound is 1_000_000, for
// draw rates a thousand times lower.)
func WithStepBounds(minStep, maxStep int64) Option {
	return func(o *options) { o.minStep, o.maxStep = minStep, maxStep }
}

// WithTargetInterval sets how long a segment should last. The step doubles
// (up to the upper bound) when the time between two fetches was shorter, and
// halves (down to the lower bound) when it was more than twice as long.
// Default: one minute. Leaf uses 15 minutes; a shorter target keeps the IDs a
// crash throws away (at most two segments) fewer, at the price of more round
// trips, which are all in the background anyway.
func WithTargetInterval(d time.Duration) Option { return func(o *options) { o.target = d } }

// WithFetchTimeout bounds one background fetch of a segment. Default: 5s.
func WithFetchTimeout(d time.Duration) Option { return func(o *options) { o.fetchTimeout = d } }

// WithClock replaces the clock used to measure how long segments last (for
// tests of the adaptive step). Default: time.Now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

func (o *options) validate() error {
	switch {
	case o.prefix == "":
		return fmt.Errorf("%w: empty key prefix", ErrBadOption)
	case o.minStep <= 0 || o.maxStep < o.minStep:
		return fmt.Errorf("%w: bounds [%d, %d]", ErrBadStep, o.minStep, o.maxStep)
	case o.step <= 0:
		return fmt.Errorf("%w: %d", ErrBadStep, o.step)
	case o.target <= 0:
		return fmt.Errorf("%w: target interval %v", ErrBadOption, o.target)
	case o.fetchTimeout <= 0:
		return fmt.Errorf("%w: fetch timeout %v", ErrBadOption, o.fetchTimeout)
	case o.now == nil:
		return fmt.Errorf("%w: nil clock", ErrBadOption)
	}
	o.step = min(max(o.step, o.minStep), o.maxStep)
	return nil
}
