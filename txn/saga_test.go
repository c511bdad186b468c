package txn_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/txn"
)

// TestSagaTransfer moves money from MariaDB to PostgreSQL by Saga with the
// log on either; a transfer of more than the balance is refused and
// compensated; the total never changes.
func TestSagaTransfer(t *testing.T) {
	forEachLog(t, func(t *testing.T, log *bank) {
		m := newManager(t, log, "")
		if err := m.RegisterSaga("transfer", sagaTransfer(banks[0], banks[1], nil)...); err != nil {
			t.Fatal(err)
		}
		a, b := uniqueKey(t)+"a", uniqueKey(t)+"b"
		banks[0].open(t, a, 100)
		banks[1].open(t, b, 0)
		ctx := ctxTimeout(t, 20*time.Second)
		gid, err := m.Run(ctx, "transfer", payload(t, transfer{a, b, 30}), 10*time.Second)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if st := status(t, m, gid); st.State != txn.StateCommitted || !slices.Equal(st.Branches, []string{"done", "done"}) {
			t.Fatalf("status %+v", st)
		}
		if x, _, _ := banks[0].account(t, a); x != 70 {
			t.Errorf("A = %d, want 70", x)
		}
		if y, _, _ := banks[1].account(t, b); y != 30 {
			t.Errorf("B = %d, want 30", y)
		}
		// B's credit goes to an account that does not exist: refused,
		// and A's debit compensated.
		gid, err = m.Run(ctx, "transfer", payload(t, transfer{a, b + "-missing", 50}), 10*time.Second)
		if !errors.Is(err, txn.ErrAborted) || !errors.Is(err, txn.ErrAbort) {
			t.Fatalf("Run to a missing account: %v, want ErrAborted wrapping ErrAbort", err)
		}
		st := status(t, m, gid)
		if st.State != txn.StateAborted || !strings.Contains(st.Reason, "no such account") ||
			!slices.Equal(st.Branches, []string{"undone", "undone"}) {
			t.Fatalf("status %+v", st)
		}
		// More than A has: refused at once, nothing to undo but a null
		// compensation.
		if _, err := m.Run(ctx, "transfer", payload(t, transfer{a, b, 1000}), 10*time.Second); !errors.Is(err, txn.ErrAborted) {
			t.Fatalf("Run of 1000: %v, want ErrAborted", err)
		}
		x, _, _ := banks[0].account(t, a)
		y, _, _ := banks[1].account(t, b)
		if x != 70 || y != 30 {
			t.Errorf("A, B = %d, %d, want 70, 30 (total %d, want 100)", x, y, x+y)
		}
	})
}

// TestSagaCompensatesInReverse: a refused third action undoes the three
// branches from the last to the first (the refused one included: its
// action may have had partial effects, and the barrier makes its
// compensation a no-op if it had none); a transient error is retried.
func TestSagaCompensatesInReverse(t *testing.T) {
	m := newManager(t, banks[0], "")
	var mu sync.Mutex
	var calls []string
	failed := false
	step := func(i int) txn.SagaStep {
		return txn.SagaStep{
			Action: func(ctx context.Context, br txn.Branch) error {
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, fmt.Sprintf("action%d", br.ID))
				if br.ID == 1 && !failed {
					failed = true
					return errors.New("transient")
				}
				if br.ID == 2 {
					return fmt.Errorf("%w: rule", txn.ErrAbort)
				}
				return nil
			},
			Compensate: func(ctx context.Context, br txn.Branch) error {
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, fmt.Sprintf("compensate%d", br.ID))
				return nil
			},
		}
	}
	if err := m.RegisterSaga("three", step(0), step(1), step(2)); err != nil {
		t.Fatal(err)
	}
	_, err := m.Run(ctxTimeout(t, 10*time.Second), "three", nil, 5*time.Second)
	if !errors.Is(err, txn.ErrAborted) {
		t.Fatalf("Run: %v", err)
	}
	want := []string{"action0", "action1", "action1", "action2", "compensate2", "compensate1", "compensate0"}
	if !slices.Equal(calls, want) {
		t.Errorf("calls %q, want %q", calls, want)
	}
}

// TestDeadlineStuck: a compensation that keeps failing until the deadline
// leaves the transaction stuck, with the reason, in Stuck's listing; so
// does an action that keeps failing; Recover leaves them alone.
func TestDeadlineStuck(t *testing.T) {
	m := newManager(t, banks[1], "")
	ok := func(context.Context, txn.Branch) error { return nil }
	down := func(context.Context, txn.Branch) error { return errors.New("ledger down") }
	refuse := func(context.Context, txn.Branch) error { return fmt.Errorf("%w: no", txn.ErrAbort) }
	if err := m.RegisterSaga("undo-fails", txn.SagaStep{Action: ok, Compensate: down}, txn.SagaStep{Action: refuse, Compensate: ok}); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterSaga("action-fails", txn.SagaStep{Action: down, Compensate: ok}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	start := time.Now()
	g1, err := m.Run(ctx, "undo-fails", nil, 300*time.Millisecond)
	if !errors.Is(err, txn.ErrStuck) {
		t.Fatalf("Run: %v, want ErrStuck", err)
	}
	if e := time.Since(start); e < 250*time.Millisecond {
		t.Errorf("stuck after %v, before the 300 ms deadline", e)
	}
	g2, err := m.Run(ctx, "action-fails", nil, 200*time.Millisecond)
	if !errors.Is(err, txn.ErrStuck) {
		t.Fatalf("Run: %v, want ErrStuck", err)
	}
	if n, err := m.Recover(ctx, 0); n != 0 || err != nil {
		t.Errorf("Recover: %d, %v; want 0, nil", n, err)
	}
	stuck, err := m.Stuck(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stuck) != 2 || stuck[0].GID != g1 || stuck[1].GID != g2 {
		t.Fatalf("Stuck: %+v, want gids %d and %d", stuck, g1, g2)
	}
	for i, want := range []struct {
		phase  txn.State
		reason string
	}{{txn.StateRollingBack, "branch 0 compensate still failing at the deadline: ledger down"},
		{txn.StateRunning, "branch 0 action still failing at the deadline: ledger down"}} {
		if s := stuck[i]; s.State != txn.StateStuck || s.Phase != want.phase || s.Reason != want.reason {
			t.Errorf("stuck[%d] = %+v, want phase %s, reason %q", i, s, want.phase, want.reason)
		}
	}
}

// TestLogBeforeAction: when a branch func runs, the log already says what
// allows it: the branch started (forward), the transaction rolling back
// (compensation, Cancel) or confirming (Confirm).
func TestLogBeforeAction(t *testing.T) {
	m := newManager(t, banks[1], "")
	var mu sync.Mutex
	var seen []string
	check := func(ctx context.Context, br txn.Branch) error {
		st, err := m.Status(ctx, br.GID)
		if err != nil {
			return err
		}
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s%d:%s/%s", br.Op, br.ID, st.State, st.Branches[br.ID]))
		mu.Unlock()
		return nil
	}
	refuse := func(ctx context.Context, br txn.Branch) error {
		if err := check(ctx, br); err != nil {
			return err
		}
		return fmt.Errorf("%w: no", txn.ErrAbort)
	}
	if err := m.RegisterSaga("saga", txn.SagaStep{Action: check, Compensate: check}, txn.SagaStep{Action: refuse, Compensate: check}); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterTCC("tcc-ok", txn.TCCBranch{Try: check, Confirm: check, Cancel: check}); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterTCC("tcc-no", txn.TCCBranch{Try: check, Confirm: check, Cancel: check}, txn.TCCBranch{Try: refuse, Confirm: check, Cancel: check}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	for _, name := range []string{"saga", "tcc-ok", "tcc-no"} {
		if _, err := m.Run(ctx, name, nil, 5*time.Second); err != nil && !errors.Is(err, txn.ErrAborted) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	want := []string{
		"action0:running/started", "action1:running/started", "compensate1:rolling_back/started", "compensate0:rolling_back/done",
		"try0:running/started", "confirm0:confirming/done",
		"try0:running/started", "try1:running/started", "cancel1:rolling_back/started", "cancel0:rolling_back/done",
	}
	if !slices.Equal(seen, want) {
		t.Errorf("seen\n%q\nwant\n%q", seen, want)
	}
}
