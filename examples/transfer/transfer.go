package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/txn"
)

type config struct {
	mysql, postgres string // DSNs; "" starts a server
	balance, amount int64
}

// The accounts, one table in each database. Saga and XA move balance;
// TCC's Try reserves in frozen (debit side) and incoming (credit side),
// which its Confirm or Cancel settles.
const acctDDL = `CREATE TABLE IF NOT EXISTS transfer_acct (
  id VARCHAR(64) PRIMARY KEY, balance BIGINT NOT NULL, frozen BIGINT NOT NULL, incoming BIGINT NOT NULL)`

// bank is one resource database: its accounts and its barrier.
type bank struct {
	name string
	db   *sql.DB
	d    sqllock.Dialect
	bar  *txn.Barrier
}

// q rewrites a query's '?' placeholders for PostgreSQL.
func (b *bank) q(s string) string {
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

// The business rules' refusals: a statement that matched no row.
var (
	errInsufficient = errors.New("insufficient funds")
	errNoAccount    = errors.New("no such account")
)

// exec runs one UPDATE with ex; a statement that matched no row returns
// refuse (nil: no rule to check).
func (b *bank) exec(ctx context.Context, ex txn.Execer, refuse error, stmt string, args ...any) error {
	res, err := ex.ExecContext(ctx, b.q(stmt), args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 && refuse != nil {
		return refuse
	}
	return nil
}

// barrier returns a Saga or TCC branch func that runs one UPDATE behind
// b's barrier in a local transaction of its own; a refusal of a forward
// op wraps txn.ErrAbort, so the transaction rolls back instead of
// retrying.
func (b *bank) barrier(refuse error, stmt string, args func(t transfer) []any) txn.Func {
	return func(ctx context.Context, br txn.Branch) error {
		t, err := decode(br.Payload)
		if err != nil {
			return fmt.Errorf("%w: %w", txn.ErrAbort, err)
		}
		_, err = b.bar.Do(ctx, b.db, br, func(tx *sql.Tx) error {
			return b.exec(ctx, tx, refuse, stmt, args(t)...)
		})
		if refuse != nil && errors.Is(err, refuse) {
			return fmt.Errorf("%w: %w", txn.ErrAbort, err)
		}
		return err
	}
}

// xa returns an XA branch that runs one UPDATE in b's prepared
// transaction; a refusal is the branch's "no" vote.
func (b *bank) xa(refuse error, stmt string, args func(t transfer) []any) txn.XABranch {
	return txn.XABranch{DB: b.db, Dialect: b.d, Work: func(ctx context.Context, ex txn.Execer, br txn.Branch) error {
		t, err := decode(br.Payload)
		if err != nil {
			return err
		}
		return b.exec(ctx, ex, refuse, stmt, args(t)...)
	}}
}

// transfer is the payload of every transfer: From's account is in the
// first bank (MariaDB), To's in the second (PostgreSQL).
type transfer struct {
	From, To string
	Amount   int64
}

func decode(p []byte) (transfer, error) {
	var t transfer
	err := json.Unmarshal(p, &t)
	return t, err
}

// The arguments of the statements below.
func debitArgs(t transfer) []any    { return []any{t.Amount, t.From, t.Amount} }
func undebitArgs(t transfer) []any  { return []any{t.Amount, t.From} }
func creditArgs(t transfer) []any   { return []any{t.Amount, t.To} }
func freezeArgs(t transfer) []any   { return []any{t.Amount, t.Amount, t.From, t.Amount} }
func unfreezeArgs(t transfer) []any { return []any{t.Amount, t.Amount, t.From} }
func receiveArgs(t transfer) []any  { return []any{t.Amount, t.Amount, t.To} }

const (
	debit  = "UPDATE transfer_acct SET balance = balance - ? WHERE id = ? AND balance >= ?"
	credit = "UPDATE transfer_acct SET balance = balance + ? WHERE id = ?"
	// uncredit undoes credit; undebit undoes debit.
	uncredit = "UPDATE transfer_acct SET balance = balance - ? WHERE id = ?"
	undebit  = "UPDATE transfer_acct SET balance = balance + ? WHERE id = ?"

	freeze     = "UPDATE transfer_acct SET balance = balance - ?, frozen = frozen + ? WHERE id = ? AND balance >= ?"
	unfreeze   = "UPDATE transfer_acct SET balance = balance + ?, frozen = frozen - ? WHERE id = ?"
	spend      = "UPDATE transfer_acct SET frozen = frozen - ? WHERE id = ?"
	announce   = "UPDATE transfer_acct SET incoming = incoming + ? WHERE id = ?"
	unannounce = "UPDATE transfer_acct SET incoming = incoming - ? WHERE id = ?"
	receive    = "UPDATE transfer_acct SET balance = balance + ?, incoming = incoming - ? WHERE id = ?"
)

// register registers the transfer of each mode on m: from's account
// debited, to's credited.
func register(m *txn.Manager, from, to *bank) error {
	if err := m.RegisterSaga(string(txn.ModeSaga),
		txn.SagaStep{Action: from.barrier(errInsufficient, debit, debitArgs), Compensate: from.barrier(nil, undebit, undebitArgs)},
		txn.SagaStep{Action: to.barrier(errNoAccount, credit, creditArgs), Compensate: to.barrier(nil, uncredit, creditArgs)},
	); err != nil {
		return err
	}
	if err := m.RegisterTCC(string(txn.ModeTCC),
		txn.TCCBranch{
			Try:     from.barrier(errInsufficient, freeze, freezeArgs),
			Confirm: from.barrier(nil, spend, undebitArgs),
			Cancel:  from.barrier(nil, unfreeze, unfreezeArgs),
		},
		txn.TCCBranch{
			Try:     to.barrier(errNoAccount, announce, creditArgs),
			Confirm: to.barrier(nil, receive, receiveArgs),
			Cancel:  to.barrier(nil, unannounce, creditArgs),
		},
	); err != nil {
		return err
	}
	return m.RegisterXA(string(txn.ModeXA), from.xa(errInsufficient, debit, debitArgs), to.xa(errNoAccount, credit, creditArgs))
}

// row is one transfer's outcome and the accounts after it.
type row struct {
	mode       txn.Mode
	t          transfer
	want       txn.State // committed or aborted
	gid        int64
	state      txn.State
	reason     string
	branches   []string
	alice, bob int64 // balances after
	reserved   int64 // frozen + incoming of both, after: 0 once settled
	a0, b0     int64 // the balances before
}

// ok reports whether the transfer ended as wanted: committed and the
// amount moved, or aborted and nothing moved; nothing left reserved.
func (r row) ok(total int64) bool {
	moved := r.alice == r.a0-r.t.Amount && r.bob == r.b0+r.t.Amount
	unchanged := r.alice == r.a0 && r.bob == r.b0
	if r.want == txn.StateCommitted && !moved || r.want == txn.StateAborted && !unchanged {
		return false
	}
	return r.state == r.want && r.alice+r.bob == total && r.reserved == 0
}

type report struct {
	balance int64
	rows    []row
}

func (r *report) total() int64 { return 2 * r.balance }

func (r *report) passed() bool {
	for _, x := range r.rows {
		if !x.ok(r.total()) {
			return false
		}
	}
	return len(r.rows) == 3*len(modes)
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "alice's account in MariaDB, bob's in PostgreSQL, %d each (total %d); the log in MariaDB\n\n", r.balance, r.total())
	fmt.Fprintf(w, "| %-4s | %-20s | %-9s | %-19s | %6s | %6s | %6s |     |\n", "mode", "transfer", "outcome", "branches", "alice", "bob", "total")
	fmt.Fprintf(w, "|------|----------------------|-----------|---------------------|--------|--------|--------|-----|\n")
	fmt.Fprintf(w, "| %-4s | %-20s | %-9s | %-19s | %6d | %6d | %6d |     |\n", "", "(opening)", "", "", r.balance, r.balance, r.total())
	for _, x := range r.rows {
		verdict := "ok"
		if !x.ok(r.total()) {
			verdict = "BAD"
		}
		fmt.Fprintf(w, "| %-4s | %-20s | %-9s | %-19s | %6d | %6d | %6d | %-3s |\n", x.mode,
			fmt.Sprintf("%s -> %s %d", x.t.From, x.t.To, x.t.Amount), x.state, strings.Join(x.branches, " "),
			x.alice, x.bob, x.alice+x.bob, verdict)
	}
	fmt.Fprintln(w)
	for _, x := range r.rows {
		if x.reason != "" {
			fmt.Fprintf(w, "%s gid %d: %s\n", x.mode, x.gid, x.reason)
		}
	}
	if r.passed() {
		fmt.Fprintf(w, "\nPASS: every transfer ended as expected and the total stayed %d\n", r.total())
	} else {
		fmt.Fprintf(w, "\nFAIL: a transfer did not end as expected or the total changed\n")
	}
}

var modes = []txn.Mode{txn.ModeSaga, txn.ModeTCC, txn.ModeXA}

// run starts the servers it was not given, opens alice's and bob's
// accounts and runs the three transfers of each mode.
func run(ctx context.Context, c config) (*report, error) {
	if c.balance <= 0 || c.amount <= 0 || c.amount > c.balance {
		return nil, fmt.Errorf("need 0 < -amount (%d) <= -balance (%d)", c.amount, c.balance)
	}
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	if c.mysql == "" {
		m, err := testserver.NewMariaDB()
		if err != nil {
			return nil, err
		}
		closers = append(closers, m.Close)
		c.mysql = m.DSN()
	}
	if c.postgres == "" {
		// XA needs prepared transactions, off by default.
		p, err := testserver.NewPostgres(testserver.WithServerArgs("-c", "max_prepared_transactions=10"))
		if err != nil {
			return nil, err
		}
		closers = append(closers, p.Close)
		c.postgres = p.DSN()
	}
	var banks [2]*bank
	for i, s := range []struct{ name, driver, dsn string }{{"MariaDB", "mysql", c.mysql}, {"PostgreSQL", "pgx", c.postgres}} {
		db, err := sql.Open(s.driver, s.dsn)
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { db.Close() })
		d := sqllock.MySQL
		if s.driver == "pgx" {
			d = sqllock.Postgres
		}
		bar, err := txn.NewBarrier(d, "")
		if err != nil {
			return nil, err
		}
		if err := bar.CreateTable(ctx, db); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		if _, err := db.ExecContext(ctx, acctDDL); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		banks[i] = &bank{name: s.name, db: db, d: d, bar: bar}
	}
	alice, bob := banks[0], banks[1]
	for _, a := range []struct {
		b  *bank
		id string
	}{{alice, "alice"}, {bob, "bob"}} {
		if _, err := a.b.db.ExecContext(ctx, a.b.q("DELETE FROM transfer_acct WHERE id = ?"), a.id); err != nil {
			return nil, err
		}
		if _, err := a.b.db.ExecContext(ctx, a.b.q("INSERT INTO transfer_acct (id, balance, frozen, incoming) VALUES (?, ?, 0, 0)"), a.id, c.balance); err != nil {
			return nil, err
		}
	}

	ids, err := idgen.NewSnowflake(idgen.Layout{}, 1)
	if err != nil {
		return nil, err
	}
	m, err := txn.New(alice.db, alice.d, ids)
	if err != nil {
		return nil, err
	}
	if err := m.CreateTables(ctx); err != nil {
		return nil, err
	}
	if err := register(m, alice, bob); err != nil {
		return nil, err
	}

	rep := &report{balance: c.balance}
	a, b := c.balance, c.balance // the balances before the next transfer
	for _, mode := range modes {
		for _, x := range []struct {
			t    transfer
			want txn.State
		}{
			{transfer{"alice", "bob", c.amount}, txn.StateCommitted},
			{transfer{"alice", "bob", c.balance * 10}, txn.StateAborted}, // insufficient funds
			{transfer{"alice", "carol", c.amount}, txn.StateAborted},     // no such account
		} {
			p, err := json.Marshal(x.t)
			if err != nil {
				return rep, err
			}
			gid, err := m.Run(ctx, string(mode), p, 30*time.Second)
			if err != nil && !errors.Is(err, txn.ErrAborted) {
				return rep, fmt.Errorf("%s %+v: %w", mode, x.t, err)
			}
			st, err := m.Status(ctx, gid)
			if err != nil {
				return rep, err
			}
			r := row{mode: mode, t: x.t, want: x.want, gid: gid, state: st.State, reason: st.Reason, branches: st.Branches, a0: a, b0: b}
			var r1, r2 int64
			if r.alice, r1, err = account(ctx, alice, "alice"); err != nil {
				return rep, err
			}
			if r.bob, r2, err = account(ctx, bob, "bob"); err != nil {
				return rep, err
			}
			r.reserved = r1 + r2
			a, b = r.alice, r.bob
			rep.rows = append(rep.rows, r)
		}
	}
	return rep, nil
}

// account returns id's balance and its frozen + incoming.
func account(ctx context.Context, b *bank, id string) (balance, reserved int64, err error) {
	var frozen, incoming int64
	err = b.db.QueryRowContext(ctx, b.q("SELECT balance, frozen, incoming FROM transfer_acct WHERE id = ?"), id).Scan(&balance, &frozen, &incoming)
	return balance, frozen + incoming, err
}
