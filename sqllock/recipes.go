package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// This file holds the database recipes that need no lock of this package:
// a conditional decrement, a transaction that locks its rows with SELECT
// ... FOR UPDATE, and an optimistic update on a version column.

// Execer is what Stock.Take needs: *sql.DB, *sql.Tx and *sql.Conn have it.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Stock names a column of counts, such as the tickets or the balance left,
// in the row of Table whose Key column equals an id. The zero Dialect is
// invalid; names must match [a-z_][a-z0-9_]* (Table may be schema.table).
type Stock struct {
	Dialect Dialect
	Table   string
	Key     string // the key column
	Column  string // the count column
}

// Take subtracts n (> 0) from the count of the row whose key is id, if at
// least n is left, in one statement:
//
//	UPDATE table SET column = column - n WHERE key = id AND column >= n
//
// The database's row lock makes it atomic: no two takers can spend the
// same units, with no lock of this package and one round trip. When no
// row changed, a second statement (SELECT 1 ... WHERE key = id) tells the
// two answers apart: Take returns ErrInsufficient if less than n is left,
// ErrNoRow if no row has the key. Decrementing always changes the row, so
// MySQL's count of changed rows is the count of matched ones whatever
// clientFoundRows says. It returns an error wrapping ErrInvalid for a bad
// Stock or n ≤ 0. Run it on a *sql.Tx to take from several rows at once.
func (s Stock) Take(ctx context.Context, db Execer, id any, n int64) error {
	if err := s.check(); err != nil {
		return err
	}
	if n <= 0 {
		return invalid("Take of %d (must be positive)", n)
	}
	p := placeholders(s.Dialect)
	q := "UPDATE " + s.Table + " SET " + s.Column + " = " + s.Column + " - " + p(1) +
		" WHERE " + s.Key + " = " + p(2) + " AND " + s.Column + " >= " + p(3)
	res, err := db.ExecContext(ctx, q, n, id, n)
	if err != nil {
		return fmt.Errorf("sqllock: take %d from %s.%s: %w", n, s.Table, s.Column, err)
	}
	changed, err := res.RowsAffected()
	switch {
	case err != nil:
		return fmt.Errorf("sqllock: take %d from %s.%s: %w", n, s.Table, s.Column, err)
	case changed == 0:
		var one int
		err := db.QueryRowContext(ctx, "SELECT 1 FROM "+s.Table+" WHERE "+s.Key+" = "+p(1), id).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ErrNoRow
		case err != nil:
			return fmt.Errorf("sqllock: take %d from %s.%s: not done; reading the row: %w", n, s.Table, s.Column, err)
		}
		return ErrInsufficient
	}
	return nil
}

func (s Stock) check() error {
	switch {
	case !s.Dialect.Valid():
		return invalid("Stock with dialect %v", s.Dialect)
	case !validTable(s.Table):
		return invalid("table name %q", s.Table)
	case !validColumn(s.Key) || !validColumn(s.Column):
		return invalid("column names %q, %q", s.Key, s.Column)
	}
	return nil
}

// validColumn reports whether name is [a-z_][a-z0-9_]* of at most 63 bytes.
func validColumn(name string) bool { return validTable(name) && !strings.Contains(name, ".") }

// placeholders returns the dialect's placeholder for the n-th argument.
func placeholders(d Dialect) func(n int) string {
	if d == Postgres {
		return func(n int) string { return "$" + strconv.Itoa(n) }
	}
	return func(int) string { return "?" }
}

// RetryOption configures the retries of Tx, ForUpdate and Versioned.Update.
type RetryOption func(*retryOptions)

type retryOptions struct {
	attempts int
	backoff  func(attempt int) time.Duration
	tx       *sql.TxOptions
	locking  Locking
}

// DefaultAttempts is how many times Tx, ForUpdate and Versioned.Update try
// unless WithAttempts says otherwise.
const DefaultAttempts = 10

func resolveRetry(opts []RetryOption) (retryOptions, error) {
	o := retryOptions{attempts: DefaultAttempts, backoff: defaultBackoff, locking: LockForUpdate}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	switch {
	case o.attempts < 1 || o.backoff == nil:
		return o, invalid("retry options: %d attempts, backoff %v", o.attempts, o.backoff != nil)
	case strings.TrimSpace(string(o.locking)) == "" || strings.ContainsAny(string(o.locking), ";-/"):
		return o, invalid("locking clause %q", o.locking)
	}
	return o, nil
}

// WithAttempts sets how many times a transaction or an optimistic update is
// tried in all. Default: DefaultAttempts (10).
func WithAttempts(n int) RetryOption { return func(o *retryOptions) { o.attempts = n } }

// WithBackoff sets the delay before try n+1 after try n failed (n from 1).
// Default: exponential from 2 ms, doubling to at most 200 ms, with jitter
// (between half and all of it), so that the transactions that collided do
// not collide again.
func WithBackoff(delay func(attempt int) time.Duration) RetryOption {
	return func(o *retryOptions) { o.backoff = delay }
}

// Locking is the locking clause ForUpdate appends to its query: one of the
// constants, or another clause of the database's SELECT syntax (such as
// PostgreSQL's FOR NO KEY UPDATE, or FOR UPDATE OF t), written into the
// statement as it is; never a value from outside the program.
type Locking string

// Locking clauses. MySQL 8 and PostgreSQL take all but LockInShareMode;
// MariaDB takes LockForUpdate, LockForUpdateNoWait (10.3),
// LockForUpdateSkipLocked (10.6) and LockInShareMode, not LockForShare.
const (
	// LockForUpdate waits for other transactions' locks on the rows, then
	// locks them against writers and other lockers: the default.
	LockForUpdate Locking = "FOR UPDATE"
	// LockForUpdateNoWait fails at once instead of waiting for a locked
	// row: PostgreSQL's 55P03 and MariaDB's 1205 are lock wait timeouts,
	// which ForUpdate retries (WithAttempts(1) returns them at once);
	// MySQL 8's 3572 is returned as it is.
	LockForUpdateNoWait Locking = "FOR UPDATE NOWAIT"
	// LockForUpdateSkipLocked leaves out the rows another transaction has
	// locked: a queue's consumers each take different rows.
	LockForUpdateSkipLocked Locking = "FOR UPDATE SKIP LOCKED"
	// LockForShare locks the rows against writers but not against other
	// sharers (MySQL 8, PostgreSQL).
	LockForShare Locking = "FOR SHARE"
	// LockInShareMode is LockForShare in MySQL's and MariaDB's older
	// syntax.
	LockInShareMode Locking = "LOCK IN SHARE MODE"
)

// WithLocking sets the locking clause that ForUpdate appends to its query;
// Tx and Versioned.Update ignore it. Default: LockForUpdate.
func WithLocking(l Locking) RetryOption { return func(o *retryOptions) { o.locking = l } }

// WithTxOptions sets the isolation level and read-only flag of the
// transactions of Tx and ForUpdate. Default: nil, the driver's defaults.
func WithTxOptions(opts *sql.TxOptions) RetryOption { return func(o *retryOptions) { o.tx = opts } }

// defaultBackoff is the default delay between tries (see WithBackoff).
func defaultBackoff(attempt int) time.Duration {
	d := 200 * time.Millisecond
	if attempt < 7 {
		d = 2 * time.Millisecond << max(attempt-1, 0)
	}
	return d/2 + rand.N(d/2+1)
}

// retry runs try until it succeeds, fails with an error retryable says no
// to, ctx ends, or the attempts run out (then the last error, joined with
// exhausted if not nil).
func retry(ctx context.Context, o retryOptions, retryable func(error) bool, exhausted error, try func(ctx context.Context) error) error {
	var timer *time.Timer
	var err error
	for attempt := 1; ; attempt++ {
		if err = try(ctx); err == nil || !retryable(err) {
			return err
		}
		if attempt >= o.attempts {
			break
		}
		if !sleep(ctx, &timer, o.backoff(attempt)) {
			return errors.Join(err, ctx.Err())
		}
	}
	if exhausted != nil {
		return errors.Join(exhausted, err)
	}
	return err
}

// Tx runs fn in a transaction and commits it. When fn or the commit fails
// with a deadlock, a lock wait timeout or a serialization failure
// (Retryable), the transaction is rolled back and run again, after a
// backoff, up to the attempts of WithAttempts: fn must be safe to run more
// than once (no effects outside the transaction). Any other error of fn
// rolls back and is returned as it is. The ctx given to fn is ctx.
func Tx(ctx context.Context, db *sql.DB, fn func(ctx context.Context, tx *sql.Tx) error, opts ...RetryOption) error {
	if db == nil || fn == nil {
		return invalid("Tx with a nil *sql.DB or function")
	}
	o, err := resolveRetry(opts)
	if err != nil {
		return err
	}
	return retry(ctx, o, Retryable, nil, func(ctx context.Context) error { return runTx(ctx, db, o.tx, fn) })
}

func runTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(ctx context.Context, tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// ForUpdate runs fn in a transaction after locking the rows that query
// selects: query, a SELECT without a locking clause nor a final semicolon,
// is sent with the clause of WithLocking appended on a line of its own
// (default LockForUpdate: SELECT ... FOR UPDATE); ForUpdate never looks
// into query's text, so a query that has a locking clause already gets a
// second one, a syntax error. Each row is handed to scan (nil: the rows are
// only locked), all read before fn runs. Other transactions that lock or
// change those rows wait until this one commits: the rows are the lock,
// held by the database for exactly the transaction. Deadlocks (MySQL 1213,
// PostgreSQL 40P01), lock wait timeouts (MySQL 1205, PostgreSQL 55P03) and
// serialization failures roll back and run the whole again, as Tx does;
// scan and fn must be safe to run more than once. Index the columns of
// query's WHERE: without an index InnoDB locks every row it scans (in
// effect the table). It returns an error wrapping ErrInvalid for a nil fn
// or a bad option.
func ForUpdate(ctx context.Context, db *sql.DB, query string, args []any, scan func(rows *sql.Rows) error,
	fn func(ctx context.Context, tx *sql.Tx) error, opts ...RetryOption) error {
	if fn == nil {
		return invalid("ForUpdate with a nil function")
	}
	o, err := resolveRetry(opts)
	if err != nil {
		return err
	}
	query += "\n" + string(o.locking) // a line of its own: query may end in a -- comment
	return Tx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			if scan != nil {
				if err := scan(rows); err != nil {
					rows.Close()
					return err
				}
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return fn(ctx, tx)
	}, opts...)
}

// Versioned names a table whose rows carry a version number: optimistic
// updates (compare-and-set on the version) with no lock held between the
// read and the write. The zero Dialect is invalid; names must match
// [a-z_][a-z0-9_]* (Table may be schema.table); Columns are the columns
// Update reads and writes.
type Versioned struct {
	Dialect Dialect
	Table   string
	Key     string // the key column
	Version string // an integer column, incremented by every update
	Columns []string
}

// Update reads the row whose key is id (its Columns, then its version),
// calls fn with a function that scans those values (as Row.Scan does, in
// the order of Columns), and writes the values fn returns, in the same
// order, with
//
//	UPDATE table SET columns = values, version = version + 1 WHERE key = id AND version = read
//
// If another writer changed the version in between, no row changes: Update
// waits (WithBackoff) and starts again from the read, up to the attempts of
// WithAttempts, then returns ErrConflict. It returns the new version; the
// error of fn, as it is (not retried); sql.ErrNoRows (wrapped) if no row
// has the key; an error wrapping ErrInvalid for a bad Versioned. fn may run
// several times and must not have effects outside its result. Under heavy
// contention on one row, retries cost more than a lock: measure, or use
// Stock.Take or ForUpdate.
func (v Versioned) Update(ctx context.Context, db *sql.DB, id any,
	fn func(ctx context.Context, scan func(dest ...any) error) ([]any, error), opts ...RetryOption) (int64, error) {
	if err := v.check(); err != nil {
		return 0, err
	}
	if db == nil || fn == nil {
		return 0, invalid("Versioned.Update with a nil *sql.DB or function")
	}
	o, err := resolveRetry(opts)
	if err != nil {
		return 0, err
	}
	p := placeholders(v.Dialect)
	read := "SELECT " + strings.Join(v.Columns, ", ") + ", " + v.Version + " FROM " + v.Table + " WHERE " + v.Key + " = " + p(1)
	sets := make([]string, len(v.Columns))
	for i, c := range v.Columns {
		sets[i] = c + " = " + p(i+1)
	}
	n := len(v.Columns)
	write := "UPDATE " + v.Table + " SET " + strings.Join(sets, ", ") + ", " + v.Version + " = " + v.Version + " + 1" +
		" WHERE " + v.Key + " = " + p(n+1) + " AND " + v.Version + " = " + p(n+2)
	var version int64
	errStale := errors.New("version changed")
	err = retry(ctx, o, func(err error) bool { return err == errStale || Retryable(err) }, ErrConflict, func(ctx context.Context) error {
		row, err := db.QueryContext(ctx, read, id)
		if err != nil {
			return err
		}
		if !row.Next() {
			row.Close()
			if err := row.Err(); err != nil {
				return err
			}
			return fmt.Errorf("sqllock: %s where %s = %v: %w", v.Table, v.Key, id, sql.ErrNoRows)
		}
		var read int64
		scanned := false
		scan := func(dest ...any) error {
			if len(dest) != n {
				return invalid("scan of %d values for %d columns", len(dest), n)
			}
			scanned = true
			return row.Scan(append(dest, &read)...)
		}
		values, ferr := fn(ctx, scan)
		if !scanned && ferr == nil { // fn did not read: read the version anyway
			vals := make([]any, n)
			for i := range vals {
				vals[i] = new(any)
			}
			ferr = row.Scan(append(vals, &read)...)
		}
		row.Close()
		if ferr != nil {
			return ferr
		}
		if len(values) != n {
			return invalid("%d values for %d columns", len(values), n)
		}
		res, err := db.ExecContext(ctx, write, append(values, id, read)...)
		if err != nil {
			return err
		}
		changed, err := res.RowsAffected()
		switch {
		case err != nil:
			return err
		case changed == 0:
			return errStale
		}
		version = read + 1
		return nil
	})
	if errors.Is(err, ErrConflict) {
		return 0, ErrConflict
	}
	return version, err
}

func (v Versioned) check() error {
	switch {
	case !v.Dialect.Valid():
		return invalid("Versioned with dialect %v", v.Dialect)
	case !validTable(v.Table):
		return invalid("table name %q", v.Table)
	case !validColumn(v.Key) || !validColumn(v.Version) || len(v.Columns) == 0:
		return invalid("columns %q, %q, %q", v.Key, v.Version, v.Columns)
	}
	for _, c := range v.Columns {
		if !validColumn(c) {
			return invalid("column name %q", c)
		}
	}
	return nil
}
