package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/sqllock"
)

func ExampleNewMySQL() {
	db, err := sql.Open("mysql", os.Getenv("MYSQL_DSN")) // user:pass@tcp(host:3306)/db
	if err != nil {
		panic(err)
	}
	defer db.Close()
	locker, err := sqllock.NewMySQL(db)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()
	if err := locker.CreateTable(ctx); err != nil { // once, or in a migration
		panic(err)
	}

	err = lock.Do(ctx, locker, "example:mysql", func(ctx context.Context) error {
		// One connection of db's pool holds the lock until Do releases it;
		// ctx is cancelled (cause lock.ErrLockLost) if its session ends.
		fmt.Println("in the critical section")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// in the critical section
	// err: <nil>
}

func ExampleNewPostgres() {
	db, err := sql.Open("pgx", os.Getenv("POSTGRES_DSN")) // postgres://user@host/db
	if err != nil {
		panic(err)
	}
	defer db.Close()
	locker, err := sqllock.NewPostgres(db)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	lease, err := locker.Obtain(ctx, "example:postgres", lock.WithTTL(3*time.Second))
	if err != nil {
		panic(err)
	}
	_, err = locker.TryObtain(ctx, "example:postgres") // another owner
	fmt.Println("second owner:", errors.Is(err, lock.ErrNotObtained))
	// Pass lease.Token() along with every write to the protected resource.
	fmt.Println("token issued:", lease.Token() > 0)
	fmt.Println("release:", lease.Release(ctx))
	// Output:
	// second owner: true
	// token issued: true
	// release: <nil>
}

func ExampleNewLeaseTable() {
	// The lease table holds no connection between statements: it works
	// through PgBouncer in transaction mode, where advisory locks do not.
	db, err := sql.Open("pgx", os.Getenv("POSTGRES_DSN"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	locker, err := sqllock.NewLeaseTable(db, sqllock.Postgres, sqllock.WithDefaultTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	lease, err := locker.Obtain(ctx, "example:lease-table")
	if err != nil {
		panic(err)
	}
	owner, token, err := locker.Holder(ctx, "example:lease-table")
	fmt.Println("holder is the lease's owner:", owner == lease.(*sqllock.Lease).Owner(), token == lease.Token(), err)
	fmt.Println("release:", lease.Release(ctx))
	// Output:
	// holder is the lease's owner: true true <nil>
	// release: <nil>
}

// A queue's consumers each take a job no other consumer holds: ForUpdate
// appends the locking clause chosen with WithLocking to the query, which
// must not have one.
func ExampleForUpdate_skipLocked() {
	db, err := sql.Open("pgx", os.Getenv("POSTGRES_DSN"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	for _, q := range []string{
		"DROP TABLE IF EXISTS example_jobs",
		"CREATE TABLE example_jobs (id int PRIMARY KEY, state text NOT NULL)",
		"INSERT INTO example_jobs VALUES (1, 'waiting for a worker'), (2, 'waiting for a worker')",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			panic(err)
		}
	}

	var id int
	err = sqllock.ForUpdate(ctx, db,
		"SELECT id FROM example_jobs WHERE state = 'waiting for a worker' ORDER BY id LIMIT 1", nil,
		func(rows *sql.Rows) error { return rows.Scan(&id) },
		func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE example_jobs SET state = 'running' WHERE id = $1", id)
			return err
		},
		sqllock.WithLocking(sqllock.LockForUpdateSkipLocked))
	fmt.Println("took job", id, "err:", err)
	// Output:
	// took job 1 err: <nil>
}
