package sqlid_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/coordkit/coordkit/idgen/sqlid"
)

func ExampleNewLeaf() {
	db, err := sql.Open("mysql", os.Getenv("MYSQL_DSN")) // user:pass@tcp(host:3306)/db
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ids, err := sqlid.NewLeaf(db, sqlid.MySQL, sqlid.WithTable("example_leaf_alloc"))
	if err != nil {
		panic(err)
	}
	defer ids.Close()
	ctx := context.Background()
	// Once, or in a migration: Leaf's table and a row per tag.
	if err := ids.CreateTable(ctx); err != nil {
		panic(err)
	}
	if err := ids.Register(ctx, "order", 1, 1000, "order IDs"); err != nil && !errors.Is(err, sqlid.ErrTagExists) {
		panic(err)
	}

	orders, err := ids.For("order")
	if err != nil {
		panic(err)
	}
	for range 3 {
		id, err := orders.Next(ctx) // from memory; the database is read once per segment
		if err != nil {
			panic(err)
		}
		fmt.Println(id)
	}
	// Output:
	// 1
	// 2
	// 3
}

func ExampleNewLeaf_postgres() {
	db, err := sql.Open("pgx", os.Getenv("POSTGRES_DSN")) // postgres://user@host/db
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ids, err := sqlid.NewLeaf(db, sqlid.Postgres, sqlid.WithTable("example_leaf_alloc"))
	if err != nil {
		panic(err)
	}
	defer ids.Close()
	ctx := context.Background()
	if err := ids.CreateTable(ctx); err != nil {
		panic(err)
	}

	_, err = ids.Next(ctx, "unregistered")
	fmt.Println(errors.Is(err, sqlid.ErrUnknownTag))

	if err := ids.Register(ctx, "invoice", 1000, 500, ""); err != nil && !errors.Is(err, sqlid.ErrTagExists) {
		panic(err)
	}
	id, err := ids.Next(ctx, "invoice")
	fmt.Println(id, err)
	// Output:
	// true
	// 1000 <nil>
}

func ExampleNewTinyid() {
	// Two databases, one tag: database 0 hands out even IDs, database 1 odd
	// ones; either serves alone while the other is down.
	maria, err := sql.Open("mysql", os.Getenv("MYSQL_DSN"))
	if err != nil {
		panic(err)
	}
	defer maria.Close()
	pg, err := sql.Open("pgx", os.Getenv("POSTGRES_DSN"))
	if err != nil {
		panic(err)
	}
	defer pg.Close()
	ids, err := sqlid.NewTinyid([]sqlid.Store{
		{DB: maria, Dialect: sqlid.MySQL},
		{DB: pg, Dialect: sqlid.Postgres},
	}, sqlid.WithTable("example_tiny_id_info"))
	if err != nil {
		panic(err)
	}
	defer ids.Close()
	ctx := context.Background()
	if err := ids.CreateTable(ctx); err != nil {
		panic(err)
	}
	if err := ids.Register(ctx, "user", 0, 1000, ""); err != nil && !errors.Is(err, sqlid.ErrTagExists) {
		panic(err)
	}
	id, err := ids.Next(ctx, "user")
	fmt.Println(id > 0, err)
	// Output:
	// true <nil>
}

func ExampleNewTickets() {
	db, err := sql.Open("pgx", os.Getenv("POSTGRES_DSN"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	tickets, err := sqlid.NewTickets(db, sqlid.Postgres, sqlid.WithTicketTable("example_tickets"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := tickets.CreateSchema(ctx); err != nil {
		panic(err)
	}
	id, err := tickets.Next(ctx) // SELECT nextval('example_tickets')
	fmt.Println(id, err)
	// Output:
	// 1 <nil>
}
