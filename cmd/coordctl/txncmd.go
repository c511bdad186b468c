package main

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/txn"
)

func init() {
	register(command{name: "txn stuck", summary: "list the global transactions that need a person (package txn)", run: txnStuck})
}

// stuckView is one stuck transaction, for text and JSON.
type stuckView struct {
	GID      string   `json:"gid"` // a string: gids are above 2^53
	Name     string   `json:"name"`
	Mode     string   `json:"mode"`
	Phase    string   `json:"phase"` // the state it was stuck in
	Branches []string `json:"branches"`
	Reason   string   `json:"reason"`
}

func txnStuck(e *env, args []string) error {
	fs := newFlags(e, "txn stuck", "", "Lists the transactions of package txn's log marked stuck: a branch func still\n"+
		"failed at the transaction's deadline, and nothing acts on it any more. Each\n"+
		"line gives the state it was stuck in, its branches' states and the reason\n"+
		"(the branch, the op and the last error), oldest first. Give the log's\n"+
		"database with --mysql (MySQL, MariaDB) or --postgres.")
	mysqlDSN := fs.String("mysql", e.getenv("COORDKIT_TXN_MYSQL"), "the log's MySQL/MariaDB DSN, as go-sql-driver/mysql takes it (env COORDKIT_TXN_MYSQL)")
	pgURL := fs.String("postgres", e.getenv("COORDKIT_TXN_POSTGRES"), "the log's PostgreSQL URL, as pgx takes it (env COORDKIT_TXN_POSTGRES)")
	prefix := fs.String("prefix", txn.DefaultTablePrefix, "the log's table prefix (txn.WithTablePrefix)")
	limit := fs.Int("limit", 1000, "list at most this many")
	var c conn
	c.addTimeout(fs)
	asJSON := addJSON(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("no arguments expected, got %q", strings.Join(pos, " "))
	}
	if *limit < 1 {
		return usagef("--limit %d: want at least 1", *limit)
	}
	driver, dsn, d := "mysql", *mysqlDSN, sqllock.MySQL
	switch {
	case *mysqlDSN != "" && *pgURL != "":
		return usagef("give --mysql or --postgres, not both")
	case *pgURL != "":
		driver, dsn, d = "pgx", *pgURL, sqllock.Postgres
	case *mysqlDSN == "":
		return usagef("give the log's database: --mysql DSN or --postgres URL")
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return usagef("--%s: %v", map[string]string{"mysql": "mysql", "pgx": "postgres"}[driver], err)
	}
	defer db.Close()
	// The Manager only reads the log here: it issues no gid.
	m, err := txn.New(db, d, txn.IDFunc(func() int64 { return 0 }), txn.WithTablePrefix(*prefix))
	if err != nil {
		return usagef("%v", err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, c.timeout)
	defer cancel()
	stuck, err := m.Stuck(ctx, *limit)
	if err != nil {
		return err
	}
	views := make([]stuckView, 0, len(stuck))
	for _, s := range stuck {
		views = append(views, stuckView{GID: strconv.FormatInt(s.GID, 10), Name: s.Name, Mode: string(s.Mode),
			Phase: string(s.Phase), Branches: s.Branches, Reason: s.Reason})
	}
	if *asJSON {
		return writeJSON(e.out, views)
	}
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GID\tNAME\tMODE\tSTUCK IN\tBRANCHES\tREASON")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.GID, v.Name, v.Mode, v.Phase, strings.Join(v.Branches, ","),
			strings.ReplaceAll(v.Reason, "\n", " "))
	}
	tw.Flush()
	if len(views) == 0 {
		fmt.Fprintln(e.out, "(no stuck transaction)")
	}
	return nil
}
