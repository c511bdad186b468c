package sqldb

import "strconv"

// Dialect names the SQL a package speaks; sqllock.Dialect and
// sqlid.Dialect are this type, so one value serves every SQL package of
// coordkit. The zero Dialect is invalid.
type Dialect int

const (
	// MySQL is MySQL 8 and MariaDB 10.5 or later.
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
