package txn_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/txn"
)

// One MariaDB and one PostgreSQL for the whole package: the accounts of
// the transfers are spread over both, and the log lives in either.
var (
	maria *testserver.MariaDB
	pg    *testserver.Postgres
	ids   *idgen.Snowflake
)

type serverRun struct{ m *testing.M }

func (r serverRun) Run() int {
	var err error
	if ids, err = idgen.NewSnowflake(idgen.Layout{}, 1); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if maria, err = testserver.NewMariaDB(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer maria.Close()
	// XA needs prepared transactions, off by default.
	if pg, err = testserver.NewPostgres(testserver.WithServerArgs("-c", "max_prepared_transactions=20")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pg.Close()
	err = setup()
	defer func() {
		for _, b := range banks {
			if b != nil {
				b.db.Close()
			}
		}
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return r.m.Run()
}

func TestMain(m *testing.M) {
	mysql.SetLogger(log.New(io.Discard, "", 0))
	goleak.VerifyTestMain(serverRun{m},
		// database/sql's connection opener lives as long as its *sql.DB.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

// The two banks: an account table and the barrier's table on each server.
var banks [2]*bank

func setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, s := range []struct {
		name, driver, dsn string
		d                 sqllock.Dialect
	}{{"mariadb", "mysql", maria.DSN(), sqllock.MySQL}, {"postgres", "pgx", pg.DSN(), sqllock.Postgres}} {
		db, err := sql.Open(s.driver, s.dsn)
		if err != nil {
			return err
		}
		bar, err := txn.NewBarrier(s.d, "")
		if err != nil {
			return err
		}
		if err := bar.CreateTable(ctx, db); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS acct (
  id VARCHAR(100) PRIMARY KEY, balance BIGINT NOT NULL, frozen BIGINT NOT NULL, incoming BIGINT NOT NULL)`); err != nil {
			return err
		}
		banks[i] = &bank{name: s.name, db: db, d: s.d, bar: bar}
	}
	return nil
}

// bank is one resource database: accounts, and branch funcs that move
// money behind its barrier.
type bank struct {
	name string
	db   *sql.DB
	d    sqllock.Dialect
	bar  *txn.Barrier
}

func (b *bank) q(s string) string {
	if b.d != sqllock.Postgres {
		return s
	}
	n := 0
	return replaceEach(s, "?", func() string { n++; return fmt.Sprintf("$%d", n) })
}

func replaceEach(s, old string, next func() string) string {
	var out strings.Builder
	for {
		i := strings.Index(s, old)
		if i < 0 {
			out.WriteString(s)
			return out.String()
		}
		out.WriteString(s[:i])
		out.WriteString(next())
		s = s[i+len(old):]
	}
}

// open makes an account with balance.
func (b *bank) open(t *testing.T, id string, balance int64) {
	t.Helper()
	if _, err := b.db.Exec(b.q("INSERT INTO acct (id, balance, frozen, incoming) VALUES (?, ?, 0, 0)"), id, balance); err != nil {
		t.Fatal(err)
	}
}

// account returns balance, frozen and incoming of id.
func (b *bank) account(t *testing.T, id string) (balance, frozen, incoming int64) {
	t.Helper()
	if err := b.db.QueryRow(b.q("SELECT balance, frozen, incoming FROM acct WHERE id = ?"), id).Scan(&balance, &frozen, &incoming); err != nil {
		t.Fatal(err)
	}
	return
}

// exec runs one UPDATE behind the barrier; refuse (for a forward op) is
// returned wrapped in txn.ErrAbort when it changes no row.
func (b *bank) exec(ctx context.Context, br txn.Branch, refuse string, stmt string, args ...any) (bool, error) {
	return b.bar.Do(ctx, b.db, br, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, b.q(stmt), args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 && refuse != "" {
			return fmt.Errorf("%w: %s", txn.ErrAbort, refuse)
		}
		return nil
	})
}

// transfer is the payload of the transfer transactions.
type transfer struct {
	From, To string
	Amount   int64
}

func payload(t *testing.T, tr transfer) []byte {
	t.Helper()
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decode(br txn.Branch) transfer {
	var tr transfer
	if err := json.Unmarshal(br.Payload, &tr); err != nil {
		panic(err)
	}
	return tr
}

// hooks lets a test act after a branch func's local transaction committed
// (counting runs, cancelling the driver, losing the reply).
type hooks struct {
	after func(br txn.Branch, ran bool) error
}

func (h *hooks) done(br txn.Branch, ran bool, err error) error {
	if err != nil || h == nil || h.after == nil {
		return err
	}
	return h.after(br, ran)
}

// sagaTransfer is a Saga moving money from an account of from to one of
// to.
func sagaTransfer(from, to *bank, h *hooks) []txn.SagaStep {
	return []txn.SagaStep{{
		Action: func(ctx context.Context, br txn.Branch) error {
			tr := decode(br)
			ran, err := from.exec(ctx, br, "insufficient funds", "UPDATE acct SET balance = balance - ? WHERE id = ? AND balance >= ?", tr.Amount, tr.From, tr.Amount)
			return h.done(br, ran, err)
		},
		Compensate: func(ctx context.Context, br txn.Branch) error {
			tr := decode(br)
			ran, err := from.exec(ctx, br, "", "UPDATE acct SET balance = balance + ? WHERE id = ?", tr.Amount, tr.From)
			return h.done(br, ran, err)
		},
	}, {
		Action: func(ctx context.Context, br txn.Branch) error {
			tr := decode(br)
			ran, err := to.exec(ctx, br, "no such account", "UPDATE acct SET balance = balance + ? WHERE id = ?", tr.Amount, tr.To)
			return h.done(br, ran, err)
		},
		Compensate: func(ctx context.Context, br txn.Branch) error {
			tr := decode(br)
			ran, err := to.exec(ctx, br, "", "UPDATE acct SET balance = balance - ? WHERE id = ?", tr.Amount, tr.To)
			return h.done(br, ran, err)
		},
	}}
}

// tccTransfer is a TCC transfer: Try freezes the amount on the debit side
// and announces it on the credit side; Confirm moves it; Cancel releases.
func tccTransfer(from, to *bank, h *hooks) []txn.TCCBranch {
	return []txn.TCCBranch{{
		Try: func(ctx context.Context, br txn.Branch) error {
			tr := decode(br)
			ran, err := from.exec(ctx, br, "insufficient funds",
				"UPDATE acct SET balance = balance - ?, frozen = frozen + ? WHERE id = ? AND balance >= ?", tr.Amount, tr.Amount, tr.From, tr.Amount)
			return h.done(br, ran, err)
		},
		Confirm: func(ctx context.Context, br txn.Branch) error {
			tr := decode(br)
			ran, err := from.exec(ctx, br, "", "UPDATE acct SET frozen = frozen - ? WHERE id = ?", tr.Amount, tr.From)
			return h.done(br, ran, err)
		},
		Cancel: func(ctx context.Context, br txn.Branch) error {
			tr := decode(br)
			ran, err := from.exec(ctx, br, "", "UPDATE acct SET balance = balance + ?, frozen = frozen - ? WHERE id = ?", tr.Amount, tr.Amount, tr.From)
			return h.done(br, ran, err)
		},
	}, {
		Try: func(ctx context.Context, br txn.Branch) error {
			tr := decode(br)
			ran, err := to.exec(ctx, br, "no such account", "UPDATE acct SET incoming = incoming + ? WHERE id = ?", tr.Amount, tr.To)
			return h.done(br, ran, err)
		},
		Confirm: func(ctx context.Context, br txn.Branch) error {
			tr := decode(br)
			ran, err := to.exec(ctx, br, "", "UPDATE acct SET balance = balance + ?, incoming = incoming - ? WHERE id = ?", tr.Amount, tr.Amount, tr.To)
			return h.done(br, ran, err)
		},
		Cancel: func(ctx context.Context, br txn.Branch) error {
			tr := decode(br)
			ran, err := to.exec(ctx, br, "", "UPDATE acct SET incoming = incoming - ? WHERE id = ?", tr.Amount, tr.To)
			return h.done(br, ran, err)
		},
	}}
}

var prefixes atomic.Int64

// newManager returns a Manager whose log is on b, in tables of its own
// (created here, a fresh prefix per call unless prefix is given).
func newManager(t *testing.T, b *bank, prefix string, opts ...txn.Option) *txn.Manager {
	t.Helper()
	if prefix == "" {
		prefix = freshPrefix()
	}
	opts = append([]txn.Option{txn.WithTablePrefix(prefix), txn.WithLeaseTTL(2 * time.Second),
		txn.WithRetry(func(int) time.Duration { return 5 * time.Millisecond })}, opts...)
	m, err := txn.New(b.db, b.d, ids, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CreateTables(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	return m
}

func freshPrefix() string {
	return fmt.Sprintf("t%d_%d_", time.Now().Unix()%100000, prefixes.Add(1))
}

// uniqueKey returns an account id no other test uses.
func uniqueKey(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	return strings.ToLower(strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())) + ":" + hex.EncodeToString(b)
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// forEachLog runs f with the log on each server.
func forEachLog(t *testing.T, f func(t *testing.T, log *bank)) {
	for _, b := range banks {
		t.Run("log="+b.name, func(t *testing.T) { f(t, b) })
	}
}

// status returns the log's record of gid.
func status(t *testing.T, m *txn.Manager, gid int64) txn.Status {
	t.Helper()
	st, err := m.Status(ctxTimeout(t, 5*time.Second), gid)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var errLostReply = errors.New("test: reply lost after commit")

// errBadConn makes database/sql close a connection instead of pooling it.
var errBadConn = driver.ErrBadConn
