package redisid

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/observe"
)

// Segments hands out IDs for any number of tags from segments reserved in
// Redis, one counter key per tag, all through one shared client. Create it
// with NewSegments and Close it when done. Its methods are safe for
// concurrent use.
type Segments struct {
	rdb redis.UniversalClient
	o   options
	obs *observe.IDs

	// gens is a copy-on-write map tag → *Segment, read without a lock on the
	// hot path of Next; writers hold mu.
	gens atomic.Pointer[map[string]*Segment]

	mu     sync.Mutex // protects closed, wg.Add and the replacement of gens
	closed bool
	wg     sync.WaitGroup // background fetches

	ctx    context.Context // lifetime of background fetches, cancelled by Close
	cancel context.CancelFunc
}

// NewSegments returns a registry of segment generators over rdb. It does no
// I/O: each tag reserves its first segment on its first Next. It returns
// ErrBadStep or ErrBadOption for invalid options.
func NewSegments(rdb redis.UniversalClient, opts ...Option) (*Segments, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	s := &Segments{rdb: rdb, o: o, obs: observe.NewIDs("coordkit/redisid", o.logger, o.metrics)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	empty := map[string]*Segment{}
	s.gens.Store(&empty)
	return s, nil
}

// For returns the generator of tag, creating it on first use (without I/O).
// The same tag always yields the same *Segment. It returns ErrEmptyTag for
// "" and ErrClosed after Close.
func (s *Segments) For(tag string) (*Segment, error) {
	if g := (*s.gens.Load())[tag]; g != nil {
		return g, nil
	}
	if tag == "" {
		return nil, ErrEmptyTag
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	old := *s.gens.Load()
	if g := old[tag]; g != nil {
		return g, nil
	}
	g := &Segment{reg: s, tag: tag, key: s.o.prefix + tag, step: s.o.step}
	if s.o.prefix == DefaultPrefix {
		g.legacy = LegacyPrefix + tag
	}
	m := make(map[string]*Segment, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[tag] = g
	s.gens.Store(&m)
	return g, nil
}

// Next returns the next ID of tag; see Segment.Next.
func (s *Segments) Next(ctx context.Context, tag string) (int64, error) {
	g := (*s.gens.Load())[tag]
	if g == nil {
		var err error
		if g, err = s.For(tag); err != nil {
			return 0, err
		}
	}
	return g.Next(ctx)
}

// Close stops every background fetch and waits for them to return. The
// segments already in memory are still served; once one runs out, Next
// returns ErrClosed. Close is idempotent and always returns nil.
func (s *Segments) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// spawn runs fn in a goroutine owned by s, unless s is closed.
func (s *Segments) spawn(fn func(ctx context.Context)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn(s.ctx)
	}()
	return true
}

// Segment is the generator of one tag (Leaf's segment mode). Next draws from
// the segment in memory with one atomic add; the next segment is reserved in
// the background once 15 % of the current one is used. Obtain it from
// Segments.For. It is safe for concurrent use.
type Segment struct {
	// cur is the segment being served. It is replaced (under mu) only once
	// it is used up, so IDs come out in the order of the atomic adds.
	cur atomic.Pointer[segment]

	reg *Segments
	tag string
	// key is the counter's key, legacy the LegacyPrefix key to use instead
	// if it exists ("" when the prefix is not DefaultPrefix, or once the
	// first fetch has chosen). Both are written by fetch only, which runs
	// one at a time, and read by Key under mu.
	key    string
	legacy string

	mu        sync.Mutex // protects next, flight, step, high and lastFetch
	next      *segment   // reserved and waiting, or nil
	flight    *flight    // the fetch under way, or nil; at most one at a time
	step      int64      // size of the next segment to reserve
	high      int64      // end of the last segment reserved: the rollback floor
	lastFetch time.Time  // when the last fetch started

	pending   atomic.Bool // a fetch is under way (read on the hot path every 1 Ki IDs)
	fetches   atomic.Int64
	waits     atomic.Int64
	rollbacks atomic.Int64
}

// nudgeMask: every 1 Ki IDs a caller checks whether the prefetch is late.
const nudgeMask = 1<<10 - 1

// segment is one reserved range [first, first+size).
type segment struct {
	taken   atomic.Int64 // IDs taken so far; passes size once it is used up
	first   int64
	size    int64
	trigger int64 // the take that starts the fetch of the next segment
}

// flight is one fetch of a segment; done closes when err and the result are set.
type flight struct {
	done chan struct{}
	err  error
}

// SegmentStats are counters of one Segment since its creation.
type SegmentStats struct {
	Fetches   int64 // segments reserved in Redis
	Waits     int64 // times a Next call had to wait for a round trip
	Rollbacks int64 // fetches that found the counter at or below High and raised it
	Step      int64 // size of the next segment to reserve
	High      int64 // last ID of the last segment reserved
	Ready     bool  // the next segment is reserved and waiting in memory
}

// Stats returns the generator's counters.
func (g *Segment) Stats() SegmentStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return SegmentStats{
		Fetches: g.fetches.Load(), Waits: g.waits.Load(), Rollbacks: g.rollbacks.Load(),
		Step: g.step, High: g.high, Ready: g.next != nil,
	}
}

// Tag returns the generator's tag.
func (g *Segment) Tag() string { return g.tag }

// Key returns the Redis key of the generator's counter: prefix+tag, or,
// with the default prefix, the LegacyPrefix key if the first fetch found it.
func (g *Segment) Key() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.key
}

// Next returns the next ID of the tag: unique across every process drawing
// from the same key, and larger than every ID this generator returned
// before. In steady state it does no I/O and does not allocate. It waits for
// Redis only when the next segment is not ready yet (the first call, or a
// draw rate that outran the prefetch): then it returns ctx's error if ctx
// ends first, the fetch's error (Redis down, ErrCorrupt, ErrOverflow), or
// ErrClosed after Segments.Close.
func (g *Segment) Next(ctx context.Context) (int64, error) {
	for {
		s := g.cur.Load()
		if s != nil {
			n := s.taken.Add(1)
			if n <= s.size {
				if m := g.reg.obs.Metrics; m != nil {
					m.Issued(g.tag, 1)
				}
				if n == s.trigger {
					g.prefetch()
				} else if n&nudgeMask == 0 && n > s.trigger && g.pending.Load() {
					// The fetch is still under way: on a machine where the
					// callers of Next keep every CPU busy, the goroutine that
					// reads Redis's reply can wait in the run queue for many
					// scheduler time slices. Yielding now and then lets it run.
					runtime.Gosched()
				}
				return s.first + n - 1, nil
			}
		}
		if err := g.advance(ctx, s); err != nil {
			return 0, err
		}
	}
}

// prefetch starts the fetch of the next segment unless one is ready or under way.
func (g *Segment) prefetch() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.next == nil && g.flight == nil {
		g.startFlight()
	}
}

// advance moves past the used-up segment seen: to the next one if it is
// ready, else it waits for (or starts) its fetch.
func (g *Segment) advance(ctx context.Context, seen *segment) error {
	g.mu.Lock()
	for {
		if g.cur.Load() != seen { // another caller has moved on already
			g.mu.Unlock()
			return nil
		}
		if g.next != nil {
			g.cur.Store(g.next)
			g.next = nil
			g.mu.Unlock()
			return nil
		}
		f := g.flight
		if f == nil {
			f = g.startFlight()
		}
		g.waits.Add(1)
		g.mu.Unlock()
		var begin time.Time
		if g.reg.obs.Metrics != nil {
			begin = time.Now()
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if m := g.reg.obs.Metrics; m != nil {
			m.SegmentWaited(g.tag, time.Since(begin))
		}
		if f.err != nil {
			return f.err
		}
		g.mu.Lock()
	}
}

// startFlight starts a fetch in a goroutine owned by the registry. g.mu is held.
func (g *Segment) startFlight() *flight {
	f := &flight{done: make(chan struct{})}
	now := g.reg.o.now()
	if !g.lastFetch.IsZero() {
		g.step = nextStep(g.step, now.Sub(g.lastFetch), &g.reg.o)
	}
	step, floor := g.step, g.high
	started := g.reg.spawn(func(ctx context.Context) {
		begin := time.Now()
		first, err := g.fetch(ctx, step, floor)
		if m := g.reg.obs.Metrics; m != nil {
			m.SegmentFetched(g.tag, step, time.Since(begin), err)
		}
		if err != nil && ctx.Err() == nil {
			g.reg.obs.Warn("segment fetch failed", "tag", g.tag, "step", step, "err", err)
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if err == nil {
			g.next = &segment{first: first, size: step, trigger: max(1, step*15/100)}
			g.high = first + step - 1
			g.fetches.Add(1)
		}
		f.err = err
		g.flight = nil
		g.pending.Store(false)
		close(f.done)
	})
	if !started {
		f.err = ErrClosed
		close(f.done)
		return f
	}
	g.lastFetch = now
	g.flight = f
	g.pending.Store(true)
	return f
}

// nextStep adapts the step to how long the last segment lasted (Leaf's rule).
func nextStep(step int64, lasted time.Duration, o *options) int64 {
	switch {
	case lasted < o.target:
		if step > o.maxStep/2 {
			return o.maxStep
		}
		return step * 2
	case lasted >= 2*o.target:
		return max(step/2, o.minStep)
	}
	return step
}

// fetch reserves [first, first+step) with one INCRBY. If Redis answers a range
// that reaches down to floor (it restarted from older data), it raises the
// counter past floor with one script and takes the range above it.
func (g *Segment) fetch(ctx context.Context, step, floor int64) (first int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, g.reg.o.fetchTimeout)
	defer cancel()
	if g.legacy != "" {
		if err := g.chooseKey(ctx); err != nil {
			return 0, err
		}
	}
	end, err := g.reg.rdb.IncrBy(ctx, g.key, step).Result()
	if err != nil {
		return 0, fmt.Errorf("redisid: reserve segment of %q: %w", g.tag, classify(g.key, err))
	}
	if end-step < floor { // the range's first ID is at or below floor
		g.rollbacks.Add(1)
		g.reg.obs.Warn("counter behind the IDs this process issued (Redis lost data?): raising it",
			"tag", g.tag, "key", g.key, "counter", end, "floor", floor)
		if end, err = raise(ctx, g.reg.rdb, g.key, floor, step); err != nil {
			return 0, fmt.Errorf("redisid: raise counter of %q: %w", g.tag, err)
		}
	}
	return end - step + 1, nil
}

// chooseKey picks the counter at the first fetch: the LegacyPrefix key if it
// exists and the DefaultPrefix key does not, so that a tag counted by an
// older coordkit goes on from its counter (and older and newer processes
// share it during a rolling upgrade), else the DefaultPrefix key.
func (g *Segment) chooseKey(ctx context.Context) error {
	p := g.reg.rdb.Pipeline()
	cur := p.Exists(ctx, g.key)
	old := p.Exists(ctx, g.legacy)
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("redisid: look up the counter of %q: %w", g.tag, err)
	}
	if cur.Val() == 0 && old.Val() == 1 {
		g.mu.Lock()
		g.key = g.legacy
		g.mu.Unlock()
	}
	g.legacy = ""
	return nil
}

// raise runs raise.lua: counter := max(counter, floor) + incr, returning it.
func raise(ctx context.Context, rdb redis.Scripter, key string, floor, incr int64) (int64, error) {
	s, err := raiseScript.Run(ctx, rdb, []string{key}, floor, incr).Text()
	if err != nil {
		return 0, classify(key, err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
	}
	return v, nil
}
