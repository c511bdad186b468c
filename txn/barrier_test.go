package txn_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/txn"
)

// TestBarrier checks the barrier's three rules on each server: an op runs
// once however often it is called; an undo whose forward op never
// committed does nothing (null compensation), and the forward op arriving
// after it does nothing either (hanging prevention); a forward op that
// rolled back leaves no row, so its undo is a null compensation.
func TestBarrier(t *testing.T) {
	for _, b := range banks {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 10*time.Second)
			gid, err := ids.Next()
			if err != nil {
				t.Fatal(err)
			}
			acct := uniqueKey(t)
			b.open(t, acct, 0)
			add := func(op txn.Op, branch int) bool {
				t.Helper()
				ran, err := b.exec(ctx, txn.Branch{GID: gid, ID: branch, Op: op}, "", "UPDATE acct SET balance = balance + 1 WHERE id = ?", acct)
				if err != nil {
					t.Fatalf("%s of branch %d: %v", op, branch, err)
				}
				return ran
			}
			balance := func() int64 { x, _, _ := b.account(t, acct); return x }

			// Idempotency: Try, Confirm, each called twice, run once.
			for _, op := range []txn.Op{txn.OpTry, txn.OpTry, txn.OpConfirm, txn.OpConfirm} {
				add(op, 0)
			}
			if got := balance(); got != 2 {
				t.Errorf("after Try, Try, Confirm, Confirm: %d runs, want 2", got)
			}
			// Null compensation, then hanging prevention.
			if add(txn.OpCancel, 1) {
				t.Error("Cancel with no Try ran")
			}
			if add(txn.OpTry, 1) {
				t.Error("Try after its Cancel ran")
			}
			if add(txn.OpCancel, 1) {
				t.Error("Cancel repeated ran")
			}
			// A Saga action whose local transaction rolled back: its
			// compensation is a null compensation.
			_, err = b.bar.Do(ctx, b.db, txn.Branch{GID: gid, ID: 2, Op: txn.OpAction}, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, b.q("UPDATE acct SET balance = balance + 100 WHERE id = ?"), acct); err != nil {
					return err
				}
				return errLostReply
			})
			if !errors.Is(err, errLostReply) {
				t.Fatalf("action: %v", err)
			}
			if add(txn.OpCompensate, 2) {
				t.Error("compensation of a rolled-back action ran")
			}
			// An action that committed: compensated once.
			if !add(txn.OpAction, 3) || !add(txn.OpCompensate, 3) || add(txn.OpCompensate, 3) || add(txn.OpAction, 3) {
				t.Error("action then compensation, each repeated: want true, true, false, false")
			}
			if got := balance(); got != 4 {
				t.Errorf("balance %d, want 4", got)
			}
		})
	}
}

// TestBarrierConcurrent: two calls of one op at once (a deposed driver and
// its successor) run the op once; the second waits for the first's
// commit.
func TestBarrierConcurrent(t *testing.T) {
	for _, b := range banks {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 10*time.Second)
			gid, _ := ids.Next()
			acct := uniqueKey(t)
			b.open(t, acct, 0)
			br := txn.Branch{GID: gid, ID: 0, Op: txn.OpConfirm}
			tx, err := b.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			ran, err := b.bar.Call(ctx, tx, br, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, b.q("UPDATE acct SET balance = balance + 1 WHERE id = ?"), acct)
				return err
			})
			if !ran || err != nil {
				t.Fatalf("first: %v, %v", ran, err)
			}
			second := make(chan bool, 1)
			go func() {
				ran, err := b.exec(ctx, br, "", "UPDATE acct SET balance = balance + 1 WHERE id = ?", acct)
				if err != nil {
					t.Error(err)
				}
				second <- ran
			}()
			select {
			case <-second:
				t.Fatal("the second call did not wait for the first's commit")
			case <-time.After(200 * time.Millisecond):
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if <-second {
				t.Error("the second call ran too")
			}
			if x, _, _ := b.account(t, acct); x != 1 {
				t.Errorf("balance %d, want 1", x)
			}
		})
	}
}

// TestBarrierInput: bad input is an error wrapping ErrInvalid, never a
// panic.
func TestBarrierInput(t *testing.T) {
	b := banks[0]
	ctx := context.Background()
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	fn := func(*sql.Tx) error { return nil }
	for name, call := range map[string]func() error{
		"nil tx":     func() error { _, err := b.bar.Call(ctx, nil, txn.Branch{GID: 1, Op: txn.OpTry}, fn); return err },
		"nil fn":     func() error { _, err := b.bar.Call(ctx, tx, txn.Branch{GID: 1, Op: txn.OpTry}, nil); return err },
		"zero gid":   func() error { _, err := b.bar.Call(ctx, tx, txn.Branch{Op: txn.OpTry}, fn); return err },
		"bad op":     func() error { _, err := b.bar.Call(ctx, tx, txn.Branch{GID: 1, Op: "commit"}, fn); return err },
		"neg branch": func() error { _, err := b.bar.Call(ctx, tx, txn.Branch{GID: 1, ID: -1, Op: txn.OpTry}, fn); return err },
		"nil db":     func() error { _, err := b.bar.Do(ctx, nil, txn.Branch{GID: 1, Op: txn.OpTry}, fn); return err },
		"create nil": func() error { return b.bar.CreateTable(ctx, nil) },
		"dialect":    func() error { _, err := txn.NewBarrier(0, ""); return err },
		"table":      func() error { _, err := txn.NewBarrier(b.d, "a;drop"); return err },
	} {
		if err := call(); !errors.Is(err, txn.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
