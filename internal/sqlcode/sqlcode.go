// Package sqlcode reads the error codes of database errors without
// importing a driver: a PostgreSQL error is recognised by its SQLState()
// method (pgx's *pgconn.PgError, lib/pq's via Get), a MySQL error by the
// Number field of the driver's error struct (go-sql-driver's
// *mysql.MySQLError). sqllock and sqlid share it.
package sqlcode

import "reflect"

// Codes returns the MySQL error number and the SQLSTATE of the first error
// in err's chain that carries either.
func Codes(err error) (number int, state string) {
	for _, e := range Chain(err) {
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

// Chain lists err and every error it wraps, depth first.
func Chain(err error) []error {
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
