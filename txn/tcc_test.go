package txn_test

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/txn"
)

// TestTCCTransfer moves money from MariaDB to PostgreSQL by TCC with the
// log on either: Try freezes, Confirm moves; a Try refused cancels every
// branch; nothing stays frozen and the total never changes.
func TestTCCTransfer(t *testing.T) {
	forEachLog(t, func(t *testing.T, log *bank) {
		m := newManager(t, log, "")
		if err := m.RegisterTCC("transfer", tccTransfer(banks[0], banks[1], nil)...); err != nil {
			t.Fatal(err)
		}
		a, b := uniqueKey(t)+"a", uniqueKey(t)+"b"
		banks[0].open(t, a, 100)
		banks[1].open(t, b, 0)
		ctx := ctxTimeout(t, 20*time.Second)
		gid, err := m.Run(ctx, "transfer", payload(t, transfer{a, b, 40}), 10*time.Second)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if st := status(t, m, gid); st.State != txn.StateCommitted || st.Mode != txn.ModeTCC ||
			!slices.Equal(st.Branches, []string{"confirmed", "confirmed"}) {
			t.Fatalf("status %+v", st)
		}
		// Try of more than A has: refused; both branches cancelled (the
		// second's Try never ran: its Cancel is not called, branch 1 is
		// still pending).
		gid, err = m.Run(ctx, "transfer", payload(t, transfer{a, b, 1000}), 10*time.Second)
		if !errors.Is(err, txn.ErrAborted) || !errors.Is(err, txn.ErrAbort) {
			t.Fatalf("Run of 1000: %v, want ErrAborted", err)
		}
		if st := status(t, m, gid); st.State != txn.StateAborted || !slices.Equal(st.Branches, []string{"undone", "pending"}) {
			t.Fatalf("status %+v", st)
		}
		// To a missing account: A's Try froze the amount, B's refused;
		// both cancelled.
		gid, err = m.Run(ctx, "transfer", payload(t, transfer{a, b + "-missing", 10}), 10*time.Second)
		if !errors.Is(err, txn.ErrAborted) {
			t.Fatalf("Run to a missing account: %v, want ErrAborted", err)
		}
		if st := status(t, m, gid); st.State != txn.StateAborted || !slices.Equal(st.Branches, []string{"undone", "undone"}) {
			t.Fatalf("status %+v", st)
		}
		x, xf, xi := banks[0].account(t, a)
		y, yf, yi := banks[1].account(t, b)
		if x != 60 || y != 40 || xf != 0 || xi != 0 || yf != 0 || yi != 0 {
			t.Errorf("A = %d (frozen %d, incoming %d), B = %d (frozen %d, incoming %d); want 60 and 40, nothing frozen",
				x, xf, xi, y, yf, yi)
		}
	})
}

// TestRetriedConfirmRunsOnce: a Confirm whose local transaction committed
// but whose reply was lost is called again; the barrier skips the repeat,
// so the money moves once.
func TestRetriedConfirmRunsOnce(t *testing.T) {
	m := newManager(t, banks[0], "")
	var ran, calls atomic.Int64
	h := &hooks{after: func(br txn.Branch, r bool) error {
		if br.Op != txn.OpConfirm || br.ID != 1 {
			return nil
		}
		if r {
			ran.Add(1)
		}
		if calls.Add(1) <= 2 {
			return errLostReply
		}
		return nil
	}}
	if err := m.RegisterTCC("transfer", tccTransfer(banks[0], banks[1], h)...); err != nil {
		t.Fatal(err)
	}
	a, b := uniqueKey(t)+"a", uniqueKey(t)+"b"
	banks[0].open(t, a, 100)
	banks[1].open(t, b, 0)
	if _, err := m.Run(ctxTimeout(t, 10*time.Second), "transfer", payload(t, transfer{a, b, 25}), 5*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if calls.Load() != 3 || ran.Load() != 1 {
		t.Errorf("Confirm called %d times, ran %d; want 3 and 1", calls.Load(), ran.Load())
	}
	if y, _, yi := banks[1].account(t, b); y != 25 || yi != 0 {
		t.Errorf("B = %d (incoming %d), want 25 (0)", y, yi)
	}
}
