package sqldb_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/coordkit/coordkit/internal/sqldb"
)

type pgErr struct{ code string }

func (e *pgErr) Error() string    { return "pg " + e.code }
func (e *pgErr) SQLState() string { return e.code }

func TestCodes(t *testing.T) {
	for _, tc := range []struct {
		err    error
		number int
		state  string
		table  bool
	}{
		{nil, 0, "", false},
		{errors.New("plain"), 0, "", false},
		{&mysql.MySQLError{Number: 1146}, 1146, "", true},
		{fmt.Errorf("wrapped: %w", &mysql.MySQLError{Number: 1213}), 1213, "", false},
		{errors.Join(errors.New("a"), &pgErr{"42P01"}), 0, "42P01", true},
		{&pgErr{"42703"}, 0, "42703", true},
		{&pgErr{"40P01"}, 0, "40P01", false},
	} {
		n, s := sqldb.Codes(tc.err)
		if n != tc.number || s != tc.state || sqldb.NoSuchTable(tc.err) != tc.table {
			t.Errorf("%v: %d %q %v, want %d %q %v", tc.err, n, s, sqldb.NoSuchTable(tc.err), tc.number, tc.state, tc.table)
		}
	}
}

func TestValidTable(t *testing.T) {
	for name, want := range map[string]bool{
		"worker_node": true, "ids.worker_node": true, "_t9": true,
		"": false, "9t": false, "a.b.c": false, "Worker": false, "a-b": false, "a;drop": false, "a.": false,
	} {
		if got := sqldb.ValidTable(name); got != want {
			t.Errorf("ValidTable(%q) = %v", name, got)
		}
	}
}

func TestDriverKind(t *testing.T) {
	for driver, want := range map[string]string{"mysql": sqldb.KindMySQL, "pgx": sqldb.KindPostgres} {
		db, err := sql.Open(driver, "")
		if err != nil {
			t.Fatal(err)
		}
		if kind, typ := sqldb.DriverKind(db); kind != want {
			t.Errorf("%s (%s): %q, want %q", driver, typ, kind, want)
		}
		db.Close()
	}
}
