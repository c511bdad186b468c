package sqlid

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/internal/segbuf"
	"github.com/coordkit/coordkit/internal/observe"
)

// Generator is what every generator of this package implements: Next
// returns the next ID. Implementations are safe for concurrent use.
type Generator interface {
	Next(ctx context.Context) (int64, error)
}

var (
	_ Generator = (*Segment)(nil)
	_ Generator = (*Tickets)(nil)
)

// Store is one database of a Tinyid generator.
type Store struct {
	DB      *sql.DB
	Dialect Dialect
}

// Segments hands out IDs for any number of tags from segments reserved in
// a table: Leaf's leaf_alloc (NewLeaf) or Tinyid's tiny_id_info in one or
// several databases (NewTinyid). Create it, Close it when done. Its methods
// are safe for concurrent use.
type Segments struct {
	stores []*store
	kind   kind
	table  string
	o      options
	obs    *observe.IDs
	group  *segbuf.Group[*Segment]
}

// NewLeaf returns the segment generators of Leaf's table leaf_alloc (or
// WithTable's) in db. It does no I/O: each tag reserves its first segment on
// its first Next. It returns an error matching ErrInvalid for a nil db, an
// invalid dialect or invalid options.
func NewLeaf(db *sql.DB, d Dialect, opts ...Option) (*Segments, error) {
	return newSegments(leafKind, LeafTable, []Store{{db, d}}, opts)
}

// NewTinyid returns the segment generators of Tinyid's table tiny_id_info
// (or WithTable's) in one or more databases. With several, each database's
// row of a tag hands out only the IDs congruent to its remainder modulo its
// delta (Register sets database i of N to remainder i, delta N), so no two
// databases issue the same ID, and a tag is served while any database is
// up. It does no I/O. It returns an error matching ErrInvalid for no
// stores, a nil DB, an invalid dialect or invalid options.
func NewTinyid(stores []Store, opts ...Option) (*Segments, error) {
	return newSegments(tinyidKind, TinyidTable, stores, opts)
}

func newSegments(k kind, table string, stores []Store, opts []Option) (*Segments, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.table != "" {
		table = o.table
	}
	if len(stores) == 0 {
		return nil, fmt.Errorf("%w: no database", ErrBadOption)
	}
	s := &Segments{kind: k, table: table, o: o, group: segbuf.NewGroup[*Segment]()}
	for i, st := range stores {
		switch {
		case st.DB == nil:
			return nil, fmt.Errorf("%w: database %d: nil *sql.DB", ErrBadOption, i)
		case !st.Dialect.Valid():
			return nil, fmt.Errorf("%w: database %d: %v", ErrBadOption, i, st.Dialect)
		}
		s.stores = append(s.stores, newStore(st.DB, st.Dialect, k, table))
	}
	component := "coordkit/sqlid"
	s.obs = observe.NewIDs(component, o.logger, o.metrics)
	return s, nil
}

// Table returns the name of the table.
func (s *Segments) Table() string { return s.table }

// CreateTable creates the table in every database unless it exists
// (CREATE TABLE IF NOT EXISTS, with Leaf's or Tinyid's columns; see the
// package documentation). It returns the failures joined, one *StoreError
// per database.
func (s *Segments) CreateTable(ctx context.Context) error {
	var errs []error
	for i, st := range s.stores {
		if _, err := st.db.ExecContext(ctx, ddl(st.k, st.d, st.table)); err != nil {
			errs = append(errs, &StoreError{i, fmt.Errorf("create %s: %w", st.table, err)})
		}
	}
	return errors.Join(errs...)
}

// Register adds the row of tag, as Leaf's and Tinyid's operators INSERT it:
// the IDs start after maxID (Leaf: the first ID is maxID itself, as in Leaf;
// Tinyid: the first is above maxID) and the row's step is step, the lower
// bound of the adaptive step. For Tinyid over N databases, database i gets
// delta N and remainder i, so the series never meet; step must be at least
// N. It returns ErrEmptyTag, ErrBadTag or ErrBadStep (wrapped) for invalid
// arguments, and the failures of the databases joined (one *StoreError
// each, ErrTagExists if the tag has a row there).
func (s *Segments) Register(ctx context.Context, tag string, maxID int64, step int, description string) error {
	if err := s.checkTag(tag); err != nil {
		return err
	}
	n := len(s.stores)
	switch {
	case maxID < 0:
		return fmt.Errorf("%w: max_id %d is negative", ErrBadStep, maxID)
	case step <= 0 || step > 1<<31-1:
		return fmt.Errorf("%w: step %d (want 1..2147483647)", ErrBadStep, step)
	case step < n:
		return fmt.Errorf("%w: step %d is below the delta %d of %d databases", ErrBadStep, step, n, n)
	case utf8.RuneCountInString(description) > 256:
		return fmt.Errorf("%w: description longer than 256 characters", ErrBadOption)
	}
	var errs []error
	for i, st := range s.stores {
		var err error
		if s.kind == leafKind {
			_, err = st.db.ExecContext(ctx, st.q.register, tag, maxID, step, sql.NullString{String: description, Valid: description != ""})
		} else if st.d == MySQL {
			_, err = st.db.ExecContext(ctx, st.q.register, tag, maxID, maxID, step, n, i)
		} else {
			_, err = st.db.ExecContext(ctx, st.q.register, tag, maxID, step, n, i)
		}
		switch {
		case err == nil:
		case isDupKey(err):
			errs = append(errs, &StoreError{i, fmt.Errorf("%w: %q in %s", ErrTagExists, tag, st.table)})
		case isNoTable(err):
			errs = append(errs, &StoreError{i, st.wrap(tag, err)})
		default:
			errs = append(errs, &StoreError{i, fmt.Errorf("register %q in %s: %w", tag, st.table, err)})
		}
	}
	if n == 1 && len(errs) == 1 {
		return errs[0].(*StoreError).Err
	}
	return errors.Join(errs...)
}

func (s *Segments) checkTag(tag string) error {
	switch {
	case tag == "":
		return ErrEmptyTag
	case utf8.RuneCountInString(tag) > s.kind.maxTag():
		return fmt.Errorf("%w: %q is longer than %s.%s holds (%d characters)", ErrBadTag, tag, s.table, s.kind.tagColumn(), s.kind.maxTag())
	case !utf8.ValidString(tag):
		return fmt.Errorf("%w: %q is not UTF-8", ErrBadTag, tag)
	}
	return nil
}

// For returns the generator of tag, creating it on first use (without
// I/O). The same tag always yields the same *Segment. It returns
// ErrEmptyTag, ErrBadTag (wrapped), or ErrClosed after Close. A tag the
// table does not know is found out by the first Next (ErrUnknownTag).
func (s *Segments) For(tag string) (*Segment, error) {
	if g, ok := s.group.Get(tag); ok {
		return g, nil
	}
	if err := s.checkTag(tag); err != nil {
		return nil, err
	}
	g, ok := s.group.GetOrCreate(tag, func() *Segment { return s.newSegment(tag) })
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
// segments already in memory are still served; once they run out, Next
// returns ErrClosed. It does not close the databases. Close is idempotent
// and always returns nil.
func (s *Segments) Close() error {
	s.group.Close()
	return nil
}

// Segment is the generator of one tag: one double buffer per database.
// Obtain it from Segments.For. It is safe for concurrent use.
type Segment struct {
	tag  string
	bufs []*segbuf.Buffer
	cur  atomic.Int32 // the database served from (several databases)

	mu     sync.Mutex // protects series
	series []series   // per database: the delta and remainder its rows said
}

// series is the residue class a database's row hands out.
type series struct {
	known      bool
	delta, rem int64
}

func (s *Segments) newSegment(tag string) *Segment {
	g := &Segment{tag: tag, series: make([]series, len(s.stores))}
	for i, st := range s.stores {
		fetch := func(ctx context.Context, step, floor int64) (segbuf.Range, error) {
			fctx, cancel := context.WithTimeout(ctx, s.o.fetchTimeout)
			defer cancel()
			r, err := st.fetch(fctx, tag, step, floor)
			if err != nil && ctx.Err() == nil && fctx.Err() != nil {
				err = fmt.Errorf("%w (no answer within the fetch timeout, %v)", err, s.o.fetchTimeout)
			}
			if err == nil && r.RolledBack {
				s.obs.Warn("max_id behind the IDs this process issued (database restored from an older backup?): raised it",
					"tag", tag, "table", st.table, "floor", floor)
			}
			if err == nil && len(s.stores) > 1 {
				err = g.checkSeries(i, r)
			}
			if err != nil && len(s.stores) > 1 {
				err = &StoreError{i, err}
			}
			return r, err
		}
		g.bufs = append(g.bufs, segbuf.NewBuffer(segbuf.Config{
			Tag: tag, MaxStep: s.o.maxStep, FollowBase: true, MinStep: 1,
			Target: s.o.target, TriggerPercent: 10, RetryDelay: s.o.retryDelay, Refill: len(s.stores) > 1, Retryable: transientFetchErr,
			Now: s.o.now, Fetch: fetch, Obs: s.obs, ErrClosed: ErrClosed,
		}, s.group.Spawn))
	}
	return g
}

// transientFetchErr reports whether a failed fetch may succeed later by
// itself (the database down or slow), and not by an operator's hand: a
// missing row or table, a bad row, an overflow or a conflict of residues
// (whose fetch already advanced max_id: retried in the background it would
// burn a step each time).
func transientFetchErr(err error) bool {
	for _, e := range []error{ErrUnknownTag, ErrNoTable, ErrBadRow, ErrOverflow, ErrConflict} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}

// checkSeries records the residue class of database i's segment r and
// fails if it meets another database's: x ≡ a (mod m) and x ≡ b (mod n)
// have a common solution iff a ≡ b (mod gcd(m, n)).
func (g *Segment) checkSeries(i int, r segbuf.Range) error {
	d, rem := r.Stride, mod(r.First, r.Stride)
	g.mu.Lock()
	defer g.mu.Unlock()
	for j, o := range g.series {
		if j == i || !o.known {
			continue
		}
		if mod(rem-o.rem, gcd(d, o.delta)) == 0 {
			return fmt.Errorf("%w: tag %q: database %d has delta %d remainder %d, database %d delta %d remainder %d; give database i of N delta N and remainder i",
				ErrConflict, g.tag, i, d, rem, j, o.delta, o.rem)
		}
	}
	g.series[i] = series{known: true, delta: d, rem: rem}
	return nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Tag returns the generator's tag.
func (g *Segment) Tag() string { return g.tag }

// Stats returns the generator's counters, summed over its databases (Step
// and Ready: of the database served from; High: the highest).
func (g *Segment) Stats() idgen.SegmentStats {
	if len(g.bufs) == 1 {
		return g.bufs[0].Stats()
	}
	var t idgen.SegmentStats
	cur := int(g.cur.Load())
	for i, b := range g.bufs {
		s := b.Stats()
		t.Fetches += s.Fetches
		t.Waits += s.Waits
		t.Rollbacks += s.Rollbacks
		t.High = max(t.High, s.High)
		if i == cur {
			t.Step, t.Ready = s.Step, s.Ready
		}
	}
	return t
}

// StoreStats returns the counters of the generator's double buffer on
// database i (the index in NewTinyid's slice), and false for an i out of
// range.
func (g *Segment) StoreStats(i int) (idgen.SegmentStats, bool) {
	if i < 0 || i >= len(g.bufs) {
		return idgen.SegmentStats{}, false
	}
	return g.bufs[i].Stats(), true
}

// Next returns the next ID of the tag. In steady state it does no I/O and
// does not allocate: one atomic add on the segment in memory, the next
// segment reserved in the background once 10 % of the current one is used
// (Leaf's double buffer).
//
// With one database, IDs are unique across every process drawing from the
// same row and strictly increasing per generator; Next waits for the
// database only when the next segment is not ready yet (the first call, or
// a draw rate that outran the prefetch): then it returns ctx's error if ctx
// ends first, the fetch's error (the database down, ErrUnknownTag,
// ErrNoTable, ErrBadRow, ErrOverflow), or ErrClosed after Segments.Close.
//
// With several databases, Next serves from one database while it has IDs
// in memory and moves to the next database that has some when it runs out
// (each database's buffer refills in the background, and a database whose
// fetch failed (the database down) is tried again in the background,
// WithRetryDelay after each failure, until it answers, so that it has IDs in
// memory again once it is back). Only when no database
// has an ID in memory does it wait, for each database in turn; if none can
// serve it returns their errors joined, one *StoreError each. IDs are
// unique, but not increasing across a move from one database to another.
func (g *Segment) Next(ctx context.Context) (int64, error) {
	if len(g.bufs) == 1 {
		return g.bufs[0].Next(ctx)
	}
	n := len(g.bufs)
	cur := int(g.cur.Load())
	for k := range n {
		j := (cur + k) % n
		if id, ok := g.bufs[j].TryNext(); ok {
			if k > 0 {
				g.cur.Store(int32(j))
			}
			return id, nil
		}
	}
	var errs []error
	for k := range n {
		j := (cur + k) % n
		id, err := g.bufs[j].Next(ctx)
		if err == nil {
			g.cur.Store(int32(j))
			return id, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if errors.Is(err, ErrClosed) {
			return 0, ErrClosed
		}
		errs = append(errs, err)
	}
	return 0, errors.Join(errs...)
}
