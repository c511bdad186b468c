package sqldb

import (
	"database/sql"
	"reflect"
	"strings"
)

// ValidTable reports whether name is [a-z_][a-z0-9_]* or schema.table of
// two such parts, each at most 63 bytes: a name that can be put in SQL
// unquoted, and means the same on MySQL and PostgreSQL.
func ValidTable(name string) bool {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if p == "" || len(p) > 63 || '0' <= p[0] && p[0] <= '9' {
			return false
		}
		for i := 0; i < len(p); i++ {
			b := p[i]
			if !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '_') {
				return false
			}
		}
	}
	return true
}

// Driver kinds DriverKind reports.
const (
	KindMySQL    = "mysql"
	KindPostgres = "postgres"
)

// DriverKind returns KindMySQL or KindPostgres for a pool whose driver is
// one of the well-known drivers of that protocol, by the driver's package
// path (github.com/go-sql-driver/mysql; github.com/jackc/pgx's stdlib,
// github.com/lib/pq), and "" for any other driver (a wrapper, for
// instance), together with the driver's type name for an error message.
func DriverKind(db *sql.DB) (kind, driverType string) {
	t := reflect.TypeOf(db.Driver())
	if t == nil {
		return "", "<nil>"
	}
	driverType = t.String()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch p := t.PkgPath(); {
	case strings.HasPrefix(p, "github.com/go-sql-driver/mysql"):
		return KindMySQL, driverType
	case strings.HasPrefix(p, "github.com/jackc/pgx/"), p == "github.com/lib/pq":
		return KindPostgres, driverType
	}
	return "", driverType
}
