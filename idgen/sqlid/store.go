package sqlid

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/coordkit/coordkit/idgen/internal/segbuf"
)

// store is one database holding a segment table.
type store struct {
	db    *sql.DB
	d     Dialect
	k     kind
	table string
	q     segSQL
}

func newStore(db *sql.DB, d Dialect, k kind, table string) *store {
	return &store{db: db, d: d, k: k, table: table, q: newSegSQL(k, d, table)}
}

// row is what a reservation reads back: the new max_id and the row's step,
// delta and remainder (Leaf: 1 and 0).
type row struct {
	maxID      int64
	step       sql.NullInt64
	delta, rem int64
}

func (r *row) scan(sc interface{ Scan(...any) error }) error {
	return sc.Scan(&r.maxID, &r.step, &r.delta, &r.rem)
}

// fetch reserves the next segment of tag: step values (0: the row's step),
// all above floor. Leaf's convention: max_id moves from M-step to M and the
// IDs are [M-step, M-1]. Tinyid's: the IDs are the values in (M-step, M]
// congruent to remainder modulo delta. A max_id found behind floor (the
// database restored from an older backup, or rolled back by hand) is
// raised past it in the same transaction (Postgres: the next statement)
// and the segment taken above it.
func (s *store) fetch(ctx context.Context, tag string, step, floor int64) (segbuf.Range, error) {
	var r row
	var used int64
	var rolled bool
	var err error
	if s.d == MySQL {
		r, used, rolled, err = s.fetchMySQL(ctx, tag, step, floor)
	} else {
		r, used, rolled, err = s.fetchPostgres(ctx, tag, step, floor)
	}
	if err != nil {
		return segbuf.Range{}, err
	}
	rg := segbuf.Range{Step: used, Base: r.step.Int64, RolledBack: rolled, Stride: 1}
	if s.k == leafKind {
		rg.First, rg.Count, rg.Last = r.maxID-used, used, r.maxID-1
		return rg, nil
	}
	old := r.maxID - used
	first := old + 1 + mod(r.rem-(old+1), r.delta)
	if first > r.maxID { // excluded by the row check (step >= delta)
		return segbuf.Range{}, fmt.Errorf("%w: %s %q: no value in (%d, %d] is %d mod %d", ErrBadRow, s.table, tag, old, r.maxID, r.rem, r.delta)
	}
	rg.First, rg.Count, rg.Stride, rg.Last = first, (r.maxID-first)/r.delta+1, r.delta, r.maxID
	return rg, nil
}

func mod(a, m int64) int64 { return ((a % m) + m) % m }

// low is the smallest max_id from which a segment of step lies above floor
// (0: no floor yet).
func (s *store) low(floor int64) int64 {
	if s.k == leafKind {
		return floor + 1 // IDs from the old max_id on
	}
	return floor // IDs above the old max_id
}

// behind reports whether the segment reserved (new max_id m, step) reaches
// down to floor.
func (s *store) behind(m, step, floor int64) bool {
	return floor > 0 && m-step < s.low(floor)
}

func (s *store) fetchMySQL(ctx context.Context, tag string, step, floor int64) (r row, used int64, rolled bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return r, 0, false, s.wrap(tag, err)
	}
	defer tx.Rollback()
	var res sql.Result
	if step == 0 {
		res, err = tx.ExecContext(ctx, s.q.incTable, tag)
	} else {
		res, err = tx.ExecContext(ctx, s.q.incBy, step, tag)
	}
	if err != nil {
		return r, 0, false, s.wrap(tag, err)
	}
	// Rows changed: max_id always changes (step > 0), so changed = matched
	// whatever clientFoundRows says.
	if n, err := res.RowsAffected(); err != nil {
		return r, 0, false, s.wrap(tag, err)
	} else if n == 0 {
		return r, 0, false, s.diagnose(ctx, tx, tag)
	}
	// The row is locked by the UPDATE until the commit: the SELECT reads
	// the values this transaction wrote.
	if err := r.scan(tx.QueryRowContext(ctx, s.q.read, tag)); err != nil {
		return r, 0, false, s.wrap(tag, err)
	}
	used = step
	if used == 0 {
		used = r.step.Int64
	}
	if s.behind(r.maxID, used, floor) {
		rolled = true
		if _, err := tx.ExecContext(ctx, s.q.raise, s.low(floor), used, tag); err != nil {
			return r, 0, false, s.wrap(tag, err)
		}
		if err := r.scan(tx.QueryRowContext(ctx, s.q.read, tag)); err != nil {
			return r, 0, false, s.wrap(tag, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return r, 0, false, s.wrap(tag, err)
	}
	return r, used, rolled, nil
}

// fetchPostgres reserves with one UPDATE ... RETURNING: a statement is a
// transaction of its own.
func (s *store) fetchPostgres(ctx context.Context, tag string, step, floor int64) (r row, used int64, rolled bool, err error) {
	if step == 0 {
		err = r.scan(s.db.QueryRowContext(ctx, s.q.incTable, tag))
	} else {
		err = r.scan(s.db.QueryRowContext(ctx, s.q.incBy, tag, step))
	}
	if errors.Is(err, sql.ErrNoRows) {
		return r, 0, false, s.diagnose(ctx, s.db, tag)
	}
	if err != nil {
		return r, 0, false, s.wrap(tag, err)
	}
	used = step
	if used == 0 {
		used = r.step.Int64
	}
	if s.behind(r.maxID, used, floor) {
		// The range just reserved lies below IDs this process handed out:
		// it is left unused.
		rolled = true
		if err := r.scan(s.db.QueryRowContext(ctx, s.q.raise, tag, s.low(floor), used)); err != nil {
			return r, 0, false, s.wrap(tag, err)
		}
	}
	return r, used, rolled, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// diagnose says why the reservation matched no row: no row for tag
// (ErrUnknownTag), or a row that cannot hand out IDs (ErrBadRow).
func (s *store) diagnose(ctx context.Context, q querier, tag string) error {
	var r row
	err := r.scan(q.QueryRowContext(ctx, s.q.read, tag))
	if errors.Is(err, sql.ErrNoRows) {
		how := fmt.Sprintf("INSERT INTO %s (biz_tag, max_id, step) VALUES ('%s', 1, 1000)", s.table, tag)
		if s.k == tinyidKind {
			how = fmt.Sprintf("INSERT INTO %s (biz_type, begin_id, max_id, step, delta, remainder) VALUES ('%s', 0, 0, 1000, 1, 0)", s.table, tag)
		}
		return fmt.Errorf("%w: %q has no row in %s; register it with Segments.Register, or: %s", ErrUnknownTag, tag, s.table, how)
	}
	if err != nil {
		return s.wrap(tag, err)
	}
	step := "NULL"
	if r.step.Valid {
		step = fmt.Sprint(r.step.Int64)
	}
	if s.k == leafKind {
		return fmt.Errorf("%w: %s %q has max_id %d and step %s (want max_id >= 0 and step > 0); no ID handed out",
			ErrBadRow, s.table, tag, r.maxID, step)
	}
	return fmt.Errorf("%w: %s %q has max_id %d, step %s, delta %d, remainder %d (want max_id >= 0, step >= delta > 0, 0 <= remainder < delta); no ID handed out",
		ErrBadRow, s.table, tag, r.maxID, step, r.delta, r.rem)
}

// wrap turns a database error into this package's: a missing table, an
// overflow; others keep their own words, with the table and tag.
func (s *store) wrap(tag string, err error) error {
	switch {
	case isNoTable(err):
		return fmt.Errorf("%w: %s (create it with Segments.CreateTable, or:\n%s): %v", ErrNoTable, s.table, ddl(s.k, s.d, s.table), err)
	case isOutOfRange(err):
		return fmt.Errorf("%w: %s %q: %v", ErrOverflow, s.table, tag, err)
	}
	return fmt.Errorf("sqlid: reserve a segment of %q in %s: %w", tag, s.table, err)
}
