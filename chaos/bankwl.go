package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/txn"
)

// The bank backend (Jepsen's bank workload on package txn): bankAccounts
// accounts in MariaDB (m0, m1, ...) and as many in PostgreSQL (p0, ...),
// bankOpening each. Every client process runs workers goroutines that
// transfer random amounts from an account of one database to one of the
// other, each by a Saga, TCC or XA global transaction (txn.Manager, its
// log in MariaDB, lease TTL -ttl), and a txn.Manager.RecoverLoop of its
// own (several at once: the doc calls that safe, only wasteful), so that a
// transaction whose process was killed, paused or cut off is driven on by
// another. The nemesis kills and pauses client processes, cuts and
// black-holes their connections, pauses and kill -9s a database.
//
// Every Saga or TCC branch func changes one account and appends a row to
// the database's bank_hist (gid, branch, op, account, deltas) in one local
// transaction behind the database's txn.Barrier; an XA branch does the
// same inside its XA transaction (op "xa"). A debit refuses (txn.ErrAbort;
// for XA the "no" vote) an amount above the balance: no balance goes
// negative. A fraction bankLostReply of the Saga and TCC branch calls
// return an error after their local transaction committed, as a COMMIT
// whose reply was lost does: the driver calls the op again, and the
// barrier must answer for it.
//
// After the heal and the quiet period the clients are stopped, and the
// orchestrator, as a new process would, runs Recover until every
// transaction of the log is final (bankFinish); then it reads the
// accounts, bank_hist, the barrier rows and the log into bank.json, which
// checkBank judges (see its anomalies).
const (
	bankAccounts  = 3    // per database
	bankOpening   = 1000 // each account's opening balance
	bankMaxAmount = 400  // a transfer moves 1..bankMaxAmount: some are refused
	// bankDeadline is each global transaction's timeout: past it, a
	// branch still failing leaves the transaction stuck (needs a person).
	bankDeadline = 8 * time.Second
	// bankLostReply is the fraction of Saga and TCC branch calls that
	// report an error after their local transaction committed.
	bankLostReply = 0.05
	// bankFinishWait bounds the final recovery: every transaction is
	// final after the last lease and the deadline have passed.
	bankFinishWait = time.Minute
)

// Ops of the bank backend's histories: a global transaction's result
// (Key its type, Val its gid, Res committed, aborted, stuck, deposed or
// the error) and an injected lost reply (Key the op, Val the gid).
const (
	opTxn       = "txn"
	opLostReply = "lostreply"
)

// Anomalies of the bank backend (checkBank).
const (
	aBankTotal      = "bank-total-changed"           // the balances' total is not the opening total (stuck transactions' partial effects aside)
	aBankNegative   = "bank-negative-balance"        // a balance, frozen or incoming amount below zero
	aBankNotFinal   = "bank-txn-not-final"           // a transaction neither committed, aborted nor stuck after the final recovery
	aBankStuckNoWhy = "bank-stuck-without-reason"    // a stuck transaction whose log gives no reason
	aBankTwice      = "bank-branch-applied-twice"    // a branch op's effects in the history more than once
	aBankNoBarrier  = "bank-applied-without-barrier" // a Saga or TCC op's effects with no barrier row of that op
	aBankUnbalanced = "bank-txn-effects-wrong"       // a committed transaction that did not move exactly its amount, or an aborted one with net effects
	aBankLedger     = "bank-ledger-mismatch"         // an account whose balance is not its opening plus its history
	aBankResult     = "bank-result-contradicts-log"  // Run answered committed (aborted) and the log says otherwise
)

// Other counts of the bank backend.
const (
	iBankCommitted = "txn-committed"
	iBankAborted   = "txn-aborted"
	iBankStuck     = "txn-stuck"
	iBankLost      = "lost-replies-injected"
	iBankRunErrors = "run-errors" // Run returned another error (ctx, the log unreachable, deposed): left to recovery
	iBankFinal     = "finished-by-final-recovery"
)

// bankModes are the transaction types' modes; each is registered once per
// direction: "<mode>-mp" moves money from MariaDB to PostgreSQL, "-pm" back.
var bankModes = []txn.Mode{txn.ModeSaga, txn.ModeTCC, txn.ModeXA}

// bankPrefix is the account prefix of each database (MariaDB first).
var bankPrefix = [2]string{"m", "p"}

// bankTransfer is a transfer's payload.
type bankTransfer struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Amount int64  `json:"amount"`
}

// bankDB is one of the two databases as the workload uses it.
type bankDB struct {
	db  *sql.DB
	d   sqllock.Dialect
	bar *txn.Barrier
}

func newBankDB(db *sql.DB, d sqllock.Dialect) (*bankDB, error) {
	bar, err := txn.NewBarrier(d, "")
	if err != nil {
		return nil, err
	}
	return &bankDB{db: db, d: d, bar: bar}, nil
}

// q rewrites '?' placeholders for PostgreSQL.
func (b *bankDB) q(s string) string {
	if b.d != sqllock.Postgres {
		return s
	}
	var out strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			fmt.Fprintf(&out, "$%d", n)
			continue
		}
		out.WriteRune(r)
	}
	return out.String()
}

// errInsufficient is a debit's refusal.
var errInsufficient = errors.New("insufficient funds")

// errLostReply is what a branch call whose local transaction committed
// answers when the workload loses its reply.
var errLostReply = errors.New("chaos: reply to COMMIT lost (injected)")

// apply changes acct by the deltas and appends the history row, with ex
// (the local transaction, or the XA branch's connection). A debit
// (guard) changes nothing and returns errInsufficient if the balance is
// below -dbal.
func (b *bankDB) apply(ctx context.Context, ex txn.Execer, br txn.Branch, op, acct string, dbal, dfrozen, dinc int64, guard bool) error {
	stmt := "UPDATE bank_acct SET balance = balance + ?, frozen = frozen + ?, incoming = incoming + ? WHERE id = ?"
	args := []any{dbal, dfrozen, dinc, acct}
	if guard {
		stmt += " AND balance >= ?"
		args = append(args, -dbal)
	}
	res, err := ex.ExecContext(ctx, b.q(stmt), args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		if guard {
			return errInsufficient
		}
		return fmt.Errorf("chaos: no account %q", acct)
	}
	_, err = ex.ExecContext(ctx, b.q("INSERT INTO bank_hist (gid, branch, op, acct, dbal, dfrozen, dincoming) VALUES (?, ?, ?, ?, ?, ?, ?)"),
		br.GID, br.ID, op, acct, dbal, dfrozen, dinc)
	return err
}

// fn is a Saga or TCC branch func: decode the payload, then apply the
// deltas that change(t) returns (acct and deltas) behind the barrier, in a
// local transaction of its own. A refused debit wraps txn.ErrAbort.
func (b *bankDB) fn(rec *Recorder, guard bool, change func(t bankTransfer) (string, int64, int64, int64)) txn.Func {
	return func(ctx context.Context, br txn.Branch) error {
		var t bankTransfer
		if err := json.Unmarshal(br.Payload, &t); err != nil {
			return fmt.Errorf("%w: %w", txn.ErrAbort, err)
		}
		acct, dbal, dfrozen, dinc := change(t)
		_, err := b.bar.Do(ctx, b.db, br, func(tx *sql.Tx) error {
			return b.apply(ctx, tx, br, string(br.Op), acct, dbal, dfrozen, dinc, guard)
		})
		if errors.Is(err, errInsufficient) {
			return fmt.Errorf("%w: %w", txn.ErrAbort, err)
		}
		if err == nil && rec != nil && rand.Float64() < bankLostReply {
			rec.Record(Event{Op: opLostReply, Key: string(br.Op), Val: br.GID})
			return errLostReply
		}
		return err
	}
}

// xa is an XA branch: the same change inside the branch's XA transaction;
// a refused debit is the branch's "no" vote.
func (b *bankDB) xa(guard bool, change func(t bankTransfer) (string, int64, int64, int64)) txn.XABranch {
	return txn.XABranch{DB: b.db, Dialect: b.d, Work: func(ctx context.Context, ex txn.Execer, br txn.Branch) error {
		var t bankTransfer
		if err := json.Unmarshal(br.Payload, &t); err != nil {
			return err
		}
		acct, dbal, dfrozen, dinc := change(t)
		return b.apply(ctx, ex, br, "xa", acct, dbal, dfrozen, dinc, guard)
	}}
}

// registerBank registers the six transfer types on m: from dbs[0] to
// dbs[1] ("-mp") and back ("-pm"), by each mode. rec (nil in the
// orchestrator) records the injected lost replies; the orchestrator
// injects none.
func registerBank(m *txn.Manager, dbs [2]*bankDB, rec *Recorder) error {
	from := func(t bankTransfer) string { return t.From }
	to := func(t bankTransfer) string { return t.To }
	ch := func(acct func(bankTransfer) string, bal, frozen, inc int64) func(bankTransfer) (string, int64, int64, int64) {
		return func(t bankTransfer) (string, int64, int64, int64) {
			return acct(t), bal * t.Amount, frozen * t.Amount, inc * t.Amount
		}
	}
	for dir, pair := range map[string][2]*bankDB{"mp": {dbs[0], dbs[1]}, "pm": {dbs[1], dbs[0]}} {
		f, t := pair[0], pair[1]
		if err := m.RegisterSaga("saga-"+dir,
			txn.SagaStep{Action: f.fn(rec, true, ch(from, -1, 0, 0)), Compensate: f.fn(rec, false, ch(from, 1, 0, 0))},
			txn.SagaStep{Action: t.fn(rec, false, ch(to, 1, 0, 0)), Compensate: t.fn(rec, false, ch(to, -1, 0, 0))},
		); err != nil {
			return err
		}
		if err := m.RegisterTCC("tcc-"+dir,
			txn.TCCBranch{ // Try freezes, Confirm spends the frozen amount, Cancel gives it back
				Try:     f.fn(rec, true, ch(from, -1, 1, 0)),
				Confirm: f.fn(rec, false, ch(from, 0, -1, 0)),
				Cancel:  f.fn(rec, false, ch(from, 1, -1, 0)),
			},
			txn.TCCBranch{ // Try announces, Confirm credits, Cancel withdraws the announcement
				Try:     t.fn(rec, false, ch(to, 0, 0, 1)),
				Confirm: t.fn(rec, false, ch(to, 1, 0, -1)),
				Cancel:  t.fn(rec, false, ch(to, 0, 0, -1)),
			},
		); err != nil {
			return err
		}
		if err := m.RegisterXA("xa-"+dir, f.xa(true, ch(from, -1, 0, 0)), t.xa(false, ch(to, 1, 0, 0))); err != nil {
			return err
		}
	}
	return nil
}

// bankDSNs are the clients' DSNs through their proxies: row lock waits
// end after 1 s on MariaDB and 3 s on PostgreSQL (a branch that waits
// longer fails and is retried, or votes no), so that two XA transfers
// waiting for each other's rows across the two databases end.
func bankDSNs(my *testserver.MariaDB, pg *testserver.Postgres, myAddr, pgAddr string) []string {
	return []string{my.DSNAt(myAddr, "innodb_lock_wait_timeout=1"), pg.DSNAt(pgAddr, "lock_timeout=3000")}
}

// openBank opens the two databases at dsns and a Manager whose log is in
// the first, gids from a Snowflake of worker worker.
func openBank(dsns []string, worker int64, ttl time.Duration, rec *Recorder) (*txn.Manager, [2]*bankDB, func(), error) {
	var dbs [2]*bankDB
	var pools []*sql.DB
	closeAll := func() {
		for _, db := range pools {
			db.Close()
		}
	}
	for i, p := range []struct {
		driver string
		d      sqllock.Dialect
	}{{"mysql", sqllock.MySQL}, {"pgx", sqllock.Postgres}} {
		db, err := sql.Open(p.driver, dsns[i])
		if err != nil {
			closeAll()
			return nil, dbs, nil, err
		}
		pools = append(pools, db)
		if dbs[i], err = newBankDB(db, p.d); err != nil {
			closeAll()
			return nil, dbs, nil, err
		}
	}
	ids, err := idgen.NewSnowflake(idgen.Layout{}, worker)
	if err == nil {
		var m *txn.Manager
		if m, err = txn.New(dbs[0].db, sqllock.MySQL, ids, txn.WithLeaseTTL(ttl)); err == nil {
			if err = registerBank(m, dbs, rec); err == nil {
				return m, dbs, closeAll, nil
			}
		}
	}
	closeAll()
	return nil, dbs, nil, err
}

// runBank is the bank backend's client: cfg.addrs are the MariaDB and
// PostgreSQL DSNs; it runs until ctx ends.
func runBank(ctx context.Context, cfg clientConfig, rec *Recorder) error {
	if len(cfg.addrs) != 2 {
		return errors.New("chaos client: bank needs the MariaDB and PostgreSQL DSNs in -addrs")
	}
	// The seed is run seed × 1000 + slot × 100 + generation: its last
	// three digits tell the processes of a run apart (their gids too).
	m, _, closeDBs, err := openBank(cfg.addrs, int64(cfg.seed%1000), cfg.ttl, rec)
	if err != nil {
		return err
	}
	defer closeDBs()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned by runBank: ends when ctx ends
		defer wg.Done()
		m.RecoverLoop(ctx, cfg.ttl/3)
	}()
	for g := range cfg.workers {
		wg.Add(1)
		go func() { // owned by runBank: ends when ctx ends
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(cfg.seed, uint64(g)))
			for ctx.Err() == nil {
				if !bankTransferOnce(ctx, m, rec, g, rnd) {
					// The log unreachable (a database down or cut off):
					// not a busy loop of failing transfers.
					sleepCtx(ctx, 50*time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// bankTransferOnce runs one transfer of a random type, accounts and amount
// and records its result; it reports whether the transaction was logged
// and driven to an answer (committed, aborted, stuck or deposed).
func bankTransferOnce(ctx context.Context, m *txn.Manager, rec *Recorder, g int, rnd *rand.Rand) bool {
	dir := rnd.IntN(2) // 0: MariaDB to PostgreSQL
	t := bankTransfer{
		From:   fmt.Sprintf("%s%d", bankPrefix[dir], rnd.IntN(bankAccounts)),
		To:     fmt.Sprintf("%s%d", bankPrefix[1-dir], rnd.IntN(bankAccounts)),
		Amount: 1 + rnd.Int64N(bankMaxAmount),
	}
	name := fmt.Sprintf("%s-%s", bankModes[rnd.IntN(len(bankModes))], [2]string{"mp", "pm"}[dir])
	p, _ := json.Marshal(t) // a struct of strings and an int
	gid, err := m.Run(ctx, name, p, bankDeadline)
	if ctx.Err() != nil && err != nil {
		return true // stopped: the transaction is recovery's
	}
	res := "committed"
	if err != nil {
		res = errKind(err, errName{txn.ErrAborted, "aborted"}, errName{txn.ErrStuck, "stuck"}, errName{txn.ErrDeposed, "deposed"})
	}
	rec.Record(Event{G: g, Op: opTxn, Key: name, Val: gid, Res: res})
	return !strings.HasPrefix(res, "error")
}

// createBankTables makes the accounts (opening balances), the history and
// the barrier's table in both databases, and the log in MariaDB, before
// the clients start.
func (s *sqlServers) createBankTables(ctx context.Context) error {
	for i, p := range []struct {
		db *sql.DB
		d  sqllock.Dialect
	}{{s.myDB, sqllock.MySQL}, {s.pgDB, sqllock.Postgres}} {
		b, err := newBankDB(p.db, p.d)
		if err != nil {
			return err
		}
		if err := b.bar.CreateTable(ctx, p.db); err != nil {
			return err
		}
		id := "id BIGINT AUTO_INCREMENT PRIMARY KEY"
		if p.d == sqllock.Postgres {
			id = "id BIGSERIAL PRIMARY KEY"
		}
		for _, ddl := range []string{
			"CREATE TABLE bank_acct (id VARCHAR(16) PRIMARY KEY, balance BIGINT NOT NULL, frozen BIGINT NOT NULL, incoming BIGINT NOT NULL)",
			"CREATE TABLE bank_hist (" + id + ", gid BIGINT NOT NULL, branch INT NOT NULL, op VARCHAR(16) NOT NULL, acct VARCHAR(16) NOT NULL, dbal BIGINT NOT NULL, dfrozen BIGINT NOT NULL, dincoming BIGINT NOT NULL)",
		} {
			if _, err := p.db.ExecContext(ctx, ddl); err != nil {
				return err
			}
		}
		for a := range bankAccounts {
			if _, err := p.db.ExecContext(ctx, b.q("INSERT INTO bank_acct (id, balance, frozen, incoming) VALUES (?, ?, 0, 0)"),
				fmt.Sprintf("%s%d", bankPrefix[i], a), bankOpening); err != nil {
				return err
			}
		}
	}
	m, err := txn.New(s.myDB, sqllock.MySQL, txn.IDFunc(func() int64 { return 1 }))
	if err != nil {
		return err
	}
	return m.CreateTables(ctx)
}

// hasResource reports whether backend b's sections write to the
// protected resource (the lock workloads).
func hasResource(b string) bool { return !isIDBackend(b) && b != "bank" }

// bankState is what bank.json holds: the databases' state after the final
// recovery.
type bankState struct {
	Accounts []bankAccount `json:"accounts"`
	Hist     []bankHistRow `json:"hist"`
	Barrier  []bankBarrier `json:"barrier"`
	Txns     []bankTxn     `json:"txns"`
	// Finished is how many transactions the final recovery drove to a
	// final state; FinishErr its last error, if it gave up.
	Finished  int    `json:"finished"`
	FinishErr string `json:"finish_err,omitempty"`
}

type bankAccount struct {
	ID                        string `json:"id"`
	Balance, Frozen, Incoming int64
}

type bankHistRow struct {
	GID                 int64  `json:"gid"`
	Branch              int    `json:"branch"`
	Op                  string `json:"op"`
	Acct                string `json:"acct"`
	DBal, DFrozen, DInc int64
}

type bankBarrier struct {
	DB     string `json:"db"` // m or p
	GID    int64  `json:"gid"`
	Branch int    `json:"branch"`
	Op     string `json:"op"`
	Reason string `json:"reason"`
}

type bankTxn struct {
	GID      int64        `json:"gid"`
	Name     string       `json:"name"`
	State    string       `json:"state"`
	Reason   string       `json:"reason,omitempty"`
	Transfer bankTransfer `json:"transfer"`
}

// bankFinish is the final recovery and the dump: a Manager on the servers
// directly, as a process started after the heal would have, calls Recover
// until the log has no transaction left unfinished (or bankFinishWait
// passes), then the state goes to dir/bank.json.
func (e *env) bankFinish(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), bankFinishWait+30*time.Second)
	defer cancel()
	s := e.sql
	// Directly, with the clients' lock timeouts: a branch waiting for a
	// row that a prepared XA branch holds (which this same pass resolves
	// after the log's transactions) fails and is retried, instead of
	// waiting for MariaDB's default 50 s.
	m, dbs, closeDBs, err := openBank(bankDSNs(s.my, s.pg, s.my.Addr(), s.pg.Addr()), 1023, e.cfg.ttl, nil)
	if err != nil {
		return err
	}
	defer closeDBs()
	var st bankState
	deadline := time.Now().Add(bankFinishWait)
	for {
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		n, rerr := m.Recover(rctx, 0)
		rcancel()
		st.Finished += n
		var open int
		if err := dbs[0].db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+txn.DefaultTablePrefix+"global WHERE state IN (?, ?, ?)",
			txn.StateRunning, txn.StateConfirming, txn.StateRollingBack).Scan(&open); err != nil {
			return err
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			st.FinishErr = fmt.Sprintf("%d transactions unfinished after %v; last error: %v", open, bankFinishWait, rerr)
			break
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	for i, b := range dbs {
		if err := b.dump(ctx, bankPrefix[i], &st); err != nil {
			return err
		}
	}
	rows, err := dbs[0].db.QueryContext(ctx, "SELECT gid, name, state, reason, payload FROM "+txn.DefaultTablePrefix+"global ORDER BY gid")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var t bankTxn
		var p []byte
		if err := rows.Scan(&t.GID, &t.Name, &t.State, &t.Reason, &p); err != nil {
			return err
		}
		if err := json.Unmarshal(p, &t.Transfer); err != nil {
			return fmt.Errorf("gid %d: payload %q: %w", t.GID, p, err)
		}
		st.Txns = append(st.Txns, t)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return writeJSON(filepath.Join(dir, "bank.json"), st)
}

// dump appends b's accounts, history and barrier rows to st.
func (b *bankDB) dump(ctx context.Context, prefix string, st *bankState) error {
	q := func(query string, scan func(rows *sql.Rows) error) error {
		rows, err := b.db.QueryContext(ctx, query)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	if err := q("SELECT id, balance, frozen, incoming FROM bank_acct ORDER BY id", func(rows *sql.Rows) error {
		var a bankAccount
		err := rows.Scan(&a.ID, &a.Balance, &a.Frozen, &a.Incoming)
		st.Accounts = append(st.Accounts, a)
		return err
	}); err != nil {
		return err
	}
	if err := q("SELECT gid, branch, op, acct, dbal, dfrozen, dincoming FROM bank_hist ORDER BY id", func(rows *sql.Rows) error {
		var h bankHistRow
		err := rows.Scan(&h.GID, &h.Branch, &h.Op, &h.Acct, &h.DBal, &h.DFrozen, &h.DInc)
		st.Hist = append(st.Hist, h)
		return err
	}); err != nil {
		return err
	}
	return q("SELECT gid, branch, op, reason FROM "+txn.DefaultBarrierTable+" ORDER BY gid, branch, op", func(rows *sql.Rows) error {
		br := bankBarrier{DB: prefix}
		err := rows.Scan(&br.GID, &br.Branch, &br.Op, &br.Reason)
		st.Barrier = append(st.Barrier, br)
		return err
	})
}

// checkBank judges a bank run: the client histories (Run's answers) and
// the state after the final recovery.
//
//   - bank-ledger-mismatch: an account's balance, frozen or incoming
//     amount is not its opening plus the deltas its history rows record
//     (the row and the change are one local transaction);
//   - bank-negative-balance: an amount below zero (a debit refuses what the
//     balance does not cover; frozen and incoming only come back down by
//     what went up);
//   - bank-txn-not-final: a transaction running, confirming or rolling
//     back after the final recovery;
//   - bank-stuck-without-reason: a stuck transaction with no reason;
//   - bank-branch-applied-twice: one op of one branch of a transaction in
//     the history twice (the barrier lets an op through once; an XA
//     branch commits once);
//   - bank-applied-without-barrier: a Saga or TCC op in the history with
//     no barrier row inserted by that op;
//   - bank-txn-effects-wrong: a committed transaction whose history does
//     not move exactly its amount from its debit account to its credit
//     account (and nothing else), or an aborted one with a net effect;
//   - bank-total-changed: the sum of all balances is not the opening total,
//     once the net effects of stuck transactions (which need a person) are
//     set aside, or frozen or incoming money is left that no stuck
//     transaction holds;
//   - bank-result-contradicts-log: Run answered committed or aborted and
//     the log's final state is another.
func checkBank(evs []Event, st bankState) *Result {
	r := &Result{Anomalies: map[string]int{}, Documented: map[string]int{}, Info: map[string]int64{}}
	procs := map[string]bool{}
	answered := map[int64]string{}
	for _, e := range evs {
		procs[e.Proc] = true
		switch e.Op {
		case opTxn:
			r.Sections++
			if e.Res == "committed" || e.Res == "aborted" {
				answered[e.Val] = e.Res
			} else if e.Res != "stuck" {
				r.Info[iBankRunErrors]++
			}
		case opLostReply:
			r.Info[iBankLost]++
		case opStall:
			r.Info[iStalls]++
			r.Info[iStallMaxMS] = max(r.Info[iStallMaxMS], e.Val)
		}
	}
	r.Procs = len(procs)
	r.Info[iBankFinal] = int64(st.Finished)
	if st.FinishErr != "" {
		r.violate(aBankNotFinal, "log", "final recovery: "+st.FinishErr)
	}

	// The ledger and the sign of every amount.
	type sums struct{ bal, frozen, inc int64 }
	byAcct := map[string]*sums{}
	for _, a := range st.Accounts {
		byAcct[a.ID] = &sums{bankOpening, 0, 0}
	}
	for _, h := range st.Hist {
		s := byAcct[h.Acct]
		if s == nil {
			r.violate(aBankLedger, h.Acct, fmt.Sprintf("history row of gid %d for an account that does not exist", h.GID))
			continue
		}
		s.bal, s.frozen, s.inc = s.bal+h.DBal, s.frozen+h.DFrozen, s.inc+h.DInc
	}
	var total, frozen, incoming int64
	for _, a := range st.Accounts {
		s := byAcct[a.ID]
		if s.bal != a.Balance || s.frozen != a.Frozen || s.inc != a.Incoming {
			r.violate(aBankLedger, a.ID, fmt.Sprintf("balance/frozen/incoming %d/%d/%d, opening %d plus its history %d/%d/%d",
				a.Balance, a.Frozen, a.Incoming, bankOpening, s.bal, s.frozen, s.inc))
		}
		if a.Balance < 0 || a.Frozen < 0 || a.Incoming < 0 {
			r.violate(aBankNegative, a.ID, fmt.Sprintf("balance/frozen/incoming %d/%d/%d", a.Balance, a.Frozen, a.Incoming))
		}
		total, frozen, incoming = total+a.Balance, frozen+a.Frozen, incoming+a.Incoming
	}
	if len(st.Accounts) != 2*bankAccounts {
		r.violate(aBankLedger, "accounts", fmt.Sprintf("%d accounts, want %d", len(st.Accounts), 2*bankAccounts))
	}

	// Each op applied once, behind its barrier row.
	type opKey struct {
		gid    int64
		branch int
		op     string
	}
	applied := map[opKey]int{}
	net := map[int64]map[string]sums{} // per gid, per account
	for _, h := range st.Hist {
		k := opKey{h.GID, h.Branch, h.Op}
		applied[k]++
		if applied[k] == 2 {
			r.violate(aBankTwice, strconv.FormatInt(h.GID, 10), fmt.Sprintf("branch %d op %s on %s applied more than once", h.Branch, h.Op, h.Acct))
		}
		if net[h.GID] == nil {
			net[h.GID] = map[string]sums{}
		}
		s := net[h.GID][h.Acct]
		net[h.GID][h.Acct] = sums{s.bal + h.DBal, s.frozen + h.DFrozen, s.inc + h.DInc}
	}
	barrier := map[opKey]string{}
	for _, b := range st.Barrier {
		barrier[opKey{b.GID, b.Branch, b.Op}] = b.Reason
	}
	for k := range applied {
		if k.op == "xa" {
			continue
		}
		if reason, ok := barrier[k]; !ok || reason != k.op {
			r.violate(aBankNoBarrier, strconv.FormatInt(k.gid, 10), fmt.Sprintf("branch %d op %s applied; its barrier row: %q (present: %v)", k.branch, k.op, reason, ok))
		}
	}

	// Every transaction final, with the effects its state says.
	var stuckBal, stuckFrozen, stuckInc int64
	for _, t := range st.Txns {
		gid := strconv.FormatInt(t.GID, 10)
		n := net[t.GID]
		switch txn.State(t.State) {
		case txn.StateCommitted:
			r.Info[iBankCommitted]++
			for acct, s := range n {
				want := int64(0)
				switch acct {
				case t.Transfer.From:
					want = -t.Transfer.Amount
				case t.Transfer.To:
					want = t.Transfer.Amount
				}
				if s.bal != want || s.frozen != 0 || s.inc != 0 {
					r.violate(aBankUnbalanced, gid, fmt.Sprintf("committed %s of %d from %s to %s: net on %s balance/frozen/incoming %d/%d/%d, want %d/0/0",
						t.Name, t.Transfer.Amount, t.Transfer.From, t.Transfer.To, acct, s.bal, s.frozen, s.inc, want))
				}
			}
			if len(n) != 2 {
				r.violate(aBankUnbalanced, gid, fmt.Sprintf("committed %s of %d from %s to %s: history on %d accounts, want 2", t.Name, t.Transfer.Amount, t.Transfer.From, t.Transfer.To, len(n)))
			}
		case txn.StateAborted:
			r.Info[iBankAborted]++
			for acct, s := range n {
				if s != (sums{}) {
					r.violate(aBankUnbalanced, gid, fmt.Sprintf("aborted %s of %d from %s to %s (%s): net on %s balance/frozen/incoming %d/%d/%d, want none",
						t.Name, t.Transfer.Amount, t.Transfer.From, t.Transfer.To, t.Reason, acct, s.bal, s.frozen, s.inc))
				}
			}
		case txn.StateStuck:
			r.Info[iBankStuck]++
			if t.Reason == "" {
				r.violate(aBankStuckNoWhy, gid, t.Name+" stuck with no reason")
			}
			for _, s := range n {
				stuckBal, stuckFrozen, stuckInc = stuckBal+s.bal, stuckFrozen+s.frozen, stuckInc+s.inc
			}
		default:
			r.violate(aBankNotFinal, gid, fmt.Sprintf("%s in state %s after the final recovery", t.Name, t.State))
		}
		if a, ok := answered[t.GID]; ok {
			want := txn.StateAborted
			if a != "aborted" {
				want = txn.StateCommitted
			}
			if txn.State(t.State) != want {
				r.violate(aBankResult, gid, fmt.Sprintf("Run answered %s, the log says %s (%s)", a, t.State, t.Reason))
			}
		}
	}
	opening := int64(2 * bankAccounts * bankOpening)
	if total-stuckBal != opening || frozen != stuckFrozen || incoming != stuckInc {
		r.violate(aBankTotal, "total", fmt.Sprintf("balances %d (stuck transactions' net %d), frozen %d (stuck %d), incoming %d (stuck %d); opening total %d",
			total, stuckBal, frozen, stuckFrozen, incoming, stuckInc, opening))
	}
	return r
}

// checkBankDir checks the bank run stored in dir.
func checkBankDir(dir string, meta runMeta) (*Report, error) {
	evs, err := ReadHistories(dir)
	if err != nil {
		return nil, err
	}
	var st bankState
	if err := readJSON(filepath.Join(dir, "bank.json"), &st); err != nil {
		return nil, err
	}
	t := time.Now()
	r := checkBank(evs, st)
	rep := newReport(meta, r, time.Since(t))
	if err := writeJSON(filepath.Join(dir, "report.json"), rep); err != nil {
		return nil, err
	}
	return rep, os.WriteFile(filepath.Join(dir, "report.md"), []byte(rep.Markdown()), 0o644)
}
