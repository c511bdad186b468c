package sqlid

import (
	"regexp"
	"strconv"
)

// Dialect names the SQL a generator speaks: MySQL or Postgres. The zero
// Dialect is invalid.
type Dialect int

const (
	// MySQL is MySQL 8 and MariaDB 10.5 or later (InnoDB).
	MySQL Dialect = iota + 1
	// Postgres is PostgreSQL 12 or later.
	Postgres
)

// String returns "mysql" or "postgres".
func (d Dialect) String() string {
	switch d {
	case MySQL:
		return "mysql"
	case Postgres:
		return "postgres"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// Valid reports whether d is MySQL or Postgres.
func (d Dialect) Valid() bool { return d == MySQL || d == Postgres }

// identRE is what a table or sequence name may be: an identifier,
// optionally qualified by a schema (database). Names are put into SQL as
// they are, so nothing else is accepted.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)
