package txn_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/election"
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/txn"
)

// TestRecoverAbandoned abandons a transfer between every two steps (the
// driver's ctx is cancelled right after a branch func's local transaction
// committed, before the log says so) and recovers it from a second
// Manager once the lease expired: a Saga goes forward and commits, a TCC
// transaction interrupted in its Try phase is cancelled, one interrupted
// in its Confirm or Cancel phase finishes it. The total never changes and
// no branch op applies twice.
func TestRecoverAbandoned(t *testing.T) {
	type point struct {
		mode   txn.Mode
		op     txn.Op
		branch int
		amount int64 // 1000: refused by A's branch, 1: to a missing account
		want   txn.State
	}
	var points []point
	for _, br := range []int{0, 1} {
		points = append(points,
			point{txn.ModeSaga, txn.OpAction, br, 30, txn.StateCommitted},
			point{txn.ModeTCC, txn.OpTry, br, 30, txn.StateAborted},
			point{txn.ModeTCC, txn.OpConfirm, br, 30, txn.StateCommitted})
	}
	// Rollbacks: the credit to a missing account is refused after A's
	// debit, then A's undo is abandoned.
	points = append(points,
		point{txn.ModeSaga, txn.OpCompensate, 0, -1, txn.StateAborted},
		point{txn.ModeTCC, txn.OpCancel, 0, -1, txn.StateAborted})
	log := banks[0]
	prefix := freshPrefix()
	first := newManager(t, log, prefix, txn.WithLeaseTTL(300*time.Millisecond))
	second := newManager(t, log, prefix, txn.WithLeaseTTL(2*time.Second))
	var runs [2][5]atomic.Int64 // per branch, per op: local transactions that ran
	opIndex := map[txn.Op]int{txn.OpAction: 0, txn.OpCompensate: 1, txn.OpTry: 2, txn.OpConfirm: 3, txn.OpCancel: 4}
	var abandon atomic.Pointer[func(txn.Branch)]
	h := &hooks{after: func(br txn.Branch, ran bool) error {
		if ran {
			runs[br.ID][opIndex[br.Op]].Add(1)
		}
		if f := abandon.Load(); f != nil {
			(*f)(br)
		}
		return nil
	}}
	for _, m := range []*txn.Manager{first, second} {
		if err := m.RegisterSaga("saga", sagaTransfer(banks[0], banks[1], h)...); err != nil {
			t.Fatal(err)
		}
		if err := m.RegisterTCC("tcc", tccTransfer(banks[0], banks[1], h)...); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range points {
		t.Run(fmt.Sprintf("%s_%s%d", p.mode, p.op, p.branch), func(t *testing.T) {
			for i := range runs {
				for j := range runs[i] {
					runs[i][j].Store(0)
				}
			}
			a, b := uniqueKey(t)+"a", uniqueKey(t)+"b"
			banks[0].open(t, a, 100)
			banks[1].open(t, b, 0)
			to, amount := b, p.amount
			if amount < 0 {
				to, amount = b+"-missing", 30
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := func(br txn.Branch) {
				if br.Op == p.op && br.ID == p.branch {
					cancel()
				}
			}
			abandon.Store(&f)
			_, err := first.Run(ctx, string(p.mode), payload(t, transfer{a, to, amount}), 10*time.Second)
			abandon.Store(nil)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("abandoned Run: %v, want context.Canceled", err)
			}
			recoverOne(t, second)
			x, xf, xi := banks[0].account(t, a)
			y, yf, yi := banks[1].account(t, b)
			want := [2]int64{100, 0}
			if p.want == txn.StateCommitted {
				want = [2]int64{70, 30}
			}
			if x != want[0] || y != want[1] || xf+xi+yf+yi != 0 {
				t.Errorf("A = %d (%d, %d), B = %d (%d, %d); want %d and %d, nothing frozen", x, xf, xi, y, yf, yi, want[0], want[1])
			}
			for br := range runs {
				for op, i := range opIndex {
					if n := runs[br][i].Load(); n > 1 {
						t.Errorf("branch %d %s applied %d times", br, op, n)
					}
				}
			}
			stuck, err := second.Stuck(ctxTimeout(t, 5*time.Second), 0)
			if err != nil || len(stuck) != 0 {
				t.Errorf("Stuck: %v, %v", stuck, err)
			}
		})
	}
	// Every transaction of the log reached the state its point wants.
	n, err := second.Recover(ctxTimeout(t, 5*time.Second), 0)
	if n != 0 || err != nil {
		t.Errorf("a last Recover: %d, %v; want 0, nil", n, err)
	}
}

// TestDeposedDriverRefused: a driver whose lease expired while it was
// stalled in a branch func is deposed by Recover, which finishes the
// transaction; the stalled driver's late action is skipped by the barrier
// and its next write to the log is refused by token.
func TestDeposedDriverRefused(t *testing.T) {
	for _, log := range banks {
		t.Run("log="+log.name, func(t *testing.T) {
			prefix := freshPrefix()
			// A lease long enough that the stalled driver renews nothing
			// during the test: the test expires it, as a pause would.
			slow := newManager(t, log, prefix, txn.WithLeaseTTL(time.Minute))
			fast := newManager(t, log, prefix)
			stalled := make(chan int64, 1)
			release := make(chan struct{})
			var calls, ran atomic.Int64
			h := &hooks{after: func(br txn.Branch, r bool) error {
				if br.Op == txn.OpAction && br.ID == 0 && r {
					ran.Add(1)
				}
				return nil
			}}
			steps := sagaTransfer(banks[0], banks[1], h)
			action := steps[0].Action
			steps[0].Action = func(ctx context.Context, br txn.Branch) error {
				if calls.Add(1) == 1 {
					stalled <- br.GID
					<-release
				}
				return action(ctx, br)
			}
			if err := slow.RegisterSaga("saga", steps...); err != nil {
				t.Fatal(err)
			}
			if err := fast.RegisterSaga("saga", sagaTransfer(banks[0], banks[1], h)...); err != nil {
				t.Fatal(err)
			}
			a, b := uniqueKey(t)+"a", uniqueKey(t)+"b"
			banks[0].open(t, a, 100)
			banks[1].open(t, b, 0)
			ctx := ctxTimeout(t, 20*time.Second)
			done := make(chan error, 1)
			go func() {
				_, err := slow.Run(ctx, "saga", payload(t, transfer{a, b, 30}), 10*time.Second)
				done <- err
			}()
			gid := <-stalled
			// The lease is live: Recover leaves the transaction alone.
			if n, err := fast.Recover(ctx, 0); n != 0 || err != nil || status(t, fast, gid).Token != 1 {
				t.Fatalf("Recover under a live lease: %d, %v, token %d", n, err, status(t, fast, gid).Token)
			}
			if _, err := log.db.ExecContext(ctx, log.q("UPDATE "+prefix+"global SET lease_until = 0 WHERE gid = ?"), gid); err != nil {
				t.Fatal(err)
			}
			// A Manager that does not know the type reports it and
			// leaves the transaction for one that does.
			stranger := newManager(t, log, prefix)
			if n, err := stranger.Recover(ctx, 0); n != 0 || !errors.Is(err, txn.ErrInvalid) || status(t, fast, gid).Token != 1 {
				t.Fatalf("Recover by a Manager without the type: %d, %v, token %d; want 0, ErrInvalid, 1", n, err, status(t, fast, gid).Token)
			}
			recoverOne(t, fast)
			close(release)
			if err := <-done; !errors.Is(err, txn.ErrDeposed) {
				t.Fatalf("deposed driver's Run: %v, want ErrDeposed", err)
			}
			st := status(t, fast, gid)
			if st.State != txn.StateCommitted || st.Token != 2 || !slices.Equal(st.Branches, []string{"done", "done"}) {
				t.Errorf("status %+v, want committed by token 2", st)
			}
			x, _, _ := banks[0].account(t, a)
			y, _, _ := banks[1].account(t, b)
			if x != 70 || y != 30 || ran.Load() != 1 {
				t.Errorf("A = %d, B = %d, action 0 ran %d times; want 70, 30, 1", x, y, ran.Load())
			}
		})
	}
}

// recoverOne calls Recover until it has driven one transaction to its end
// (the abandoned driver's lease must expire first).
func recoverOne(t *testing.T, m *txn.Manager) {
	t.Helper()
	ctx := ctxTimeout(t, 20*time.Second)
	for {
		n, err := m.Recover(ctx, 0)
		if err != nil {
			t.Fatalf("Recover: %v", err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("Recover drove nothing within 20 s")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestRecoverUnderElection: two instances run RecoverLoop under an
// election (a lease-table lock on MariaDB); the leader finishes a
// transaction a third Manager abandoned.
func TestRecoverUnderElection(t *testing.T) {
	log := banks[0]
	prefix := freshPrefix()
	first := newManager(t, log, prefix, txn.WithLeaseTTL(300*time.Millisecond))
	abandoned, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	// The first driver is abandoned once its first action committed.
	if err := first.RegisterSaga("saga", sagaTransfer(banks[0], banks[1], &hooks{after: func(txn.Branch, bool) error {
		cancelRun()
		return nil
	}})...); err != nil {
		t.Fatal(err)
	}
	steps := sagaTransfer(banks[0], banks[1], nil)
	locker, err := sqllock.NewLeaseTable(log.db, sqllock.MySQL, sqllock.WithTable(prefix+"locks"),
		sqllock.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := locker.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	loops, stop := context.WithCancel(ctx)
	defer stop()
	for i := range 2 {
		m := newManager(t, log, prefix)
		if err := m.RegisterSaga("saga", steps...); err != nil {
			t.Fatal(err)
		}
		e, err := election.New(locker, "txn-recovery", election.WithIdentity(fmt.Sprint("instance-", i)),
			election.WithTTL(time.Second), election.WithRetryPeriod(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.Run(loops, func(ctx context.Context, _ *election.Term) error {
				return m.RecoverLoop(ctx, 50*time.Millisecond)
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	a, b := uniqueKey(t)+"a", uniqueKey(t)+"b"
	banks[0].open(t, a, 100)
	banks[1].open(t, b, 0)
	gid, err := first.Run(abandoned, "saga", payload(t, transfer{a, b, 30}), 10*time.Second)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned Run: %v, want context.Canceled", err)
	}
	for status(t, first, gid).State != txn.StateCommitted {
		if ctx.Err() != nil {
			t.Fatalf("not recovered: %+v", status(t, first, gid))
		}
		time.Sleep(20 * time.Millisecond)
	}
	x, _, _ := banks[0].account(t, a)
	y, _, _ := banks[1].account(t, b)
	if x != 70 || y != 30 {
		t.Errorf("A = %d, B = %d; want 70, 30", x, y)
	}
	if err := first.RecoverLoop(ctx, 0); !errors.Is(err, txn.ErrInvalid) {
		t.Errorf("RecoverLoop(0): %v, want ErrInvalid", err)
	}
}
