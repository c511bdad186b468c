package main

import (
	"maps"
	"slices"
	"testing"
)

// bankRun builds the state of a bank run: m0 and p0 moved 100 (committed
// Saga 1), a refused TCC transfer (2: its Try on p0 frozen then
// cancelled), an aborted XA transfer (3: nothing applied) and a Saga
// stuck after its debit (4: 50 off m1), each op behind its barrier row.
func bankRun() ([]Event, bankState) {
	st := bankState{Finished: 1}
	for _, p := range bankPrefix {
		for a := range bankAccounts {
			st.Accounts = append(st.Accounts, bankAccount{ID: p + string(rune('0'+a)), Balance: bankOpening})
		}
	}
	acct := func(id string) *bankAccount {
		for i := range st.Accounts {
			if st.Accounts[i].ID == id {
				return &st.Accounts[i]
			}
		}
		panic(id)
	}
	apply := func(gid int64, branch int, op, id string, dbal, dfrozen, dinc int64) {
		st.Hist = append(st.Hist, bankHistRow{GID: gid, Branch: branch, Op: op, Acct: id, DBal: dbal, DFrozen: dfrozen, DInc: dinc})
		a := acct(id)
		a.Balance, a.Frozen, a.Incoming = a.Balance+dbal, a.Frozen+dfrozen, a.Incoming+dinc
		if op != "xa" {
			st.Barrier = append(st.Barrier, bankBarrier{DB: id[:1], GID: gid, Branch: branch, Op: op, Reason: op})
		}
	}
	apply(1, 0, "action", "m0", -100, 0, 0)
	apply(1, 1, "action", "p0", 100, 0, 0)
	apply(2, 0, "try", "p0", -70, 70, 0)
	apply(2, 0, "cancel", "p0", 70, -70, 0)
	// gid 2's branch 1 refused: its cancel is a null compensation, rows only.
	st.Barrier = append(st.Barrier, bankBarrier{DB: "m", GID: 2, Branch: 1, Op: "try", Reason: "cancel"},
		bankBarrier{DB: "m", GID: 2, Branch: 1, Op: "cancel", Reason: "cancel"})
	apply(4, 0, "action", "m1", -50, 0, 0)
	st.Txns = []bankTxn{
		{GID: 1, Name: "saga-mp", State: "committed", Transfer: bankTransfer{"m0", "p0", 100}},
		{GID: 2, Name: "tcc-pm", State: "aborted", Reason: "branch 1 try refused", Transfer: bankTransfer{"p0", "m9", 70}},
		{GID: 3, Name: "xa-mp", State: "aborted", Reason: "branch 0 try refused", Transfer: bankTransfer{"m2", "p2", 5000}},
		{GID: 4, Name: "saga-mp", State: "stuck", Reason: "branch 1 action still failing at the deadline", Transfer: bankTransfer{"m1", "p1", 50}},
	}
	evs := []Event{
		{Proc: "s0.1", Op: opTxn, Key: "saga-mp", Val: 1, Res: "committed", Mono: 1},
		{Proc: "s0.1", Op: opLostReply, Key: "action", Val: 1, Mono: 2},
		{Proc: "s1.1", Op: opTxn, Key: "tcc-pm", Val: 2, Res: "aborted", Mono: 3},
		{Proc: "s1.1", Op: opTxn, Key: "saga-mp", Val: 4, Res: "stuck", Mono: 4},
	}
	return evs, st
}

// TestCheckBank: a consistent run passes, and each way the bank can break
// is the anomaly the checker documents.
func TestCheckBank(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func(evs []Event, st *bankState) []Event
		want   []string
	}{
		{"consistent", func(evs []Event, st *bankState) []Event { return evs }, nil},
		{"branch applied twice", func(evs []Event, st *bankState) []Event {
			// The barrier let a repeat of gid 1's debit through.
			st.Hist = append(st.Hist, bankHistRow{GID: 1, Branch: 0, Op: "action", Acct: "m0", DBal: -100})
			st.Accounts[0].Balance -= 100
			return evs
		}, []string{aBankTwice, aBankUnbalanced, aBankTotal}},
		{"applied without its barrier row", func(evs []Event, st *bankState) []Event {
			st.Barrier = slices.DeleteFunc(st.Barrier, func(b bankBarrier) bool { return b.GID == 1 && b.Branch == 1 })
			return evs
		}, []string{aBankNoBarrier}},
		{"row inserted by another op", func(evs []Event, st *bankState) []Event {
			for i := range st.Barrier {
				if st.Barrier[i].GID == 1 && st.Barrier[i].Branch == 1 {
					st.Barrier[i].Reason = "compensate"
				}
			}
			return evs
		}, []string{aBankNoBarrier}},
		{"aborted with an effect", func(evs []Event, st *bankState) []Event {
			st.Hist = slices.DeleteFunc(st.Hist, func(h bankHistRow) bool { return h.GID == 2 && h.Op == "cancel" })
			st.Accounts[3].Balance, st.Accounts[3].Frozen = st.Accounts[3].Balance-70, 70
			return evs
		}, []string{aBankUnbalanced, aBankTotal}},
		{"not final", func(evs []Event, st *bankState) []Event {
			st.Txns[1].State = "rolling_back"
			return evs
		}, []string{aBankNotFinal, aBankResult}},
		{"stuck without reason", func(evs []Event, st *bankState) []Event {
			st.Txns[3].Reason = ""
			return evs
		}, []string{aBankStuckNoWhy}},
		{"answer contradicts the log", func(evs []Event, st *bankState) []Event {
			return append(evs, Event{Proc: "s2.1", Op: opTxn, Key: "xa-mp", Val: 3, Res: "committed", Mono: 5})
		}, []string{aBankResult}},
		{"negative balance", func(evs []Event, st *bankState) []Event {
			// A debit that did not check: its ledger is consistent, the
			// sign is not.
			st.Hist = append(st.Hist, bankHistRow{GID: 1, Branch: 0, Op: "action", Acct: "m2", DBal: -1500})
			st.Hist = append(st.Hist, bankHistRow{GID: 1, Branch: 1, Op: "action", Acct: "p2", DBal: 1500})
			st.Accounts[2].Balance -= 1500
			st.Accounts[5].Balance += 1500
			return evs
		}, []string{aBankNegative, aBankTwice, aBankUnbalanced}},
		{"ledger", func(evs []Event, st *bankState) []Event {
			st.Accounts[4].Balance += 10 // a change with no history row
			return evs
		}, []string{aBankLedger, aBankTotal}},
		{"final recovery gave up", func(evs []Event, st *bankState) []Event {
			st.FinishErr = "1 transactions unfinished"
			return evs
		}, []string{aBankNotFinal}},
	} {
		t.Run(c.name, func(t *testing.T) {
			evs, st := bankRun()
			evs = c.mutate(evs, &st)
			r := checkBank(evs, st)
			got := slices.Sorted(maps.Keys(r.Anomalies))
			want := slices.Sorted(slices.Values(c.want))
			if !slices.Equal(got, want) {
				t.Errorf("anomalies %v, want %v; violations %+v", r.Anomalies, want, r.Violations)
			}
			if c.want == nil && (r.Info[iBankCommitted] != 1 || r.Info[iBankAborted] != 2 || r.Info[iBankStuck] != 1 ||
				r.Info[iBankLost] != 1 || r.Sections != 3 || r.Procs != 2) {
				t.Errorf("counts: %v, sections %d, processes %d", r.Info, r.Sections, r.Procs)
			}
		})
	}
}
