package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// ddl returns the CREATE TABLE statement of a Client's table.
func ddl(d Dialect, table string, lease bool) string {
	switch {
	case d == MySQL && lease:
		return "CREATE TABLE IF NOT EXISTS " + table + ` (
  name    VARBINARY(512) NOT NULL PRIMARY KEY,
  owner   VARBINARY(255) NOT NULL,
  token   BIGINT NOT NULL,
  expires DATETIME(6) NOT NULL
) ENGINE=InnoDB`
	case d == MySQL:
		return "CREATE TABLE IF NOT EXISTS " + table + ` (
  name    VARBINARY(512) NOT NULL PRIMARY KEY,
  token   BIGINT NOT NULL,
  owner   VARBINARY(255) NOT NULL,
  session BIGINT NOT NULL,
  expires BIGINT NOT NULL
) ENGINE=InnoDB`
	case lease:
		return "CREATE TABLE IF NOT EXISTS " + table + ` (
  name    text PRIMARY KEY,
  owner   text NOT NULL,
  token   bigint NOT NULL,
  expires timestamptz NOT NULL
)`
	default:
		return "CREATE TABLE IF NOT EXISTS " + table + ` (
  name    text PRIMARY KEY,
  token   bigint NOT NULL,
  owner   text NOT NULL,
  session bigint NOT NULL,
  expires bigint NOT NULL
)`
	}
}

// column is what the schema check knows of a table column.
type column struct {
	typ    string // lower case: varbinary, bigint, text, timestamp with time zone, ...
	unique bool   // the primary key, or alone in a unique index
}

// wantColumns are a table's columns and the types each accepts (by
// prefix of the type's name).
func wantColumns(d Dialect, lease bool) map[string][]string {
	str := []string{"varbinary", "varchar", "binary", "char", "text", "blob"}
	if d == Postgres {
		str = []string{"text", "character varying", "varchar"}
	}
	ints := []string{"bigint"}
	if lease {
		ts := []string{"datetime"} // not timestamp: its values move with the session's time zone
		if d == Postgres {
			ts = []string{"timestamp with time zone"}
		}
		return map[string][]string{"name": str, "owner": str, "token": ints, "expires": ts}
	}
	return map[string][]string{"name": str, "owner": str, "token": ints, "session": append(ints, "int"), "expires": ints}
}

// readColumns returns the columns of table, none if it does not exist.
func readColumns(ctx context.Context, db *sql.DB, d Dialect, table string) (map[string]column, error) {
	var rows *sql.Rows
	var err error
	if d == MySQL {
		schema, name, qualified := strings.Cut(table, ".")
		if !qualified {
			schema, name = "", table
		}
		rows, err = db.QueryContext(ctx, `SELECT LOWER(COLUMN_NAME), LOWER(DATA_TYPE), COLUMN_KEY IN ('PRI', 'UNI')
FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?`, schema, name)
	} else {
		rows, err = db.QueryContext(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), EXISTS (
  SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indisunique AND i.indpred IS NULL
    AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum)
FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, table)
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols := map[string]column{}
	for rows.Next() {
		var name string
		var c column
		if err := rows.Scan(&name, &c.typ, &c.unique); err != nil {
			return nil, err
		}
		cols[name] = c
	}
	return cols, rows.Err()
}

// checkSchema returns nil if table has coordkit's columns, with name
// unique, and otherwise an error wrapping ErrSchema that says what is
// wrong and how to make the table.
func checkSchema(ctx context.Context, db *sql.DB, d Dialect, table string, lease bool) error {
	cols, err := readColumns(ctx, db, d, table)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("sqllock: reading the columns of %s (is the database %s?): %w", table, d, err)
	}
	fix := fmt.Sprintf("create it with Client.CreateTable, or:\n%s", ddl(d, table, lease))
	if len(cols) == 0 {
		return fmt.Errorf("%w: table %s does not exist; %s", ErrSchema, table, fix)
	}
	want := wantColumns(d, lease)
	for _, name := range []string{"name", "owner", "token", "expires", "session"} {
		types, ok := want[name]
		if !ok {
			continue
		}
		c, ok := cols[name]
		if !ok {
			return fmt.Errorf("%w: table %s has no column %s; %s", ErrSchema, table, name, fix)
		}
		match := false
		for _, t := range types {
			match = match || strings.HasPrefix(c.typ, t)
		}
		if !match {
			return fmt.Errorf("%w: column %s.%s is %s, want %s; %s", ErrSchema, table, name, c.typ, types[0], fix)
		}
		if name == "name" && !c.unique {
			return fmt.Errorf("%w: column %s.name is not the primary key (rows would repeat and every owner would hold the lock); %s", ErrSchema, table, fix)
		}
	}
	return nil
}

// checkAutocommit returns an error wrapping ErrInvalid if db's MySQL
// sessions have autocommit off (a DSN with autocommit=0, or the server's
// init_connect): every statement of the Client would stay in an open
// transaction, its fencing rows and lease rows uncommitted and locked
// until the connection ends.
func checkAutocommit(ctx context.Context, db *sql.DB) error {
	var on int64
	if err := db.QueryRowContext(ctx, "SELECT @@autocommit").Scan(&on); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("sqllock: reading @@autocommit: %w", err)
	}
	if on == 0 {
		return invalid("the MySQL session has autocommit off (autocommit=0 in the DSN?): " +
			"the Client's statements would never commit; remove the setting from the pool the Client uses")
	}
	return nil
}
