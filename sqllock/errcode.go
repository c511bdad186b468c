package sqllock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/coordkit/coordkit/internal/sqlcode"
)

// Error codes this package reacts to. Drivers are not imported: see
// internal/sqlcode.
const (
	mysqlLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT
	mysqlDeadlock        = 1213 // ER_LOCK_DEADLOCK

	pgSerialization = "40001" // serialization_failure
	pgDeadlock      = "40P01" // deadlock_detected
	pgLockTimeout   = "55P03" // lock_not_available (lock_timeout, NOWAIT)
	pgQueryCanceled = "57014" // query_canceled (statement_timeout, pg_cancel_backend)
)

// codes returns the MySQL error number and the SQLSTATE of the first error
// in err's chain that carries either.
func codes(err error) (number int, state string) { return sqlcode.Codes(err) }

// Retryable reports whether err is a transaction failure that running the
// transaction again may cure: a deadlock (MySQL 1213, PostgreSQL 40P01), a
// lock wait timeout (MySQL 1205, PostgreSQL 55P03) or a serialization
// failure (PostgreSQL 40001). Tx, ForUpdate and Versioned.Update retry
// these.
func Retryable(err error) bool {
	n, s := codes(err)
	switch {
	case n == mysqlDeadlock, n == mysqlLockWaitTimeout:
		return true
	case s == pgDeadlock, s == pgSerialization, s == pgLockTimeout:
		return true
	}
	return false
}

// pgWaitEnded reports whether err ended a PostgreSQL lock wait without an
// error in the lock: lock_timeout, statement_timeout or a cancel.
func pgWaitEnded(err error) bool {
	_, s := codes(err)
	return s == pgLockTimeout || s == pgQueryCanceled
}

// connBroken reports whether conn can no longer be used after err: the
// driver or database/sql says so, or a ping on it fails so (within ctx;
// a ctx that ended decides nothing).
func connBroken(ctx context.Context, conn *sql.Conn, err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	perr := conn.PingContext(ctx)
	return errors.Is(perr, driver.ErrBadConn) || errors.Is(perr, sql.ErrConnDone)
}
