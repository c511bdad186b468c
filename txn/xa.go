package txn

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/coordkit/coordkit/internal/sqldb"
	"github.com/coordkit/coordkit/sqllock"
)

// ModeXA: two-phase commit over the resource databases' own prepared
// transactions.
const ModeXA Mode = "xa"

// Execer is what an XA branch's work gets: the connection its XA
// transaction is open on (a *sql.Conn). The work must not commit, roll
// back or begin a transaction on it.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// XABranch is one branch of an XA transaction: the resource database it
// works in (MySQL 8 or MariaDB 10.5 or later with InnoDB; PostgreSQL with
// max_prepared_transactions > 0), and the work done there inside the
// branch's XA transaction. An error from Work is the branch's "no" vote:
// the transaction rolls back (no retry: the work's writes are gone).
type XABranch struct {
	DB      *sql.DB
	Dialect sqllock.Dialect
	Work    func(ctx context.Context, ex Execer, b Branch) error
}

// XAPrefix starts the XA transaction id of every branch:
// XAPrefix + gid + "_" + branch. Recover looks for prepared transactions
// with it (XA RECOVER, pg_prepared_xacts).
const XAPrefix = "coordkit_"

func xid(gid int64, branch int) string {
	return XAPrefix + strconv.FormatInt(gid, 10) + "_" + strconv.Itoa(branch)
}

// parseXID returns the gid and branch of one of the package's XA ids.
func parseXID(s string) (gid int64, branch int, ok bool) {
	rest, found := strings.CutPrefix(s, XAPrefix)
	if !found {
		return 0, 0, false
	}
	g, b, found := strings.Cut(rest, "_")
	if !found {
		return 0, 0, false
	}
	gid, err1 := strconv.ParseInt(g, 10, 64)
	br, err2 := strconv.Atoi(b)
	return gid, br, err1 == nil && err2 == nil && gid > 0 && br >= 0
}

// Error codes of an XA id the database does not know: committed or
// rolled back already (or never prepared).
const (
	mysqlXAERNota = 1397 // ER_XAER_NOTA
	pgUndefObject = "42704"
)

func unknownXID(err error) bool {
	n, s := sqldb.Codes(err)
	return n == mysqlXAERNota || s == pgUndefObject
}

// RegisterXA registers an XA transaction called name with its branches.
// It returns an error wrapping ErrInvalid for a bad name, no branches, a
// nil DB or Work, an unknown dialect or a name already registered.
func (m *Manager) RegisterXA(name string, branches ...XABranch) error {
	d := def{mode: ModeXA}
	for i, b := range branches {
		if b.DB == nil || b.Work == nil {
			return invalid("xa %q: branch %d has a nil DB or Work", name, i)
		}
		if !b.Dialect.Valid() {
			return invalid("xa %q: branch %d: unknown dialect %v", name, i, b.Dialect)
		}
		d.forward = append(d.forward, nil) // counted; the driver uses xa
		d.xa = append(d.xa, b)
	}
	return m.register(name, d)
}

// closeConn returns c to its pool, or closes it for good when bad (it may
// hold an open or, on MySQL, a prepared XA transaction: the server keeps a
// prepared one after the session ends, for XA RECOVER).
func closeConn(c *sql.Conn, bad bool) {
	if bad {
		_ = c.Raw(func(any) error { return sqldriver.ErrBadConn })
	}
	_ = c.Close()
}

// xaPrepare runs phase one of branch i: opens its XA transaction, runs
// the work, prepares. On MySQL the connection stays pinned in d.conns
// until phase two (a prepared XA transaction belongs to its session until
// the session ends).
func (d *driver) xaPrepare(ctx context.Context, i int) error {
	b := d.def.xa[i]
	x := xid(d.gid, i)
	c, err := b.DB.Conn(ctx)
	if err != nil {
		return fmt.Errorf("txn: gid %d: branch %d: %w", d.gid, i, err)
	}
	br := Branch{GID: d.gid, ID: i, Op: OpTry, Payload: d.payload}
	if b.Dialect == sqllock.MySQL {
		if _, err := c.ExecContext(ctx, "XA START '"+x+"'"); err != nil {
			closeConn(c, true)
			return fmt.Errorf("txn: gid %d: branch %d: XA START: %w", d.gid, i, err)
		}
		if err := b.Work(ctx, c, br); err != nil {
			_, e1 := c.ExecContext(ctx, "XA END '"+x+"'")
			_, e2 := c.ExecContext(ctx, "XA ROLLBACK '"+x+"'")
			closeConn(c, e1 != nil || e2 != nil)
			return err
		}
		if _, err := c.ExecContext(ctx, "XA END '"+x+"'"); err != nil {
			closeConn(c, true)
			return fmt.Errorf("txn: gid %d: branch %d: XA END: %w", d.gid, i, err)
		}
		if _, err := c.ExecContext(ctx, "XA PREPARE '"+x+"'"); err != nil {
			closeConn(c, true)
			return fmt.Errorf("txn: gid %d: branch %d: XA PREPARE: %w", d.gid, i, err)
		}
		d.conns[i] = c
		return nil
	}
	if _, err := c.ExecContext(ctx, "BEGIN"); err != nil {
		closeConn(c, true)
		return fmt.Errorf("txn: gid %d: branch %d: BEGIN: %w", d.gid, i, err)
	}
	if err := b.Work(ctx, c, br); err != nil {
		_, e := c.ExecContext(ctx, "ROLLBACK")
		closeConn(c, e != nil)
		return err
	}
	if _, err := c.ExecContext(ctx, "PREPARE TRANSACTION '"+x+"'"); err != nil {
		closeConn(c, true)
		return fmt.Errorf("txn: gid %d: branch %d: PREPARE TRANSACTION: %w", d.gid, i, err)
	}
	// A prepared transaction is detached from its session: the
	// connection goes back to the pool.
	closeConn(c, false)
	// PREPARE TRANSACTION in a transaction aborted by an error (one the
	// work did not return) rolls back and answers no error: without this
	// check the branch would count as prepared, and phase two would take
	// the unknown id for committed.
	ok, err := isPrepared(ctx, b.DB, b.Dialect, x)
	if err != nil {
		return fmt.Errorf("txn: gid %d: branch %d: %w", d.gid, i, err)
	}
	if !ok {
		return fmt.Errorf("txn: gid %d: branch %d: PREPARE TRANSACTION prepared nothing: the transaction had been aborted by an error in the work", d.gid, i)
	}
	return nil
}

// xaFinish commits (commit) or rolls back branch i's prepared transaction,
// on its pinned connection if this driver prepared it, else on any. An id
// the database does not know was finished already (a lost reply), or, for
// a rollback, never prepared: done.
func (d *driver) xaFinish(ctx context.Context, i int, commit bool) error {
	b := d.def.xa[i]
	stmt := xaFinishSQL(b.Dialect, xid(d.gid, i), commit)
	var err error
	if c := d.conns[i]; c != nil {
		_, err = c.ExecContext(ctx, stmt)
		if err == nil || unknownXID(err) {
			delete(d.conns, i)
			closeConn(c, false)
			return nil
		}
		delete(d.conns, i)
		closeConn(c, true) // the server keeps the prepared transaction
		return fmt.Errorf("txn: gid %d: branch %d: %s: %w", d.gid, i, stmt, err)
	}
	if _, err = b.DB.ExecContext(ctx, stmt); err != nil && !unknownXID(err) {
		return fmt.Errorf("txn: gid %d: branch %d: %s: %w", d.gid, i, stmt, err)
	} else if err != nil && b.Dialect == sqllock.MySQL {
		// MySQL and MariaDB answer XAER_NOTA also for a branch prepared
		// on a session still open (a deposed driver's), which XA
		// RECOVER lists: not finished, try again later.
		held, lerr := isPrepared(ctx, b.DB, b.Dialect, xid(d.gid, i))
		if lerr != nil {
			return fmt.Errorf("txn: gid %d: branch %d: %w", d.gid, i, lerr)
		}
		if held {
			return fmt.Errorf("txn: gid %d: branch %d: %s: prepared on another session, still open: %w", d.gid, i, stmt, err)
		}
	}
	return nil
}

// isPrepared reports whether x is among db's prepared XA transactions.
func isPrepared(ctx context.Context, db *sql.DB, d sqllock.Dialect, x string) (bool, error) {
	xids, err := listPrepared(ctx, db, d)
	if err != nil {
		return false, err
	}
	for _, p := range xids {
		if p == x {
			return true, nil
		}
	}
	return false, nil
}

func xaFinishSQL(d sqllock.Dialect, x string, commit bool) string {
	switch {
	case d == sqllock.MySQL && commit:
		return "XA COMMIT '" + x + "'"
	case d == sqllock.MySQL:
		return "XA ROLLBACK '" + x + "'"
	case commit:
		return "COMMIT PREPARED '" + x + "'"
	}
	return "ROLLBACK PREPARED '" + x + "'"
}

// undoPrepared rolls back branch last, which this driver has just
// prepared, and the branches it prepared and still holds, once it finds
// itself deposed in phase one. Its successor found no decision and rolls
// the transaction back, but it cannot reach these: last was not prepared
// yet when it tried, and on MySQL a branch prepared on a session still
// open is unknown to every other session (the successor retries it until
// this session lets go). A failure here leaves the branch to Recover's
// in-doubt pass.
func (d *driver) undoPrepared(ctx context.Context, last int) {
	ctx = context.WithoutCancel(ctx)
	if err := d.xaFinish(ctx, last, false); err != nil {
		d.m.o.logger.Warn("txn: rolling back a deposed driver's prepared branch", "gid", d.gid, "branch", last, "err", err)
	}
	for i := range d.conns {
		if err := d.xaFinish(ctx, i, false); err != nil {
			d.m.o.logger.Warn("txn: rolling back a deposed driver's prepared branch", "gid", d.gid, "branch", i, "err", err)
		}
	}
}

// xaSteps drives an XA transaction (the driver's steps for ModeXA).
func (d *driver) xaSteps(ctx context.Context) error {
	if d.state == StateRunning && d.recovered {
		// No decision was logged: presumed abort.
		if err := d.write(ctx, StateRollingBack, "recovered: phase one's driver was lost (presumed abort)", -1, ""); err != nil {
			return err
		}
	}
	if d.state == StateRunning {
		for i := range d.def.xa {
			if err := d.write(ctx, "", "", i, branchStarted); err != nil {
				return err
			}
			if err := d.xaPrepare(ctx, i); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				d.cause = &refusal{branch: i, op: OpTry, err: err}
				if err := d.write(ctx, StateRollingBack, d.cause.Error(), -1, ""); err != nil {
					return err
				}
				break
			}
			d.hook(i, "prepared")
			if err := d.write(ctx, "", "", i, branchDone); err != nil {
				if errors.Is(err, ErrDeposed) {
					d.undoPrepared(ctx, i)
				}
				return err
			}
		}
		if d.state == StateRunning {
			// The decision, logged before phase two.
			if err := d.write(ctx, StateConfirming, "", -1, ""); err != nil {
				return err
			}
		}
	}
	if d.state == StateConfirming {
		for i := range d.def.xa {
			if d.branches[i] != branchDone {
				continue
			}
			err := d.call(ctx, i, OpConfirm, func(ctx context.Context, _ Branch) error { return d.xaFinish(ctx, i, true) })
			var s *stuckError
			if errors.As(err, &s) {
				return d.stuck(ctx, s)
			} else if err != nil {
				return err
			}
			d.hook(i, "committed")
			if err := d.write(ctx, "", "", i, branchConfirmed); err != nil {
				return err
			}
		}
		if err := d.write(ctx, StateCommitted, "", -1, ""); err != nil {
			return err
		}
	}
	if d.state == StateRollingBack {
		rollback := func(i int) Func {
			return func(ctx context.Context, _ Branch) error { return d.xaFinish(ctx, i, false) }
		}
		if err := d.undoAll(ctx, len(d.def.xa), OpCancel, rollback); err != nil {
			return err
		}
	}
	return d.result()
}

// testHook, when set (by the package's tests), is called after each XA
// branch is prepared or committed.
var testHook func(gid int64, branch int, step string)

func (d *driver) hook(i int, step string) {
	if testHook != nil {
		testHook(d.gid, i, step)
	}
}

// resolveInDoubt finishes the prepared XA transactions of the package
// (XAPrefix) left in the resource databases of the registered XA types
// whose global transaction the log says is committed (commit them) or
// aborted (roll them back): a deposed driver's late prepare, or a
// prepare whose driver died. Others are left alone: their driver, or a
// person for a stuck one, decides.
func (m *Manager) resolveInDoubt(ctx context.Context) (int, error) {
	m.mu.Lock()
	type res struct {
		db *sql.DB
		d  sqllock.Dialect
	}
	seen := map[*sql.DB]bool{}
	var dbs []res
	for _, d := range m.types {
		for _, b := range d.xa {
			if !seen[b.DB] {
				seen[b.DB] = true
				dbs = append(dbs, res{b.DB, b.Dialect})
			}
		}
	}
	m.mu.Unlock()
	n := 0
	var errs []error
	for _, r := range dbs {
		xids, err := listPrepared(ctx, r.db, r.d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, x := range xids {
			gid, _, ok := parseXID(x)
			if !ok {
				continue
			}
			var state string
			err := m.db.QueryRowContext(ctx, m.s.q("SELECT state FROM {g} WHERE gid = ?"), gid).Scan(&state)
			if errors.Is(err, sql.ErrNoRows) {
				continue // another log's
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("txn: in-doubt %s: %w", x, err))
				continue
			}
			var commit bool
			switch State(state) {
			case StateCommitted:
				commit = true
			case StateAborted:
			default:
				continue
			}
			if _, err := r.db.ExecContext(ctx, xaFinishSQL(r.d, x, commit)); unknownXID(err) {
				continue // finished meanwhile, or (MySQL) prepared on a session still open
			} else if err != nil {
				errs = append(errs, fmt.Errorf("txn: in-doubt %s: %w", x, err))
				continue
			}
			m.o.logger.Info("txn: finished an in-doubt XA branch", "xid", x, "commit", commit)
			n++
		}
	}
	return n, errors.Join(errs...)
}

// listPrepared returns the ids of the prepared XA transactions in db that
// start with XAPrefix.
func listPrepared(ctx context.Context, db *sql.DB, d sqllock.Dialect) ([]string, error) {
	var out []string
	if d == sqllock.Postgres {
		rows, err := db.QueryContext(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, $1)", XAPrefix)
		if err != nil {
			return nil, fmt.Errorf("txn: reading pg_prepared_xacts: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var x string
			if err := rows.Scan(&x); err != nil {
				return nil, fmt.Errorf("txn: reading pg_prepared_xacts: %w", err)
			}
			out = append(out, x)
		}
		return out, rows.Err()
	}
	rows, err := db.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return nil, fmt.Errorf("txn: XA RECOVER: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var format, glen, blen int64
		var data []byte
		if err := rows.Scan(&format, &glen, &blen, &data); err != nil {
			return nil, fmt.Errorf("txn: XA RECOVER: %w", err)
		}
		if x := string(data); blen == 0 && strings.HasPrefix(x, XAPrefix) {
			out = append(out, x)
		}
	}
	return out, rows.Err()
}
