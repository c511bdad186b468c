package txn

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/coordkit/coordkit/internal/sqldb"
	"github.com/coordkit/coordkit/sqllock"
)

// Barrier is the sub-transaction barrier of one resource database: a
// table whose rows (gid, branch, op, barrier id) a branch func inserts in
// its own local transaction, beside its business writes, so that the
// database itself knows which ops of which branches have run. It gives
// every Saga and TCC branch func that works in one local SQL transaction:
//
//   - idempotency: an op called again (a retry after a lost reply, a
//     recovery, a deposed driver) finds its row and does nothing;
//   - null compensation: a compensation or Cancel whose forward op never
//     committed does nothing, and leaves the forward op's row behind;
//   - hanging prevention: a forward op (action, Try) arriving after its
//     compensation or Cancel finds that row and does nothing.
//
// A Barrier is safe for concurrent use; it holds no connection.
type Barrier struct {
	d      sqllock.Dialect
	table  string
	insert string
}

// NewBarrier returns the Barrier of a resource database of dialect d, with
// its rows in table ("" for DefaultBarrierTable). It does no I/O; it
// returns an error wrapping ErrInvalid for an unknown dialect or a bad
// table name.
func NewBarrier(d sqllock.Dialect, table string) (*Barrier, error) {
	if !d.Valid() {
		return nil, invalid("unknown dialect %v", d)
	}
	if table == "" {
		table = DefaultBarrierTable
	}
	if !sqldb.ValidTable(table) {
		return nil, invalid("barrier table %q: want [a-z_][a-z0-9_]* (or schema.table)", table)
	}
	b := &Barrier{d: d, table: table}
	// INSERT IGNORE answers 0 rows for a duplicate whatever the DSN's
	// clientFoundRows says (ON DUPLICATE KEY UPDATE would count a found
	// row with it); the values are the package's own, so the other
	// errors it turns into warnings cannot arise.
	b.insert = "INSERT IGNORE INTO " + table + " (gid, branch, op, barrier_id, reason) VALUES (?, ?, ?, ?, ?)"
	if d == sqllock.Postgres {
		b.insert = "INSERT INTO " + table + " (gid, branch, op, barrier_id, reason) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING"
	}
	return b, nil
}

// CreateTable creates the barrier's table in db if it does not exist,
// with the DDL of the package documentation.
func (b *Barrier) CreateTable(ctx context.Context, db *sql.DB) error {
	if db == nil {
		return invalid("nil *sql.DB")
	}
	if _, err := db.ExecContext(ctx, barrierDDL(b.d, b.table)); err != nil {
		return fmt.Errorf("txn: creating the barrier table %s: %w", b.table, err)
	}
	return nil
}

// Call runs fn in tx, the caller's local transaction on the resource
// database, behind the barrier of br (the Branch the branch func was
// called with) and barrier id 0. See CallID.
func (b *Barrier) Call(ctx context.Context, tx *sql.Tx, br Branch, fn func(tx *sql.Tx) error) (ran bool, err error) {
	return b.CallID(ctx, tx, br, 0, fn)
}

// CallID runs fn in tx behind the barrier of (br.GID, br.ID, br.Op, id);
// id tells apart several barriers in one op of one branch. It inserts the
// op's row, and for a compensation or Cancel the row of the forward op it
// undoes (both, whatever it finds), then:
//
//   - an undo op whose forward op's row it inserted (the forward op never
//     committed): null compensation, fn is not called;
//   - an op whose row was already there (a repeat, or a forward op after
//     its undo): fn is not called;
//   - otherwise fn is called with tx.
//
// It reports whether fn ran. The caller commits tx when Call returns nil
// (the barrier's rows included: a commit is what marks the op done) and
// rolls it back otherwise; fn's error is returned as is. A concurrent call
// of the same op waits on the first one's row lock until it commits or
// rolls back. An error wraps ErrInvalid for a nil tx or fn, a gid <= 0 or
// an unknown op.
func (b *Barrier) CallID(ctx context.Context, tx *sql.Tx, br Branch, id int, fn func(tx *sql.Tx) error) (ran bool, err error) {
	if tx == nil || fn == nil {
		return false, invalid("nil *sql.Tx or func")
	}
	if br.GID <= 0 || br.ID < 0 || !br.Op.valid() {
		return false, invalid("barrier of gid %d, branch %d, op %q", br.GID, br.ID, br.Op)
	}
	// Both rows are inserted before anything is decided: a null
	// compensation must leave its own row too, or a repeat of it would
	// find the forward op's row (its own doing) and run.
	var origin int64
	if o := br.Op.origin(); o != "" {
		if origin, err = b.put(ctx, tx, br.GID, br.ID, o, id, br.Op); err != nil {
			return false, err
		}
	}
	n, err := b.put(ctx, tx, br.GID, br.ID, br.Op, id, br.Op)
	if err != nil {
		return false, err
	}
	if origin > 0 || n == 0 {
		// A null compensation (its row now blocks a late forward op), a
		// repeat, or a forward op after its undo.
		return false, nil
	}
	return true, fn(tx)
}

// put inserts a barrier row unless it exists, and returns how many rows it
// inserted.
func (b *Barrier) put(ctx context.Context, tx *sql.Tx, gid int64, branch int, op Op, id int, reason Op) (int64, error) {
	res, err := tx.ExecContext(ctx, b.insert, gid, branch, string(op), id, string(reason))
	if err != nil {
		return 0, fmt.Errorf("txn: barrier of gid %d branch %d %s: %w", gid, branch, op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("txn: barrier of gid %d branch %d %s: %w", gid, branch, op, err)
	}
	return n, nil
}

// Do runs fn behind the barrier of br (barrier id 0) in a new local
// transaction on db, and commits it if fn returns nil, else rolls it back.
// It reports whether fn ran and committed. An error from the commit leaves
// the outcome unknown: the op is then called again by its driver, and the
// barrier answers for it.
func (b *Barrier) Do(ctx context.Context, db *sql.DB, br Branch, fn func(tx *sql.Tx) error) (ran bool, err error) {
	if db == nil {
		return false, invalid("nil *sql.DB")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("txn: barrier of gid %d branch %d %s: %w", br.GID, br.ID, br.Op, err)
	}
	defer tx.Rollback()
	ran, err = b.Call(ctx, tx, br, fn)
	if err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("txn: barrier of gid %d branch %d %s: commit: %w", br.GID, br.ID, br.Op, err)
	}
	return ran, nil
}
