// Package segbuf is the engine of Leaf's segment mode that redisid's
// Segments and sqlid's Leaf and Tinyid generators share: a per-tag double
// buffer served with one atomic add per ID, the next segment reserved in the
// background once a share of the current one is used, Leaf's adaptive step,
// and the registry of tags whose Close stops every background fetch.
//
// The store (a Redis counter, a database row) is behind a Fetch function:
// the engine never does I/O itself.
package segbuf

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/observe"
)

// Range is one segment reserved in the store: the IDs First, First+Stride,
// …, Count of them.
type Range struct {
	First  int64 // the first ID to hand out
	Count  int64 // how many IDs the segment holds (> 0)
	Stride int64 // the distance between two IDs (1, or Tinyid's delta)
	// Last is the highest value the reservation covers in the store's
	// counter (not necessarily an ID handed out): the floor passed to the
	// next Fetch.
	Last int64
	// Step is the step the store reserved: the requested one, or, when the
	// request was 0, the store's own (Leaf's table step).
	Step int64
	// Base is the store's own step (Leaf's leaf_alloc.step), read with the
	// reservation; 0 when the store has none. With Config.FollowBase, it
	// becomes the lower bound of the adaptive step.
	Base int64
	// RolledBack reports that the store's counter was found at or below
	// the floor (it went back: a restore, a data loss) and was raised past it.
	RolledBack bool
}

// Fetch reserves the next segment of step values (0: the store's own step)
// whose first value must be above floor (the Last of the previous
// reservation, 0 before the first). ctx is the registry's lifetime: Fetch
// bounds its own round trip.
type Fetch func(ctx context.Context, step, floor int64) (Range, error)

// Config configures one Buffer.
type Config struct {
	Tag string
	// Step is the size of the first segment; 0 asks the store for its own
	// (the first Fetch gets step 0 and the Range says what it reserved).
	Step int64
	// MinStep and MaxStep bound the adaptive step. With FollowBase, the
	// store's Base raises MinStep after every fetch (Leaf: the table's step
	// is the floor of the step).
	MinStep, MaxStep int64
	FollowBase       bool
	// Target is how long a segment should last: the step doubles when the
	// time between two fetches was shorter, halves when it was at least
	// twice as long.
	Target time.Duration
	// TriggerPercent is the share of a segment used when the next one is
	// fetched (redisid: 15, Leaf: 10).
	TriggerPercent int64
	// RetryDelay is how long TryNext waits after a failed fetch before it
	// starts another one.
	RetryDelay time.Duration
	// Refill: after a failed fetch, fetch again in the background
	// RetryDelay (at least refillFloor) after each failure until one
	// succeeds, without waiting for a caller to ask this buffer (Tinyid's
	// databases: while another database serves every call, the one that
	// failed gets IDs in memory again once it is back, ready for the next
	// outage). One such retry at a time; none after an error that
	// Retryable says will not go away by itself.
	Refill bool
	// Retryable reports whether a failed fetch's error may go away by
	// itself (a database down); nil: every error.
	Retryable func(error) bool
	Now       func() time.Time
	Fetch     Fetch
	Obs       *observe.IDs // logger and metrics; nil: none
	// ErrClosed is the error Next returns once the registry is closed and
	// the segments in memory are used up.
	ErrClosed error
}

// Group is a registry of generators by tag, and the owner of their
// background fetches. Its methods are safe for concurrent use.
type Group[T any] struct {
	// gens is a copy-on-write map tag → T, read without a lock on the hot
	// path; writers hold mu.
	gens atomic.Pointer[map[string]T]

	mu     sync.Mutex // protects closed, wg.Add and the replacement of gens
	closed bool
	wg     sync.WaitGroup // background fetches

	ctx    context.Context // lifetime of background fetches, cancelled by Close
	cancel context.CancelFunc
}

// NewGroup returns an empty, open Group.
func NewGroup[T any]() *Group[T] {
	g := &Group[T]{}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	empty := map[string]T{}
	g.gens.Store(&empty)
	return g
}

// Get returns the generator of tag, if it exists. It takes no lock.
func (g *Group[T]) Get(tag string) (T, bool) {
	v, ok := (*g.gens.Load())[tag]
	return v, ok
}

// GetOrCreate returns the generator of tag, made by mk on first use. It
// returns false once the Group is closed (and the tag has none).
func (g *Group[T]) GetOrCreate(tag string, mk func() T) (T, bool) {
	if v, ok := g.Get(tag); ok {
		return v, true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old := *g.gens.Load()
	if v, ok := old[tag]; ok {
		return v, true
	}
	if g.closed {
		var zero T
		return zero, false
	}
	v := mk()
	m := make(map[string]T, len(old)+1)
	for k, x := range old {
		m[k] = x
	}
	m[tag] = v
	g.gens.Store(&m)
	return v, true
}

// Spawn runs fn in a goroutine owned by g, unless g is closed; fn's ctx
// ends at Close.
func (g *Group[T]) Spawn(fn func(ctx context.Context)) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn(g.ctx)
	}()
	return true
}

// Close cancels every background fetch and waits for them to return. It is
// idempotent.
func (g *Group[T]) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
}

// Buffer is the double buffer of one tag. Next draws from the segment in
// memory with one atomic add; the next segment is reserved in the
// background once TriggerPercent of the current one is used. It is safe for
// concurrent use.
type Buffer struct {
	// cur is the segment being served. It is replaced (under mu) only once
	// it is used up, so IDs come out in the order of the atomic adds.
	cur atomic.Pointer[segment]

	cfg   Config
	spawn func(func(context.Context)) bool

	mu        sync.Mutex // protects next, flight, step, minStep, high, lastFetch, failedAt
	next      *segment   // reserved and waiting, or nil
	flight    *flight    // the fetch under way, or nil; at most one at a time
	step      int64      // size of the next segment to reserve (0: the store's)
	minStep   int64      // lower bound of the adaptive step
	high      int64      // Last of the last reservation: the rollback floor
	lastFetch time.Time  // when the last fetch started
	failedAt  time.Time  // when the last fetch failed (zero after a success)

	pending   atomic.Bool // a fetch is under way (read on the hot path every 1 Ki IDs)
	fetches   atomic.Int64
	waits     atomic.Int64
	rollbacks atomic.Int64
}

// nudgeMask: every 1 Ki IDs a caller checks whether the prefetch is late.
const nudgeMask = 1<<10 - 1

// segment is one reserved range.
type segment struct {
	taken   atomic.Int64 // IDs taken so far; passes count once it is used up
	first   int64
	count   int64
	stride  int64
	trigger int64 // the take that starts the fetch of the next segment
}

// flight is one fetch of a segment; done closes when err and the result are set.
type flight struct {
	done chan struct{}
	err  error
}

// NewBuffer returns the Buffer of cfg.Tag, whose fetches run in goroutines
// started by spawn (a Group's Spawn). It does no I/O.
func NewBuffer(cfg Config, spawn func(func(context.Context)) bool) *Buffer {
	if cfg.Obs == nil {
		cfg.Obs = &observe.IDs{}
	}
	return &Buffer{cfg: cfg, spawn: spawn, step: cfg.Step, minStep: cfg.MinStep}
}

// Stats returns the buffer's counters.
func (b *Buffer) Stats() idgen.SegmentStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return idgen.SegmentStats{
		Fetches: b.fetches.Load(), Waits: b.waits.Load(), Rollbacks: b.rollbacks.Load(),
		Step: b.step, High: b.high, Ready: b.next != nil,
	}
}

// take draws one ID from s: ok is false when s is used up.
func (b *Buffer) take(s *segment) (int64, bool) {
	n := s.taken.Add(1)
	if n > s.count {
		return 0, false
	}
	if m := b.cfg.Obs.Metrics; m != nil {
		m.Issued(b.cfg.Tag, 1)
	}
	if n == s.trigger {
		b.prefetch()
	} else if n&nudgeMask == 0 && n > s.trigger && b.pending.Load() {
		// The fetch is still under way: on a machine where the callers of
		// Next keep every CPU busy, the goroutine that reads the store's
		// reply can wait in the run queue for many scheduler time slices.
		// Yielding now and then lets it run.
		runtime.Gosched()
	}
	return s.first + (n-1)*s.stride, true
}

// Next returns the next ID. In steady state it does no I/O and does not
// allocate. It waits for the store only when the next segment is not ready
// yet (the first call, or a draw rate that outran the prefetch): then it
// returns ctx's error if ctx ends first, the fetch's error, or ErrClosed
// after the Group is closed.
func (b *Buffer) Next(ctx context.Context) (int64, error) {
	for {
		s := b.cur.Load()
		if s != nil {
			if id, ok := b.take(s); ok {
				return id, nil
			}
		}
		if err := b.advance(ctx, s); err != nil {
			return 0, err
		}
	}
}

// takeN draws up to k IDs from s with one atomic add and appends them to
// dst: fewer (none) when s has fewer (none) left.
func (b *Buffer) takeN(s *segment, k int64, dst []int64) []int64 {
	n := s.taken.Add(k)
	from := n - k // the IDs drawn are takes from+1 .. n
	if from >= s.count {
		return dst
	}
	to := min(n, s.count)
	if m := b.cfg.Obs.Metrics; m != nil {
		m.Issued(b.cfg.Tag, int(to-from))
	}
	if from < s.trigger && s.trigger <= to {
		b.prefetch()
	} else if to > s.trigger && to>>10 != from>>10 && b.pending.Load() {
		runtime.Gosched() // as take does every 1 Ki IDs while the fetch is late
	}
	for i := from; i < to; i++ {
		dst = append(dst, s.first+i*s.stride)
	}
	return dst
}

// AppendN appends the next n IDs to dst, in increasing order, and returns
// it: Next n times, with one atomic add per segment drawn from. The IDs
// are drawn in one run only from one segment: when the segment runs out on
// the way, the rest come from the next one, as Next's would. On an error
// (as Next's) it returns dst with the IDs drawn so far, which are spent.
func (b *Buffer) AppendN(ctx context.Context, dst []int64, n int) ([]int64, error) {
	for left := int64(n); left > 0; {
		s := b.cur.Load()
		if s != nil {
			before := len(dst)
			dst = b.takeN(s, left, dst)
			if got := int64(len(dst) - before); got > 0 {
				left -= got
				continue
			}
		}
		if err := b.advance(ctx, s); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// TryNext returns the next ID if one is in memory, and never waits: when
// both segments are used up it starts a fetch (unless one is under way, or
// the last one failed less than RetryDelay ago) and returns false.
func (b *Buffer) TryNext() (int64, bool) {
	for {
		s := b.cur.Load()
		if s != nil {
			if id, ok := b.take(s); ok {
				return id, true
			}
		}
		b.mu.Lock()
		switch {
		case b.cur.Load() != s: // another caller has moved on already
		case b.next != nil:
			b.cur.Store(b.next)
			b.next = nil
		default:
			if b.flight == nil && (b.failedAt.IsZero() || time.Since(b.failedAt) >= b.cfg.RetryDelay) {
				b.startFlight()
			}
			b.mu.Unlock()
			return 0, false
		}
		b.mu.Unlock()
	}
}

// prefetch starts the fetch of the next segment unless one is ready or under way.
func (b *Buffer) prefetch() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next == nil && b.flight == nil {
		b.startFlight()
	}
}

// advance moves past the used-up segment seen: to the next one if it is
// ready, else it waits for (or starts) its fetch.
func (b *Buffer) advance(ctx context.Context, seen *segment) error {
	b.mu.Lock()
	for {
		if b.cur.Load() != seen { // another caller has moved on already
			b.mu.Unlock()
			return nil
		}
		if b.next != nil {
			b.cur.Store(b.next)
			b.next = nil
			b.mu.Unlock()
			return nil
		}
		f := b.flight
		if f == nil {
			f = b.startFlight()
		}
		b.waits.Add(1)
		b.mu.Unlock()
		var begin time.Time
		if b.cfg.Obs.Metrics != nil {
			begin = time.Now()
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if m := b.cfg.Obs.Metrics; m != nil {
			m.SegmentWaited(b.cfg.Tag, time.Since(begin))
		}
		if f.err != nil {
			return f.err
		}
		b.mu.Lock()
	}
}

// startFlight starts a fetch in a goroutine owned by the registry. b.mu is held.
func (b *Buffer) startFlight() *flight {
	f := &flight{done: make(chan struct{})}
	now := b.cfg.Now()
	if !b.lastFetch.IsZero() && b.step > 0 && b.failedAt.IsZero() {
		// (After a failed fetch the time since it says nothing of the draw
		// rate: retries every RetryDelay would double the step each time.)
		b.step = NextStep(b.step, now.Sub(b.lastFetch), b.minStep, b.cfg.MaxStep, b.cfg.Target)
	}
	step, floor := b.step, b.high
	started := b.spawn(func(ctx context.Context) {
		begin := time.Now()
		r, err := b.cfg.Fetch(ctx, step, floor)
		if m := b.cfg.Obs.Metrics; m != nil {
			size := r.Step
			if err != nil || size == 0 {
				size = step
			}
			m.SegmentFetched(b.cfg.Tag, size, time.Since(begin), err)
		}
		if err != nil && ctx.Err() == nil {
			b.cfg.Obs.Warn("segment fetch failed", "tag", b.cfg.Tag, "step", step, "err", err)
		}
		b.mu.Lock()
		if err == nil {
			stride := max(r.Stride, 1)
			trigger := max(1, r.Count*b.cfg.TriggerPercent/100)
			b.next = &segment{first: r.First, count: r.Count, stride: stride, trigger: trigger}
			b.high = r.Last
			b.fetches.Add(1)
			b.failedAt = time.Time{}
			if r.RolledBack {
				b.rollbacks.Add(1)
			}
			if b.cfg.FollowBase && r.Base > 0 {
				b.minStep = min(r.Base, b.cfg.MaxStep)
			}
			if b.step == 0 {
				b.step = r.Step
			}
			b.step = min(max(b.step, b.minStep), b.cfg.MaxStep)
		} else {
			b.failedAt = time.Now()
		}
		failed := b.failedAt
		f.err = err
		b.flight = nil
		b.pending.Store(false)
		close(f.done)
		b.mu.Unlock()
		if err != nil && b.cfg.Refill && (b.cfg.Retryable == nil || b.cfg.Retryable(err)) {
			b.refill(ctx, failed)
		}
	})
	if !started {
		f.err = b.cfg.ErrClosed
		close(f.done)
		return f
	}
	b.lastFetch = now
	b.flight = f
	b.pending.Store(true)
	return f
}

// refillFloor is the shortest wait of a background retry (Config.Refill),
// whatever RetryDelay says: a store that fails at once is not asked again
// in a loop.
const refillFloor = 50 * time.Millisecond

// refill is Config.Refill's retry of the fetch that failed at failed: after
// RetryDelay it starts a fetch, unless another fetch failed since (its own
// refill goes on instead), one succeeded, or one is under way.
func (b *Buffer) refill(ctx context.Context, failed time.Time) {
	t := time.NewTimer(max(b.cfg.RetryDelay, refillFloor))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failedAt.Equal(failed) && b.next == nil && b.flight == nil {
		b.startFlight()
	}
}

// NextStep adapts step to how long the last segment lasted (Leaf's rule):
// twice as large when it lasted less than target (up to maxStep), half as
// large when it lasted at least twice target (down to minStep), else the same.
func NextStep(step int64, lasted time.Duration, minStep, maxStep int64, target time.Duration) int64 {
	switch {
	case lasted < target:
		if step > maxStep/2 {
			return maxStep
		}
		return step * 2
	case lasted >= 2*target:
		return max(step/2, minStep)
	}
	return step
}
