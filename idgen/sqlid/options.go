package sqlid

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

// Option configures Segments (NewLeaf, NewTinyid).
type Option func(*options)

type options struct {
	table        string // "": the schema's own name
	maxStep      int64
	target       time.Duration
	fetchTimeout time.Duration
	retryDelay   time.Duration
	now          func() time.Time
	metrics      idgen.Metrics
	logger       *slog.Logger
}

func defaultOptions() options {
	return options{
		maxStep:      10_000_000,
		target:       15 * time.Minute,
		fetchTimeout: 5 * time.Second,
		retryDelay:   time.Second,
		now:          time.Now,
	}
}

// The tables' default names: Leaf's and Tinyid's own.
const (
	LeafTable   = "leaf_alloc"
	TinyidTable = "tiny_id_info"
)

// WithTable sets the name of the table (an identifier, optionally
// qualified: "ids.leaf_alloc"). Default: LeafTable for NewLeaf, TinyidTable
// for NewTinyid.
func WithTable(name string) Option { return func(o *options) { o.table = name } }

// WithMaxStep sets the upper bound of the adaptive step. The lower bound is
// the row's step column, read at every fetch (Leaf's rule: operators tune a
// tag by updating its step). Default: 10_000_000: at 10 million IDs/s a tag
// then pays one round trip a second, in the background. (Leaf's bound is
// 1_000_000, for draw rates far lower.) A crash wastes at most the unused
// rest of two segments.
func WithMaxStep(n int64) Option { return func(o *options) { o.maxStep = n } }

// WithTargetInterval sets how long a segment should last: the step doubles
// (up to the upper bound) when the time between two fetches was shorter,
// and halves (down to the row's step) when it was at least twice as long.
// Default: 15 minutes, Leaf's (which halves after 30).
func WithTargetInterval(d time.Duration) Option { return func(o *options) { o.target = d } }

// WithFetchTimeout bounds one background fetch of a segment (the
// transaction, or the statement). Default: 5s.
func WithFetchTimeout(d time.Duration) Option { return func(o *options) { o.fetchTimeout = d } }

// WithRetryDelay sets how long a Tinyid generator over several databases
// leaves a database alone after a fetch from it failed, before it tries it
// again in the background (and again d after each failure until one
// succeeds, at least 50 ms apart; 0: at once when a caller needs it).
// Default: 1s.
func WithRetryDelay(d time.Duration) Option { return func(o *options) { o.retryDelay = d } }

// WithClock replaces the clock used to measure how long segments last (for
// tests of the adaptive step). Default: time.Now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithMetrics sets the hooks Segments reports to: Issued per Next,
// SegmentFetched per reservation, SegmentWaited per Next that waited for
// one (idgen.Metrics, the hooks every coordkit ID generator takes).
// Default: none.
func WithMetrics(m idgen.Metrics) Option { return func(o *options) { o.metrics = m } }

// WithLogger sets where Segments logs what happens in the background: a
// segment fetch that failed, a max_id found behind the IDs already issued
// (both Warn). Default: slog.Default() at construction; a logger with
// slog.DiscardHandler logs nothing.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

func (o *options) validate() error {
	switch {
	case o.table != "" && !identRE.MatchString(o.table):
		return fmt.Errorf("%w: table name %q (want an identifier, optionally schema-qualified)", ErrBadOption, o.table)
	case o.maxStep <= 0 || o.maxStep > 1<<31-1:
		return fmt.Errorf("%w: max step %d (want 1..2147483647)", ErrBadStep, o.maxStep)
	case o.target <= 0:
		return fmt.Errorf("%w: target interval %v", ErrBadOption, o.target)
	case o.fetchTimeout <= 0:
		return fmt.Errorf("%w: fetch timeout %v", ErrBadOption, o.fetchTimeout)
	case o.retryDelay < 0:
		return fmt.Errorf("%w: retry delay %v", ErrBadOption, o.retryDelay)
	case o.now == nil:
		return fmt.Errorf("%w: nil clock", ErrBadOption)
	}
	return nil
}
