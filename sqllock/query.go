package sqllock

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// querier is what *sql.DB and *sql.Conn share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// exec runs one of the Client's statements on q.
func (c *Client) exec(ctx context.Context, q querier, stmt string, args ...any) (sql.Result, error) {
	stmt, args = c.bind(stmt, args)
	return q.ExecContext(ctx, stmt, args...)
}

// queryRow runs one of the Client's queries on q.
func (c *Client) queryRow(ctx context.Context, q querier, stmt string, args ...any) *sql.Row {
	stmt, args = c.bind(stmt, args)
	return q.QueryRowContext(ctx, stmt, args...)
}

// bind returns stmt and args as sent: on MySQL the arguments are written
// into the statement (strings as hex literals, which no sql_mode or
// character set reads otherwise, integers in decimal), so that every
// statement is one round trip. go-sql-driver/mysql otherwise prepares a
// statement with arguments on the server first (a round trip more) unless
// the DSN sets interpolateParams=true. PostgreSQL drivers cache prepared
// statements per connection (pgx does by default): arguments go as they
// are.
func (c *Client) bind(stmt string, args []any) (string, []any) {
	if c.d != MySQL || len(args) == 0 {
		return stmt, args
	}
	var b strings.Builder
	b.Grow(len(stmt) + 40*len(args))
	n := 0
	for i := 0; i < len(stmt); i++ {
		if stmt[i] != '?' {
			b.WriteByte(stmt[i])
			continue
		}
		if n == len(args) {
			panic("sqllock: more placeholders than arguments in " + stmt)
		}
		switch v := args[n].(type) {
		case string:
			if v == "" {
				b.WriteString("''")
			} else {
				b.WriteString("X'")
				b.WriteString(hex.EncodeToString([]byte(v)))
				b.WriteByte('\'')
			}
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		case int:
			b.WriteString(strconv.Itoa(v))
		default:
			panic(fmt.Sprintf("sqllock: argument of type %T", v))
		}
		n++
	}
	if n != len(args) {
		panic("sqllock: fewer placeholders than arguments in " + stmt)
	}
	return b.String(), nil
}
