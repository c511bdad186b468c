package txn

import (
	"strconv"
	"strings"

	"github.com/coordkit/coordkit/sqllock"
)

// The database's clock in microseconds since the Unix epoch, as a BIGINT:
// leases and deadlines follow it, not the processes' clocks.
const (
	mysqlNowUS = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
	pgNowUS    = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
)

// ddl returns the CREATE TABLE statements of the log (global and branch
// tables).
func logDDL(d sqllock.Dialect, global, branch string) []string {
	if d == sqllock.MySQL {
		return []string{
			"CREATE TABLE IF NOT EXISTS " + global + ` (
  gid         BIGINT NOT NULL PRIMARY KEY,
  name        VARCHAR(255) NOT NULL,
  mode        VARCHAR(8) NOT NULL,
  state       VARCHAR(16) NOT NULL,
  phase       VARCHAR(16) NOT NULL,
  reason      TEXT NOT NULL,
  payload     BLOB NOT NULL,
  branches    INT NOT NULL,
  deadline    BIGINT NOT NULL,
  owner       VARCHAR(64) NOT NULL,
  owner_token BIGINT NOT NULL,
  lease_until BIGINT NOT NULL,
  version     BIGINT NOT NULL,
  created     BIGINT NOT NULL,
  updated     BIGINT NOT NULL,
  KEY ` + indexName(global, "state") + ` (state, lease_until)
) ENGINE=InnoDB`,
			"CREATE TABLE IF NOT EXISTS " + branch + ` (
  gid        BIGINT NOT NULL,
  branch     INT NOT NULL,
  state      VARCHAR(16) NOT NULL,
  last_error TEXT NOT NULL,
  updated    BIGINT NOT NULL,
  PRIMARY KEY (gid, branch)
) ENGINE=InnoDB`,
		}
	}
	return []string{
		"CREATE TABLE IF NOT EXISTS " + global + ` (
  gid         bigint PRIMARY KEY,
  name        text NOT NULL,
  mode        text NOT NULL,
  state       text NOT NULL,
  phase       text NOT NULL,
  reason      text NOT NULL,
  payload     bytea NOT NULL,
  branches    integer NOT NULL,
  deadline    bigint NOT NULL,
  owner       text NOT NULL,
  owner_token bigint NOT NULL,
  lease_until bigint NOT NULL,
  version     bigint NOT NULL,
  created     bigint NOT NULL,
  updated     bigint NOT NULL
)`,
		"CREATE INDEX IF NOT EXISTS " + indexName(global, "state") + " ON " + global + " (state, lease_until)",
		"CREATE TABLE IF NOT EXISTS " + branch + ` (
  gid        bigint NOT NULL,
  branch     integer NOT NULL,
  state      text NOT NULL,
  last_error text NOT NULL,
  updated    bigint NOT NULL,
  PRIMARY KEY (gid, branch)
)`,
	}
}

// barrierDDL returns the CREATE TABLE statement of the barrier's table.
func barrierDDL(d sqllock.Dialect, table string) string {
	if d == sqllock.MySQL {
		return "CREATE TABLE IF NOT EXISTS " + table + ` (
  gid        BIGINT NOT NULL,
  branch     INT NOT NULL,
  op         VARCHAR(16) NOT NULL,
  barrier_id INT NOT NULL,
  reason     VARCHAR(16) NOT NULL,
  created    DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (gid, branch, op, barrier_id)
) ENGINE=InnoDB`
	}
	return "CREATE TABLE IF NOT EXISTS " + table + ` (
  gid        bigint NOT NULL,
  branch     integer NOT NULL,
  op         text NOT NULL,
  barrier_id integer NOT NULL,
  reason     text NOT NULL,
  created    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (gid, branch, op, barrier_id)
)`
}

// indexName is table's index called suffix, without a schema (PostgreSQL
// puts an index in its table's schema).
func indexName(table, suffix string) string {
	if _, t, ok := strings.Cut(table, "."); ok {
		table = t
	}
	return table + "_" + suffix
}

// dialectSQL rewrites a statement written for MySQL (? placeholders, {now}
// for the database's clock in µs, {g} and {b} for the log's tables) into d's
// SQL.
type dialectSQL struct {
	d      sqllock.Dialect
	global string
	branch string
}

func (s dialectSQL) q(stmt string) string {
	now := mysqlNowUS
	if s.d == sqllock.Postgres {
		now = pgNowUS
	}
	stmt = strings.NewReplacer("{now}", now, "{g}", s.global, "{b}", s.branch).Replace(stmt)
	if s.d != sqllock.Postgres {
		return stmt
	}
	// The package's statements have no ? inside a literal.
	var b strings.Builder
	n := 0
	for _, r := range stmt {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
