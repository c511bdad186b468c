package sqldb

import (
	"reflect"
)

// Error codes the SQL packages react to. Drivers are not imported: a
// PostgreSQL error is recognised by its SQLState() method (pgx's
// *pgconn.PgError, lib/pq's via Get), a MySQL error by the Number field of
// the driver's error struct (go-sql-driver's *mysql.MySQLError).
const (
	MySQLBadField        = 1054 // ER_BAD_FIELD_ERROR: unknown column
	MySQLNoSuchTable     = 1146 // ER_NO_SUCH_TABLE
	MySQLLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT
	MySQLDeadlock        = 1213 // ER_LOCK_DEADLOCK

	PGSerialization   = "40001" // serialization_failure
	PGDeadlock        = "40P01" // deadlock_detected
	PGUndefinedColumn = "42703" // undefined_column
	PGUndefinedTable  = "42P01" // undefined_table
	PGLockTimeout     = "55P03" // lock_not_available (lock_timeout, NOWAIT)
	PGQueryCanceled   = "57014" // query_canceled (statement_timeout, pg_cancel_backend)
)

// Codes returns the MySQL error number and the SQLSTATE of the first error
// in err's chain that carries either.
func Codes(err error) (number int, state string) {
	for _, e := range chain(err) {
		if s, ok := e.(interface{ SQLState() string }); ok {
			return 0, s.SQLState()
		}
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer && !v.IsNil() {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			continue
		}
		if f := v.FieldByName("Number"); f.IsValid() && f.Kind() == reflect.Uint16 {
			return int(f.Uint()), ""
		}
	}
	return 0, ""
}

// NoSuchTable reports whether err says that a table or one of its columns
// does not exist (MySQL 1146 or 1054, PostgreSQL 42P01 or 42703).
func NoSuchTable(err error) bool {
	n, s := Codes(err)
	return n == MySQLNoSuchTable || n == MySQLBadField || s == PGUndefinedTable || s == PGUndefinedColumn
}

// chain lists err and every error it wraps, depth first.
func chain(err error) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		for e != nil {
			out = append(out, e)
			switch u := e.(type) {
			case interface{ Unwrap() []error }:
				for _, x := range u.Unwrap() {
					walk(x)
				}
				return
			case interface{ Unwrap() error }:
				e = u.Unwrap()
			default:
				return
			}
		}
	}
	walk(err)
	return out
}
