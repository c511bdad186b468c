package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/txn"
)

// TestTxnStuck: "txn stuck" lists a transaction whose compensation kept
// failing until the deadline, with the state it was stuck in, its
// branches and the reason, in text and JSON; a log with none says so; a
// missing log is a failure, a missing or doubled database a usage error;
// a log in PostgreSQL is listed through --postgres.
func TestTxnStuck(t *testing.T) {
	maria := testserver.StartMariaDB(t)
	dsn := maria.DSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var next int64 = 1000
	m, err := txn.New(db, sqllock.MySQL, txn.IDFunc(func() int64 { next++; return next }),
		txn.WithRetry(func(int) time.Duration { return 10 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, txn.Branch) error { return nil }
	if err := m.RegisterSaga("refund", txn.SagaStep{Action: ok, Compensate: func(context.Context, txn.Branch) error {
		return errors.New("ledger down")
	}}, txn.SagaStep{Action: func(context.Context, txn.Branch) error { return txn.ErrAbort }, Compensate: ok}); err != nil {
		t.Fatal(err)
	}
	gid, err := m.Run(ctx, "refund", nil, 300*time.Millisecond)
	if !errors.Is(err, txn.ErrStuck) {
		t.Fatalf("Run: %v, want txn.ErrStuck", err)
	}

	code, out, errOut := runCLI(t, nil, "txn", "stuck", "--mysql", dsn)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "GID") {
		t.Fatalf("want a header and one line:\n%s", out)
	}
	for _, want := range []string{strconv.FormatInt(gid, 10), "refund", "saga", "rolling_back", "done,undone",
		"branch 0 compensate still failing at the deadline: ledger down"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("the line lacks %q:\n%s", want, out)
		}
	}

	code, out, errOut = runCLI(t, map[string]string{"COORDKIT_TXN_MYSQL": dsn}, "txn", "stuck", "--json")
	if code != exitOK {
		t.Fatalf("--json: exit %d: %s", code, errOut)
	}
	var views []stuckView
	if err := json.Unmarshal([]byte(out), &views); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if len(views) != 1 || views[0].GID != strconv.FormatInt(gid, 10) || views[0].Phase != "rolling_back" ||
		!strings.Contains(views[0].Reason, "ledger down") {
		t.Errorf("--json: %+v", views)
	}

	// Another log in the same database, with nothing stuck.
	m2, err := txn.New(db, sqllock.MySQL, txn.IDFunc(func() int64 { return 1 }), txn.WithTablePrefix("other_txn_"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, nil, "txn", "stuck", "--mysql", dsn, "--prefix", "other_txn_"); code != exitOK ||
		!strings.Contains(out, "(no stuck transaction)") {
		t.Errorf("empty log: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "txn", "stuck", "--mysql", dsn, "--prefix", "missing_txn_"); code != exitFailure ||
		!strings.Contains(errOut, "txn") {
		t.Errorf("missing log: exit %d, %q; want %d", code, errOut, exitFailure)
	}
	// The log in PostgreSQL: the same listing through --postgres.
	pg := testserver.StartPostgres(t)
	pdb, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pdb.Close() })
	mp, err := txn.New(pdb, sqllock.Postgres, txn.IDFunc(func() int64 { next++; return next }),
		txn.WithRetry(func(int) time.Duration { return 10 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mp.RegisterSaga("refund", txn.SagaStep{Action: func(context.Context, txn.Branch) error {
		return errors.New("ledger down")
	}, Compensate: ok}); err != nil {
		t.Fatal(err)
	}
	pgid, err := mp.Run(ctx, "refund", nil, 300*time.Millisecond)
	if !errors.Is(err, txn.ErrStuck) {
		t.Fatalf("Run on PostgreSQL: %v, want txn.ErrStuck", err)
	}
	if code, out, errOut := runCLI(t, nil, "txn", "stuck", "--postgres", pg.DSN()); code != exitOK ||
		!strings.Contains(out, strconv.FormatInt(pgid, 10)) || !strings.Contains(out, "branch 0 action still failing at the deadline: ledger down") {
		t.Errorf("--postgres: exit %d, %q, %q", code, out, errOut)
	}

	for _, args := range [][]string{{}, {"--mysql", dsn, "--postgres", "postgres://x@127.0.0.1/x"}, {"--mysql", dsn, "--limit", "0"}} {
		if code, _, _ := runCLI(t, nil, append([]string{"txn", "stuck"}, args...)...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
	}
}
