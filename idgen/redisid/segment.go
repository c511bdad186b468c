package redisid

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/internal/segbuf"
	"github.com/coordkit/coordkit/internal/observe"
)

// Segments hands out IDs for any number of tags from segments reserved in
// Redis, one counter key per tag, all through one shared client. Create it
// with NewSegments and Close it when done. Its methods are safe for
// concurrent use.
type Segments struct {
	rdb   redis.UniversalClient
	o     options
	obs   *observe.IDs
	group *segbuf.Group[*Segment]
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
	return &Segments{rdb: rdb, o: o, obs: observe.NewIDs("coordkit/redisid", o.logger, o.metrics),
		group: segbuf.NewGroup[*Segment]()}, nil
}

// For returns the generator of tag, creating it on first use (without I/O).
// The same tag always yields the same *Segment. It returns ErrEmptyTag for
// "" and ErrClosed after Close.
func (s *Segments) For(tag string) (*Segment, error) {
	if g, ok := s.group.Get(tag); ok {
		return g, nil
	}
	if tag == "" {
		return nil, ErrEmptyTag
	}
	g, ok := s.group.GetOrCreate(tag, func() *Segment {
		g := &Segment{reg: s, tag: tag, key: s.o.prefix + tag}
		if s.o.prefix == DefaultPrefix {
			g.legacy = LegacyPrefix + tag
		}
		g.buf = segbuf.NewBuffer(segbuf.Config{
			Tag: tag, Step: s.o.step, MinStep: s.o.minStep, MaxStep: s.o.maxStep,
			Target: s.o.target, TriggerPercent: 15, Now: s.o.now,
			Fetch: g.fetch, Obs: s.obs, ErrClosed: ErrClosed,
		}, s.group.Spawn)
		return g
	})
	if !ok {
		return nil, ErrClosed
	}
	return g, nil
}

// Next returns the next ID of tag; see Segment.Next.
func (s *Segments) Next(ctx context.Context, tag string) (int64, error) {
	g, ok := s.group.Get(tag)
	if !ok {
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
	s.group.Close()
	return nil
}

// Segment is the generator of one tag (Leaf's segment mode). Next draws from
// the segment in memory with one atomic add; the next segment is reserved in
// the background once 15 % of the current one is used. Obtain it from
// Segments.For. It is safe for concurrent use.
type Segment struct {
	buf *segbuf.Buffer
	reg *Segments
	tag string

	// key is the counter's key, legacy the LegacyPrefix key to use instead
	// if it exists ("" when the prefix is not DefaultPrefix, or once the
	// first fetch has chosen). Both are written by fetch only, which runs
	// one at a time; key is read by Key under mu.
	mu     sync.Mutex // protects key
	key    string
	legacy string
}

// SegmentStats are counters of one Segment since its creation.
type SegmentStats = idgen.SegmentStats

// Stats returns the generator's counters.
func (g *Segment) Stats() SegmentStats { return g.buf.Stats() }

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
func (g *Segment) Next(ctx context.Context) (int64, error) { return g.buf.Next(ctx) }

// AppendNext appends the next n IDs of the tag to dst, in increasing order,
// as n calls of Next would return them, and returns it: one atomic add per
// segment in memory instead of one per ID (coordctl serve's /ids uses it).
// It waits and fails as Next does; on an error, dst holds the IDs drawn
// before it, and they are spent. It does not allocate when dst has room.
func (g *Segment) AppendNext(ctx context.Context, dst []int64, n int) ([]int64, error) {
	if n < 0 {
		return dst, fmt.Errorf("%w: AppendNext of %d IDs", ErrInvalid, n)
	}
	return g.buf.AppendN(ctx, dst, n)
}

// fetch reserves [first, first+step) with one INCRBY. If Redis answers a range
// that reaches down to floor (it restarted from older data), it raises the
// counter past floor with one script and takes the range above it.
func (g *Segment) fetch(ctx context.Context, step, floor int64) (segbuf.Range, error) {
	ctx, cancel := context.WithTimeout(ctx, g.reg.o.fetchTimeout)
	defer cancel()
	if g.legacy != "" {
		if err := g.chooseKey(ctx); err != nil {
			return segbuf.Range{}, err
		}
	}
	end, err := g.reg.rdb.IncrBy(ctx, g.key, step).Result()
	if err != nil {
		return segbuf.Range{}, fmt.Errorf("redisid: reserve segment of %q: %w", g.tag, classify(g.key, err))
	}
	rolled := false
	if end-step < floor { // the range's first ID is at or below floor
		rolled = true
		g.reg.obs.Warn("counter behind the IDs this process issued (Redis lost data?): raising it",
			"tag", g.tag, "key", g.key, "counter", end, "floor", floor)
		if end, err = raise(ctx, g.reg.rdb, g.key, floor, step); err != nil {
			return segbuf.Range{}, fmt.Errorf("redisid: raise counter of %q: %w", g.tag, err)
		}
	}
	return segbuf.Range{First: end - step + 1, Count: step, Stride: 1, Last: end, Step: step, RolledBack: rolled}, nil
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
