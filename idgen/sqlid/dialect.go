package sqlid

import (
	"regexp"

	"github.com/coordkit/coordkit/internal/sqldb"
)

// Dialect names the SQL a generator speaks: the Dialect of sqllock and workerid (one type
// for every SQL package of coordkit). The zero Dialect is invalid.
type Dialect = sqldb.Dialect

const (
	// MySQL is MySQL 8 and MariaDB 10.5 or later (InnoDB).
	MySQL = sqldb.MySQL
	// Postgres is PostgreSQL 12 or later.
	Postgres = sqldb.Postgres
)

// identRE is what a table or sequence name may be: an identifier,
// optionally qualified by a schema (database). Names are put into SQL as
// they are, so nothing else is accepted.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)
