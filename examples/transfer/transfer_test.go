package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/txn"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEveryModeMovesOrRestores: each mode commits a transfer within the
// balance (the amount moved), and aborts both refusals with nothing moved
// and nothing left frozen: the debit's own (insufficient funds: the debit
// branch undone, the credit never started) and the credit's after the
// debit applied (both branches undone: the debit compensated, cancelled or
// rolled back). The total never changes.
func TestEveryModeMovesOrRestores(t *testing.T) {
	m := testserver.StartMariaDB(t)
	p := testserver.StartPostgres(t, testserver.WithServerArgs("-c", "max_prepared_transactions=10"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := config{mysql: m.DSN(), postgres: p.DSN(), balance: 500, amount: 70}
	rep, err := run(ctx, c)
	if rep != nil {
		var out bytes.Buffer
		rep.print(&out)
		t.Logf("\n%s", out.String())
		if !strings.Contains(out.String(), "PASS") {
			t.Error("the report does not say PASS")
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if !rep.passed() || len(rep.rows) != 9 {
		t.Fatalf("passed %v with %d rows", rep.passed(), len(rep.rows))
	}
	alice, bob := c.balance, c.balance
	for i, r := range rep.rows {
		if r.mode != modes[i/3] {
			t.Errorf("row %d: mode %s, want %s", i, r.mode, modes[i/3])
		}
		if r.alice+r.bob != 2*c.balance || r.reserved != 0 {
			t.Errorf("%s %+v: alice %d + bob %d, %d reserved", r.mode, r.t, r.alice, r.bob, r.reserved)
		}
		var state txn.State
		var branches []string
		switch i % 3 {
		case 0:
			alice, bob = alice-c.amount, bob+c.amount
			state, branches = txn.StateCommitted, []string{"done", "done"}
			if r.mode != txn.ModeSaga {
				branches = []string{"confirmed", "confirmed"}
			}
		case 1:
			state, branches = txn.StateAborted, []string{"undone", "pending"}
		case 2:
			state, branches = txn.StateAborted, []string{"undone", "undone"}
		}
		if r.state != state || !slices.Equal(r.branches, branches) || r.alice != alice || r.bob != bob {
			t.Errorf("%s %+v: %s %q, alice %d, bob %d; want %s %q, %d, %d", r.mode, r.t, r.state, r.branches,
				r.alice, r.bob, state, branches, alice, bob)
		}
	}
	// A second run on the same databases starts from the opening balances.
	if rep, err := run(ctx, c); err != nil || !rep.passed() {
		t.Fatalf("second run: %v", err)
	}
}

func TestBadConfig(t *testing.T) {
	for _, c := range []config{{balance: 0, amount: 1}, {balance: 10, amount: 0}, {balance: 10, amount: 11}} {
		if _, err := run(context.Background(), c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
