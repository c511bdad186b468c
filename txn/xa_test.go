package txn_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/txn"
)

// xaTransfer is an XA transfer from an account of from to one of to.
func xaTransfer(from, to *bank) []txn.XABranch {
	work := func(b *bank, stmt, refuse string, args func(tr transfer) []any) txn.XABranch {
		return txn.XABranch{DB: b.db, Dialect: b.d, Work: func(ctx context.Context, ex txn.Execer, br txn.Branch) error {
			res, err := ex.ExecContext(ctx, b.q(stmt), args(decode(br))...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				return errors.New(refuse)
			}
			return nil
		}}
	}
	return []txn.XABranch{
		work(from, "UPDATE acct SET balance = balance - ? WHERE id = ? AND balance >= ?", "insufficient funds",
			func(tr transfer) []any { return []any{tr.Amount, tr.From, tr.Amount} }),
		work(to, "UPDATE acct SET balance = balance + ? WHERE id = ?", "no such account",
			func(tr transfer) []any { return []any{tr.Amount, tr.To} }),
	}
}

// prepared returns the package's prepared XA transactions of gid on b.
func prepared(t *testing.T, b *bank, gid int64) []string {
	t.Helper()
	prefix := txn.XAPrefix + strconv.FormatInt(gid, 10) + "_"
	var out []string
	if b.d == sqllock.Postgres {
		rows, err := b.db.Query("SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, $1)", prefix)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var x string
			if err := rows.Scan(&x); err != nil {
				t.Fatal(err)
			}
			out = append(out, x)
		}
		return out
	}
	rows, err := b.db.Query("XA RECOVER")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var f, g, q int64
		var data string
		if err := rows.Scan(&f, &g, &q, &data); err != nil {
			t.Fatal(err)
		}
		if len(data) >= len(prefix) && data[:len(prefix)] == prefix {
			out = append(out, data)
		}
	}
	return out
}

func noPrepared(t *testing.T, gid int64) {
	t.Helper()
	for _, b := range banks {
		if p := prepared(t, b, gid); len(p) > 0 {
			t.Errorf("%s still has prepared transactions %q", b.name, p)
		}
	}
}

// TestXATransfer moves money from MariaDB to PostgreSQL by two-phase
// commit with the log on either; a branch voting no (more than the
// balance, a missing account) rolls back both; no prepared transaction is
// left behind.
func TestXATransfer(t *testing.T) {
	forEachLog(t, func(t *testing.T, log *bank) {
		m := newManager(t, log, "")
		if err := m.RegisterXA("transfer", xaTransfer(banks[0], banks[1])...); err != nil {
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
		if st := status(t, m, gid); st.State != txn.StateCommitted || st.Mode != txn.ModeXA ||
			!slices.Equal(st.Branches, []string{"confirmed", "confirmed"}) {
			t.Fatalf("status %+v", st)
		}
		noPrepared(t, gid)
		for _, tr := range []transfer{{a, b, 1000}, {a, b + "-missing", 10}} {
			gid, err := m.Run(ctx, "transfer", payload(t, tr), 10*time.Second)
			if !errors.Is(err, txn.ErrAborted) {
				t.Fatalf("Run %+v: %v, want ErrAborted", tr, err)
			}
			if st := status(t, m, gid); st.State != txn.StateAborted {
				t.Fatalf("status %+v", st)
			}
			noPrepared(t, gid)
		}
		x, _, _ := banks[0].account(t, a)
		y, _, _ := banks[1].account(t, b)
		if x != 70 || y != 30 {
			t.Errorf("A = %d, B = %d; want 70, 30", x, y)
		}
	})
}

// TestXARecover abandons an XA transfer after a branch was prepared
// (before the decision: presumed abort, the prepared branch rolled back
// from another session through XA RECOVER's list) and after the decision
// with one branch committed (the other is committed by the recovery).
func TestXARecover(t *testing.T) {
	for _, p := range []struct {
		branch int
		step   string
		moved  bool
	}{{0, "prepared", false}, {1, "prepared", false}, {0, "committed", true}} {
		t.Run(fmt.Sprintf("%s%d", p.step, p.branch), func(t *testing.T) {
			prefix := freshPrefix()
			first := newManager(t, banks[0], prefix, txn.WithLeaseTTL(300*time.Millisecond))
			second := newManager(t, banks[0], prefix)
			for _, m := range []*txn.Manager{first, second} {
				if err := m.RegisterXA("transfer", xaTransfer(banks[0], banks[1])...); err != nil {
					t.Fatal(err)
				}
			}
			a, b := uniqueKey(t)+"a", uniqueKey(t)+"b"
			banks[0].open(t, a, 100)
			banks[1].open(t, b, 0)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			txn.SetTestHook(func(_ int64, branch int, step string) {
				if branch == p.branch && step == p.step {
					cancel()
				}
			})
			gid, err := first.Run(ctx, "transfer", payload(t, transfer{a, b, 30}), 10*time.Second)
			txn.SetTestHook(nil)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("abandoned Run: %v, want context.Canceled", err)
			}
			if p.step == "prepared" && len(prepared(t, banks[p.branch], gid)) != 1 {
				t.Fatalf("branch %d is not left prepared", p.branch)
			}
			recoverOne(t, second)
			want, st := [2]int64{100, 0}, txn.StateAborted
			if p.moved {
				want, st = [2]int64{70, 30}, txn.StateCommitted
			}
			if s := status(t, second, gid); s.State != st {
				t.Errorf("status %+v, want %s", s, st)
			}
			x, _, _ := banks[0].account(t, a)
			y, _, _ := banks[1].account(t, b)
			if x != want[0] || y != want[1] {
				t.Errorf("A = %d, B = %d; want %d, %d", x, y, want[0], want[1])
			}
			noPrepared(t, gid)
		})
	}
}

// TestXAInDoubt: a prepared branch of a transaction the log says aborted
// (a deposed driver's late prepare whose process then died) is rolled
// back by Recover, found by XA RECOVER and pg_prepared_xacts; one of a
// gid the log does not have is left alone.
func TestXAInDoubt(t *testing.T) {
	m := newManager(t, banks[1], "")
	if err := m.RegisterXA("transfer", xaTransfer(banks[0], banks[1])...); err != nil {
		t.Fatal(err)
	}
	a := uniqueKey(t)
	banks[0].open(t, a, 10)
	banks[1].open(t, a, 10)
	ctx := ctxTimeout(t, 20*time.Second)
	gid, err := m.Run(ctx, "transfer", payload(t, transfer{a, a, 1000}), 10*time.Second)
	if !errors.Is(err, txn.ErrAborted) {
		t.Fatalf("Run: %v", err)
	}
	stranger, _ := ids.Next()
	for _, b := range banks {
		for _, g := range []int64{gid, stranger} {
			x := fmt.Sprintf("%s%d_%d", txn.XAPrefix, g, 0)
			c, err := b.db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			stmts := []string{"XA START '" + x + "'", "INSERT INTO acct (id, balance, frozen, incoming) VALUES ('" + x + "', 0, 0, 0)", "XA END '" + x + "'", "XA PREPARE '" + x + "'"}
			if b.d == sqllock.Postgres {
				stmts = []string{"BEGIN", "INSERT INTO acct (id, balance, frozen, incoming) VALUES ('" + x + "', 0, 0, 0)", "PREPARE TRANSACTION '" + x + "'"}
			}
			for _, s := range stmts {
				if _, err := c.ExecContext(ctx, s); err != nil {
					t.Fatalf("%s: %s: %v", b.name, s, err)
				}
			}
			// The session ends: MariaDB keeps the prepared transaction.
			c.Raw(func(any) error { return errBadConn })
			c.Close()
		}
	}
	if n, err := m.Recover(ctx, 0); n != 0 || err != nil {
		t.Fatalf("Recover: %d, %v", n, err)
	}
	noPrepared(t, gid)
	for _, b := range banks {
		p := prepared(t, b, stranger)
		if len(p) != 1 {
			t.Errorf("%s: the stranger's prepared transaction: %q, want left alone", b.name, p)
		}
		stmt := "XA ROLLBACK '" + p[0] + "'"
		if b.d == sqllock.Postgres {
			stmt = "ROLLBACK PREPARED '" + p[0] + "'"
		}
		if _, err := b.db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range banks {
		var n int
		if err := b.db.QueryRow(b.q("SELECT COUNT(*) FROM acct WHERE id LIKE ?"), txn.XAPrefix+"%").Scan(&n); err != nil || n != 0 {
			t.Errorf("%s: %d rows of rolled-back branches (%v)", b.name, n, err)
		}
	}
}

// TestXADeposedDriver: a driver stalled in phase one (branch 0 prepared on
// its pinned MariaDB session, branch 1's work under way on PostgreSQL) is
// deposed by Recover, which rolls the transaction back; the stalled
// driver's late prepare of branch 1 is refused by the log and rolled back
// by the stalled driver itself.
func TestXADeposedDriver(t *testing.T) {
	prefix := freshPrefix()
	slow := newManager(t, banks[0], prefix, txn.WithLeaseTTL(time.Minute))
	fast := newManager(t, banks[0], prefix)
	stalled := make(chan int64, 1)
	release := make(chan struct{})
	branches := xaTransfer(banks[0], banks[1])
	work := branches[1].Work
	branches[1].Work = func(ctx context.Context, ex txn.Execer, br txn.Branch) error {
		if err := work(ctx, ex, br); err != nil {
			return err
		}
		stalled <- br.GID
		<-release
		return nil
	}
	if err := slow.RegisterXA("transfer", branches...); err != nil {
		t.Fatal(err)
	}
	if err := fast.RegisterXA("transfer", xaTransfer(banks[0], banks[1])...); err != nil {
		t.Fatal(err)
	}
	a, b := uniqueKey(t)+"a", uniqueKey(t)+"b"
	banks[0].open(t, a, 100)
	banks[1].open(t, b, 0)
	ctx := ctxTimeout(t, 30*time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := slow.Run(ctx, "transfer", payload(t, transfer{a, b, 30}), 10*time.Second)
		done <- err
	}()
	gid := <-stalled
	if _, err := banks[0].db.ExecContext(ctx, "UPDATE "+prefix+"global SET lease_until = 0 WHERE gid = ?", gid); err != nil {
		t.Fatal(err)
	}
	// The successor rolls back; branch 0, prepared on the stalled
	// driver's MariaDB session, is out of its reach until that driver
	// lets go: it retries.
	recovered := make(chan error, 1)
	go func() {
		n, err := fast.Recover(ctx, 0)
		if err == nil && n != 1 {
			err = fmt.Errorf("Recover drove %d transactions, want 1", n)
		}
		recovered <- err
	}()
	for status(t, fast, gid).State != txn.StateRollingBack {
		if ctx.Err() != nil {
			t.Fatal("the successor did not start rolling back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	if err := <-recovered; err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if err := <-done; !errors.Is(err, txn.ErrDeposed) {
		t.Errorf("the stalled driver's Run: %v, want ErrDeposed", err)
	}
	if st := status(t, fast, gid); st.State != txn.StateAborted {
		t.Errorf("status %+v, want aborted", st)
	}
	noPrepared(t, gid)
	x, _, _ := banks[0].account(t, a)
	y, _, _ := banks[1].account(t, b)
	if x != 100 || y != 0 {
		t.Errorf("A = %d, B = %d; want 100, 0", x, y)
	}
}

// TestXADeposedInPhaseTwo: a driver stalled in phase two (branch 0
// committed on PostgreSQL, branch 1 prepared on its pinned MariaDB
// session) is deposed; the successor cannot reach branch 1 (XAER_NOTA from
// another session, but listed by XA RECOVER) and does not log the
// transaction committed until the stalled driver, refused by the log,
// lets its session go and the successor commits the branch.
func TestXADeposedInPhaseTwo(t *testing.T) {
	prefix := freshPrefix()
	slow := newManager(t, banks[0], prefix, txn.WithLeaseTTL(time.Minute))
	fast := newManager(t, banks[0], prefix)
	for _, m := range []*txn.Manager{slow, fast} {
		if err := m.RegisterXA("transfer", xaTransfer(banks[1], banks[0])...); err != nil {
			t.Fatal(err)
		}
	}
	a, b := uniqueKey(t)+"a", uniqueKey(t)+"b"
	banks[1].open(t, a, 100)
	banks[0].open(t, b, 0)
	ctx := ctxTimeout(t, 30*time.Second)
	stalled := make(chan int64, 1)
	release := make(chan struct{})
	var first atomic.Bool
	txn.SetTestHook(func(gid int64, branch int, step string) {
		// Only the first driver stalls: the hook is the process's.
		if branch == 0 && step == "committed" && first.CompareAndSwap(false, true) {
			stalled <- gid
			<-release
		}
	})
	defer txn.SetTestHook(nil)
	done := make(chan error, 1)
	go func() {
		_, err := slow.Run(ctx, "transfer", payload(t, transfer{a, b, 30}), 10*time.Second)
		done <- err
	}()
	gid := <-stalled
	if _, err := banks[0].db.ExecContext(ctx, "UPDATE "+prefix+"global SET lease_until = 0 WHERE gid = ?", gid); err != nil {
		t.Fatal(err)
	}
	recovered := make(chan error, 1)
	go func() {
		n, err := fast.Recover(ctx, 0)
		if err == nil && n != 1 {
			err = fmt.Errorf("Recover drove %d transactions, want 1", n)
		}
		recovered <- err
	}()
	for status(t, fast, gid).Branches[0] != "confirmed" {
		if ctx.Err() != nil {
			t.Fatal("the successor did not confirm branch 0")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if st := status(t, fast, gid); st.State != txn.StateConfirming || len(prepared(t, banks[0], gid)) != 1 {
		t.Errorf("while branch 1 is prepared on the stalled session: %+v, want confirming", st)
	}
	close(release)
	if err := <-recovered; err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if err := <-done; !errors.Is(err, txn.ErrDeposed) {
		t.Errorf("the stalled driver's Run: %v, want ErrDeposed", err)
	}
	if st := status(t, fast, gid); st.State != txn.StateCommitted {
		t.Errorf("status %+v, want committed", st)
	}
	noPrepared(t, gid)
	x, _, _ := banks[1].account(t, a)
	y, _, _ := banks[0].account(t, b)
	if x != 70 || y != 30 {
		t.Errorf("A = %d, B = %d; want 70, 30", x, y)
	}
}

// TestXASwallowedError: a PostgreSQL branch whose work hides an error that
// aborted its transaction votes no (PREPARE TRANSACTION would roll back
// without an error): the transfer rolls back instead of committing a
// branch that prepared nothing.
func TestXASwallowedError(t *testing.T) {
	m := newManager(t, banks[0], "")
	branches := xaTransfer(banks[0], banks[1])
	work := branches[1].Work
	branches[1].Work = func(ctx context.Context, ex txn.Execer, br txn.Branch) error {
		if err := work(ctx, ex, br); err != nil {
			return err
		}
		_, _ = ex.ExecContext(ctx, "SELECT 1/0") // hidden: the transaction is aborted
		return nil
	}
	if err := m.RegisterXA("transfer", branches...); err != nil {
		t.Fatal(err)
	}
	a, b := uniqueKey(t)+"a", uniqueKey(t)+"b"
	banks[0].open(t, a, 100)
	banks[1].open(t, b, 0)
	gid, err := m.Run(ctxTimeout(t, 10*time.Second), "transfer", payload(t, transfer{a, b, 30}), 5*time.Second)
	if !errors.Is(err, txn.ErrAborted) {
		t.Fatalf("Run: %v, want ErrAborted", err)
	}
	noPrepared(t, gid)
	x, _, _ := banks[0].account(t, a)
	y, _, _ := banks[1].account(t, b)
	if x != 100 || y != 0 {
		t.Errorf("A = %d, B = %d; want 100, 0", x, y)
	}
}
