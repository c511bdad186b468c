package idgen

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Option configures a generator. Each option names the generators that read
// it; the others ignore it.
type Option func(*options)

type options struct {
	now        func() time.Time
	elapsed    func() time.Duration
	tolerance  time.Duration
	borrow     time.Duration
	maxLead    time.Duration // > 0: logical clock on
	highWater  time.Time
	persistent bool // WithHighWater was given: borrow only below stored marks
	lost       <-chan struct{}
	held       func() bool // WithLeaseDeadline: false once the lease's local deadline passed
	rand       io.Reader
	metrics    Metrics
	logger     *slog.Logger
}

// Bounds of the clock options: a generator never blocks a caller for longer
// than MaxTolerance, never issues IDs further than MaxBorrow ahead of its
// clock, and never lets its logical clock lead the wall clock by more than
// MaxLogicalLead.
const (
	DefaultTolerance = 5 * time.Millisecond
	MaxTolerance     = time.Second
	MaxBorrow        = time.Minute
	MaxLogicalLead   = 24 * time.Hour
)

func newOptions(opts []Option) (options, error) {
	o := options{now: time.Now, tolerance: DefaultTolerance, rand: rand.Reader}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.now == nil:
		return o, fmt.Errorf("%w: nil clock", ErrInvalidOption)
	case o.rand == nil:
		return o, fmt.Errorf("%w: nil random source", ErrInvalidOption)
	case o.tolerance < 0 || o.tolerance > MaxTolerance:
		return o, fmt.Errorf("%w: tolerance %v not in [0, %v]", ErrInvalidOption, o.tolerance, MaxTolerance)
	case o.borrow < 0 || o.borrow > MaxBorrow:
		return o, fmt.Errorf("%w: borrow %v not in [0, %v]", ErrInvalidOption, o.borrow, MaxBorrow)
	case o.maxLead < 0 || o.maxLead > MaxLogicalLead:
		return o, fmt.Errorf("%w: logical lead %v not in (0, %v]", ErrInvalidOption, o.maxLead, MaxLogicalLead)
	}
	return o, nil
}

// WithMetrics sets the hooks a Snowflake reports to: Issued per call and
// ClockBackwards per refusal. Default: none.
func WithMetrics(m Metrics) Option { return func(o *options) { o.metrics = m } }

// WithLogger sets where a Snowflake logs a clock found behind its last ID
// beyond the tolerance (Warn, at most once a second: the caller gets the
// error every time). Default: slog.Default() at construction; a logger with
// slog.DiscardHandler logs nothing.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithClock sets the clock a generator reads (Snowflake, Serial, NanoKeys,
// ObjectIDGenerator). The default is time.Now, whose readings also carry Go's
// monotonic clock (used by WithLogicalClock). Tests inject clocks that step
// back, freeze and jump.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// WithTolerance sets how far behind the last issued ID's time the clock may
// step before a Snowflake or Serial reports *ClockBackwardsError instead of
// waiting: a smaller step is waited out (callers block for at most d while
// the current tick's sequence is used up). The default is DefaultTolerance
// (5 ms); d must be in [0, MaxTolerance].
func WithTolerance(d time.Duration) Option {
	return func(o *options) { o.tolerance = d }
}

// WithBorrow lets a Snowflake or Serial issue IDs up to ahead of its clock, as
// Baidu's uid-generator and UUIDv7's counter do: when a tick's sequence runs
// out it moves to the next tick at once instead of waiting, and a clock step
// back of up to ahead is absorbed without error, IDs carrying the last issued
// time until the clock catches up. The cost: IDs' times may lead the true time
// by up to ahead, and a generator restarted on the same worker could reissue
// what its predecessor borrowed. A generator built WithHighWater (as
// OpenSnowflake builds them) therefore borrows only below the last mark it
// stored with Checkpoint, which reserves up to ahead past the clock, and
// waits for the clock or the next Checkpoint beyond it. The default is 0 (no
// borrowing); ahead must be in [0, MaxBorrow].
func WithBorrow(ahead time.Duration) Option {
	return func(o *options) { o.borrow = ahead }
}

// WithLogicalClock makes a Snowflake or Serial run on its own logical clock,
// which advances with the elapsed time on Go's monotonic clock (or
// WithElapsed) from the wall time read at construction, and jumps forward to
// the wall clock whenever that is ahead of it, for good: it never follows the
// wall clock back. A wall clock stepped back is ignored, also when the step
// only undoes an earlier step forward, so IDs keep flowing at the true rate
// with times that lead the wall clock by the size of the step; once that lead
// exceeds maxLead, Next returns *ClockBackwardsError with the lead. The cost:
// after a step back, IDs' times stay ahead of the wall clock until the wall
// clock catches up or the generator is rebuilt, and a restart reads the
// (stepped) wall clock again, so a restart needs a high-water mark
// (WithHighWater, OpenSnowflake) to stay unique. The default is off; maxLead
// must be in (0, MaxLogicalLead].
func WithLogicalClock(maxLead time.Duration) Option {
	return func(o *options) {
		o.maxLead = maxLead
		if maxLead == 0 {
			o.maxLead = -1 // rejected by newOptions: 0 would silently mean off
		}
	}
}

// WithElapsed sets the monotonic clock that WithLogicalClock reads: elapsed
// returns the time since the generator was built. The default derives it from
// the readings of the WithClock clock (t.Sub(start), which Go computes on the
// monotonic clock when both readings carry it, as time.Now's do). Tests use it
// to move the wall clock and the monotonic clock independently.
func WithElapsed(elapsed func() time.Duration) Option {
	return func(o *options) { o.elapsed = elapsed }
}

// WithHighWater makes a Snowflake or Serial start above mark: every ID it
// issues has a time at or after mark, which is a mark stored by a previous
// generator of the same worker (see HighWaterStore and Checkpoint). If the
// clock is behind mark by more than the tolerance (or borrow), NewSnowflake
// returns *ClockBackwardsError: a restart after a clock rollback is detected
// instead of reissuing IDs. It also marks the generator as one whose IDs must
// survive restarts, even with the zero mark (a worker with no mark stored
// yet): WithBorrow then borrows only below the last mark stored (mark, then
// each Checkpoint's). Without this option there is no mark and borrowing is
// not limited.
func WithHighWater(mark time.Time) Option {
	return func(o *options) { o.highWater, o.persistent = mark, true }
}

// WithLease ties a Snowflake or Serial to a worker lease: once lost is closed,
// Next, NextN and any caller waiting inside them return ErrLeaseLost, because
// the worker number may be handed to another process. The check is a
// non-blocking channel receive per call. The default is nil: never lost.
func WithLease(lost <-chan struct{}) Option {
	return func(o *options) { o.lost = lost }
}

// WithLeaseDeadline ties a Snowflake or Serial to a lease whose end its
// holder knows locally (a renewal's send time plus the TTL, say): held
// reports whether that deadline is still ahead, on a monotonic clock. Next
// and NextN call it after every clock reading they issue IDs at, and return
// ErrLeaseLost once it reports false. WithLease alone is not enough there: a
// process stopped past the deadline (SIGSTOP, a long GC pause, a frozen VM)
// resumes with its callers running before the goroutine that closes lost,
// and would issue IDs for a worker number another process may hold by then.
// An ID read before the deadline carries a time before it, below the IDs of
// a next holder that took over after it. held must be fast (it runs per
// call) and safe for concurrent use. The default is nil: no deadline.
func WithLeaseDeadline(held func() bool) Option {
	return func(o *options) { o.held = held }
}

// WithRand sets the source of randomness of an ObjectIDGenerator (its 5-byte
// process value and counter start). The default is crypto/rand.Reader.
func WithRand(r io.Reader) Option {
	return func(o *options) { o.rand = r }
}
