package workerid_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/workerid"
)

// A service leases a worker ID at start-up, builds its Snowflake on it, and
// gives the ID back when it stops. The generator stops issuing the moment
// the lease is lost, before another process can lease the same ID.
func ExampleNewRedis() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	leaser, err := workerid.NewRedis(rdb, workerid.WithMax(1023)) // 10 worker bits
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	lease, err := leaser.Lease(ctx, "order-service")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)

	ids, err := lease.NewSnowflake(ctx, idgen.LayoutTwitter)
	if err != nil {
		fmt.Println(err)
		return
	}
	id, _ := ids.Next()
	fmt.Println("worker:", lease.ID(), "ID's worker:", ids.Decompose(id).Worker)

	// A second instance of the service gets the next free ID.
	other, _ := leaser.Lease(ctx, "order-service")
	defer other.Release(ctx)
	fmt.Println("second instance:", other.ID())
	// Output:
	// worker: 0 ID's worker: 0
	// second instance: 1
}

// The same on ZooKeeper: the worker ID is an ephemeral node, held as long
// as the session.
func ExampleNewZK() {
	conn, _, err := zk.Connect(strings.Split(os.Getenv("ZK_SERVERS"), ","), 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	leaser, err := workerid.NewZK(conn, workerid.WithRoot("/example/workers"), workerid.WithSessionTimeout(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer leaser.Close()
	ctx := context.Background()
	lease, err := leaser.Lease(ctx, "billing")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)
	fmt.Println("worker:", lease.ID())
	// Output: worker: 0
}

// The same on a PostgreSQL (or MySQL, MariaDB) the service already runs: a
// row per worker ID, renewed by the watchdog, its expiry on the database's
// clock. The dialect comes from the driver.
func ExampleNewSQL() {
	db, err := sql.Open("pgx", os.Getenv("POSTGRES_DSN"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	leaser, err := workerid.NewSQL(db, workerid.WithTable("example_worker_node"))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	if err := leaser.CreateSchema(ctx); err != nil { // once, at deployment
		fmt.Println(err)
		return
	}
	lease, err := leaser.Lease(ctx, "invoices")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx) // frees the row, keeps the ID's high-water mark

	ids, err := lease.NewSnowflake(ctx, idgen.LayoutTwitter)
	if err != nil {
		fmt.Println(err)
		return
	}
	id, _ := ids.Next()
	fmt.Println("worker:", lease.ID(), "ID's worker:", ids.Decompose(id).Worker)
	// Output: worker: 0 ID's worker: 0
}

// List shows who holds a service's worker IDs, from the table: the holder's
// host and PID, and how long its row has left by the database's clock.
func ExampleSQLLeaser_List() {
	db, err := sql.Open("mysql", os.Getenv("MYSQL_DSN"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	leaser, err := workerid.NewSQL(db, workerid.WithTable("example_worker_node"), workerid.WithHost("web-1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	if err := leaser.CreateSchema(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		lease, err := leaser.Lease(ctx, "search")
		if err != nil {
			fmt.Println(err)
			return
		}
		defer lease.Release(ctx)
	}
	holders, err := leaser.List(ctx, "search")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, h := range holders {
		fmt.Println(h.ID, h.Host, h.PID == os.Getpid(), h.TTL > 0)
	}
	// Output:
	// 0 web-1 true true
	// 1 web-1 true true
}
