package readme_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/sqlid"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/txn"
)

// The test servers' addresses, which replace the README's in the
// generated snippets (see addresses in gen_test.go).
var redisAddr, pgDSN, mysqlDSN string

// seenMu protects seenVars.
var (
	seenMu   sync.Mutex
	seenVars = map[string]any{}
)

// seen records a variable a snippet declared, as fn.name.
func seen(fn, name string, v any) {
	seenMu.Lock()
	defer seenMu.Unlock()
	seenVars[fn+"."+name] = v
}

// The functions the README's snippets call, each replaced by a test.
var (
	withdraw    = func(ctx context.Context, user string, amount int) error { return nil }
	drainOutbox = func(ctx context.Context, token int64) error { <-ctx.Done(); return nil }
	sendReport  = func(ctx context.Context) error { return nil }
)

// The README's snippets, run against real servers: each test holds one
// snippet to what the README's prose says of it.

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newRedis(t *testing.T) *testserver.Redis {
	t.Helper()
	srv, err := testserver.NewRedis()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// hook replaces *fn by f for the test.
func hook[F any](t *testing.T, fn *F, f F) {
	t.Helper()
	old := *fn
	*fn = f
	t.Cleanup(func() { *fn = old })
}

func seenVar[T any](t *testing.T, key string) T {
	t.Helper()
	seenMu.Lock()
	defer seenMu.Unlock()
	x, found := seenVars[key]
	v, ok := x.(T)
	if !ok && found && x == nil { // a nil error or pointer
		return v
	}
	if !ok {
		t.Fatalf("the snippet did not report %s as a %T (got %T)", key, v, seenVars[key])
	}
	return v
}

// TestReadmeLock: "A lock in five lines" runs the function while the key
// is held, returns its error, frees the key after; when the lease is lost
// the function's ctx is cancelled with a cause matching lock.ErrLockLost and
// the reason.
func TestReadmeLock(t *testing.T) {
	srv := newRedis(t)
	redisAddr = srv.Addr()
	ctx := ctxFor(t, 60*time.Second)
	other := lock.New(srv.Client(t))
	t.Cleanup(func() { other.Close() })
	errBounced := errors.New("bounced")
	calls := 0
	hook(t, &withdraw, func(ctx context.Context, user string, amount int) error {
		calls++
		// A ctx of its own: the function's carries the snippet's owner, with
		// which any client re-enters.
		if _, err := other.TryObtain(context.Background(), "withdraw:user-42"); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("inside the snippet's lock.Do, another client's TryObtain: %v, want lock.ErrNotObtained", err)
		}
		return errBounced
	})
	if err := snippetLock(ctx, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { seenVar[*lock.Client](t, "snippetLock.locker").Close() })
	if err := seenVar[error](t, "snippetLock.err"); !errors.Is(err, errBounced) || calls != 1 {
		t.Fatalf("lock.Do: %v after %d calls, want the function's error after 1", err, calls)
	}
	l, err := other.TryObtain(ctx, "withdraw:user-42")
	if err != nil {
		t.Fatalf("after lock.Do the key is not free: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The lease lost: the hash deleted while the function runs. The
	// watchdog finds it gone at its next renewal, TTL/3 (10 s) later.
	admin := lock.New(srv.Client(t))
	t.Cleanup(func() { admin.Close() })
	var cause error
	hook(t, &withdraw, func(ctx context.Context, user string, amount int) error {
		if ok, err := admin.ForceRelease(ctx, "withdraw:user-42"); !ok || err != nil {
			t.Errorf("ForceRelease: %v, %v", ok, err)
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(lock.DefaultTTL/3 + 5*time.Second):
			t.Error("the lease was lost and ctx was not cancelled")
		}
		return ctx.Err()
	})
	if err := snippetLock(ctx, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { seenVar[*lock.Client](t, "snippetLock.locker").Close() })
	if !errors.Is(cause, lock.ErrLockLost) || !errors.Is(cause, lock.ErrNotHeld) {
		t.Fatalf("context.Cause = %v, want lock.ErrLockLost and the reason, lock.ErrNotHeld", cause)
	}
	if err := seenVar[error](t, "snippetLock.err"); !errors.Is(err, lock.ErrLockLost) {
		t.Errorf("lock.Do after the loss: %v, want lock.ErrLockLost", err)
	}
}

// TestReadmeWorkerID: "A worker ID in five lines" leases the lowest free
// ID, gives it back at the end, and its generator stops once the lease ends.
func TestReadmeWorkerID(t *testing.T) {
	z, err := testserver.NewZooKeeper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(z.Close)
	ctx := ctxFor(t, 60*time.Second)
	conn := z.DialT(t, 10*time.Second, nil).Conn
	first, err := workerid.NewZK(z.DialT(t, 10*time.Second, nil).Conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Close() })
	held, err := first.Lease(ctx, "orders") // ID 0
	if err != nil || held.ID() != 0 {
		t.Fatalf("first lease: %v, ID %d", err, held.ID())
	}
	t.Cleanup(func() { held.Release(context.Background()) })

	if err := snippetWorkerID(ctx, conn, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { seenVar[*workerid.ZKLeaser](t, "snippetWorkerID.leaser").Close() })
	if err := seenVar[error](t, "snippetWorkerID.err"); err != nil {
		t.Fatal(err)
	}
	lease := seenVar[*workerid.Lease](t, "snippetWorkerID.lease")
	ids := seenVar[*idgen.Snowflake](t, "snippetWorkerID.ids")
	id := seenVar[int64](t, "snippetWorkerID.id")
	if lease.ID() != 1 || ids.Worker() != 1 || ids.Decompose(id).Worker != 1 {
		t.Fatalf("with ID 0 taken the snippet leased %d (generator worker %d, ID's %d), want the lowest free, 1",
			lease.ID(), ids.Worker(), ids.Decompose(id).Worker)
	}
	if _, err := ids.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
		t.Errorf("Next after the snippet released its lease: %v, want idgen.ErrLeaseLost", err)
	}
	again, err := first.Lease(ctx, "orders")
	if err != nil || again.ID() != 1 {
		t.Fatalf("after the snippet returned, the next lease got %d (%v), want 1, given back", again.ID(), err)
	}
	again.Release(ctx)
}

type instanceKey struct{}

// drainCall is one call of the singleton job.
type drainCall struct {
	instance   string
	token      int64
	start, end time.Time
}

// TestReadmeSingleton: "A singleton job in five lines" runs the job once per
// leadership, on one instance at a time, until Run's ctx ends: not again
// every second; when the leader stops, the other instance runs it, with a
// larger token.
func TestReadmeSingleton(t *testing.T) {
	srv := newRedis(t)
	var mu sync.Mutex // protects calls
	var calls []drainCall
	hook(t, &drainOutbox, func(ctx context.Context, token int64) error {
		c := drainCall{instance: ctx.Value(instanceKey{}).(string), token: token, start: time.Now()}
		mu.Lock()
		for _, p := range calls {
			if p.end.IsZero() {
				t.Errorf("instance %s runs the job while %s still does", c.instance, p.instance)
			}
		}
		calls = append(calls, c)
		i := len(calls) - 1
		mu.Unlock()
		<-ctx.Done()
		mu.Lock()
		calls[i].end = time.Now()
		mu.Unlock()
		return nil
	})
	snapshot := func() []drainCall {
		mu.Lock()
		defer mu.Unlock()
		return append([]drainCall(nil), calls...)
	}
	base := ctxFor(t, 60*time.Second)
	cancels := map[string]context.CancelFunc{}
	done := map[string]chan error{}
	for _, name := range []string{"a", "b"} {
		l := lock.New(srv.Client(t))
		t.Cleanup(func() { l.Close() })
		ctx, cancel := context.WithCancel(context.WithValue(base, instanceKey{}, name))
		ch := make(chan error, 1)
		cancels[name], done[name] = cancel, ch
		go func() { ch <- snippetSingleton(ctx, nil, nil, nil, l) }()
	}
	waitCalls := func(n int) []drainCall {
		t.Helper()
		end := time.Now().Add(10 * time.Second)
		for time.Now().Before(end) {
			if cs := snapshot(); len(cs) >= n {
				return cs
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("the job ran %d times, want %d", len(snapshot()), n)
		return nil
	}
	first := waitCalls(1)[0]
	time.Sleep(3500 * time.Millisecond) // Run's retry period is 1 s: a rerun would show
	if cs := snapshot(); len(cs) != 1 || !cs[0].end.IsZero() {
		t.Fatalf("in 3.5 s of one leadership the job ran %d times (first ended: %v), want once, still running", len(cs), !cs[0].end.IsZero())
	}
	cancels[first.instance]() // the leader's Run ends: it resigns
	if err := <-done[first.instance]; err != nil {
		t.Fatalf("Run after its ctx ended: %v, want nil", err)
	}
	second := waitCalls(2)[1]
	if second.instance == first.instance || second.token <= first.token {
		t.Fatalf("second term: instance %s token %d after instance %s token %d: want the other instance, a larger token",
			second.instance, second.token, first.instance, first.token)
	}
	time.Sleep(2500 * time.Millisecond)
	if cs := snapshot(); len(cs) != 2 {
		t.Fatalf("two leaderships ran the job %d times, want twice", len(cs))
	}
	cancels[second.instance]()
	if err := <-done[second.instance]; err != nil {
		t.Fatalf("Run after its ctx ended: %v, want nil", err)
	}
}

// TestReadmeOneOff: the one-off runs its work once per call, on one instance
// at a time, and its Resign lets the next campaigner lead at once.
func TestReadmeOneOff(t *testing.T) {
	srv := newRedis(t)
	ctx := ctxFor(t, 60*time.Second)
	var mu sync.Mutex // protects running, runs, ends
	running, runs := 0, 0
	var ends []time.Time
	var starts []time.Time
	hook(t, &sendReport, func(ctx context.Context) error {
		mu.Lock()
		running++
		runs++
		starts = append(starts, time.Now())
		if running > 1 {
			t.Error("two instances send the report at once")
		}
		mu.Unlock()
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		running--
		ends = append(ends, time.Now())
		mu.Unlock()
		return nil
	})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		l := lock.New(srv.Client(t))
		t.Cleanup(func() { l.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- snippetOneOff(ctx, nil, nil, nil, l)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if runs != 2 {
		t.Fatalf("two one-off calls sent %d reports, want one each", runs)
	}
	if gap := starts[1].Sub(ends[0]); gap > time.Second {
		t.Errorf("the second instance led %v after the first resigned, want at once (well within the 30 s TTL)", gap)
	}
}

// TestReadmeSQLLock: "Locks in a database" holds the key in PostgreSQL
// while the function runs, and frees it after.
func TestReadmeSQLLock(t *testing.T) {
	pg, err := testserver.NewPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	pgDSN = pg.DSN()
	ctx := ctxFor(t, 60*time.Second)
	odb, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { odb.Close() })
	other, err := sqllock.NewPostgres(odb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	calls := 0
	hook(t, &withdraw, func(ctx context.Context, user string, amount int) error {
		calls++
		// A ctx of its own: the function's carries the snippet's owner, with
		// which any client re-enters.
		if _, err := other.TryObtain(context.Background(), "withdraw:user-42"); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("inside the snippet's lock.Do, another client's TryObtain: %v, want lock.ErrNotObtained", err)
		}
		return nil
	})
	if err := snippetSQLLock(ctx, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		seenVar[*sqllock.Client](t, "snippetSQLLock.locker").Close()
		seenVar[*sql.DB](t, "snippetSQLLock.db").Close()
	})
	if err := seenVar[error](t, "snippetSQLLock.err"); err != nil || calls != 1 {
		t.Fatalf("lock.Do: %v after %d calls, want nil after 1", err, calls)
	}
	l, err := other.TryObtain(ctx, "withdraw:user-42")
	if err != nil {
		t.Fatalf("after lock.Do the key is not free: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReadmeSQLID: "IDs from a database" issues IDs from a Leaf table in
// MariaDB, increasing per generator and unique across generators.
func TestReadmeSQLID(t *testing.T) {
	maria, err := testserver.NewMariaDB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(maria.Close)
	mysqlDSN = maria.DSN()
	ctx := ctxFor(t, 60*time.Second)
	seenIDs := map[int64]bool{}
	for run := range 2 { // two processes, the second finding the table and row in place
		if err := snippetSQLID(ctx, nil, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		ids := seenVar[*sqlid.Segments](t, "snippetSQLID.ids")
		t.Cleanup(func() { ids.Close() })
		t.Cleanup(func() { seenVar[*sql.DB](t, "snippetSQLID.db").Close() })
		if err := seenVar[error](t, "snippetSQLID.err"); err != nil {
			t.Fatalf("run %d: Next: %v", run+1, err)
		}
		prev := seenVar[int64](t, "snippetSQLID.id")
		for i := range 2000 { // across a segment's end (step 1000)
			if prev <= 0 || seenIDs[prev] {
				t.Fatalf("run %d, ID %d: %d is not positive or was issued before", run+1, i, prev)
			}
			seenIDs[prev] = true
			next, err := ids.Next(ctx, "order")
			if err != nil {
				t.Fatal(err)
			}
			if next <= prev {
				t.Fatalf("run %d: %d after %d: not increasing", run+1, next, prev)
			}
			prev = next
		}
	}
}

// The transfer snippet's package-level inputs (see the prelude in
// readme_test.go), set by TestReadmeTransfer.
var (
	db      *sql.DB
	ids     *idgen.Snowflake
	payload []byte

	debit, refund, credit, uncredit txn.Func
)

// TestReadmeTransfer: "A transfer across two databases in five lines"
// commits a transfer (both branches applied), answers a refused one with
// txn.ErrAborted and its debit compensated, and its Recover finishes a
// transfer whose driver stopped after the debit, so that each transfer is
// applied exactly once.
func TestReadmeTransfer(t *testing.T) {
	maria, err := testserver.NewMariaDB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(maria.Close)
	ctx := ctxFor(t, 60*time.Second)
	mdb, err := sql.Open("mysql", maria.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mdb.Close() })
	sf, err := idgen.NewSnowflake(idgen.LayoutTwitter, 1)
	if err != nil {
		t.Fatal(err)
	}
	bar, err := txn.NewBarrier(sqllock.MySQL, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := bar.CreateTable(ctx, mdb); err != nil {
		t.Fatal(err)
	}
	if _, err := mdb.ExecContext(ctx, "CREATE TABLE acct (id VARCHAR(8) PRIMARY KEY, balance BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := mdb.ExecContext(ctx, "INSERT INTO acct VALUES ('a', 100), ('b', 0)"); err != nil {
		t.Fatal(err)
	}
	// The branch funcs: one UPDATE behind the barrier; the payload is the
	// amount. The debit refuses (txn.ErrAbort) an amount above the balance.
	errRefused := errors.New("insufficient funds")
	var stopAfterDebit context.CancelFunc // set: the driver stops once the debit committed
	branch := func(stmt, acct string, refuse bool) txn.Func {
		return func(ctx context.Context, br txn.Branch) error {
			amount, err := strconv.ParseInt(string(br.Payload), 10, 64)
			if err != nil {
				return fmt.Errorf("%w: %w", txn.ErrAbort, err)
			}
			_, err = bar.Do(ctx, mdb, br, func(tx *sql.Tx) error {
				res, err := tx.ExecContext(ctx, stmt, amount, acct, amount)
				if err != nil {
					return err
				}
				if n, err := res.RowsAffected(); err == nil && n == 0 && refuse {
					return fmt.Errorf("%w: %w", txn.ErrAbort, errRefused)
				}
				return err
			})
			if err == nil && br.Op == txn.OpAction && br.ID == 0 && stopAfterDebit != nil {
				stopAfterDebit()
			}
			return err
		}
	}
	hook(t, &debit, branch("UPDATE acct SET balance = balance - ? WHERE id = ? AND balance >= ?", "a", true))
	hook(t, &refund, branch("UPDATE acct SET balance = balance + ? WHERE id = ? AND ? > 0", "a", false))
	hook(t, &credit, branch("UPDATE acct SET balance = balance + ? WHERE id = ? AND ? > 0", "b", false))
	hook(t, &uncredit, branch("UPDATE acct SET balance = balance - ? WHERE id = ? AND ? > 0", "b", false))
	hook(t, &db, mdb)
	hook(t, &ids, sf)
	balances := func() (a, b int64) {
		t.Helper()
		if err := mdb.QueryRowContext(ctx, "SELECT (SELECT balance FROM acct WHERE id = 'a'), (SELECT balance FROM acct WHERE id = 'b')").Scan(&a, &b); err != nil {
			t.Fatal(err)
		}
		return a, b
	}

	// A transfer of 20 whose driver stops after the debit, as a process
	// dying there would: the log keeps it, under a lease of 200 ms.
	m0, err := txn.New(mdb, sqllock.MySQL, sf, txn.WithLeaseTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := m0.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m0.RegisterSaga("transfer", txn.SagaStep{Action: debit, Compensate: refund}, txn.SagaStep{Action: credit, Compensate: uncredit}); err != nil {
		t.Fatal(err)
	}
	stopCtx, stop := context.WithCancel(ctx)
	stopAfterDebit = stop
	gid0, err := m0.Run(stopCtx, "transfer", []byte("20"), time.Minute)
	stopAfterDebit = nil
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped driver's Run: %v, want context.Canceled", err)
	}
	if a, b := balances(); a != 80 || b != 0 {
		t.Fatalf("after the stopped driver: a %d, b %d, want 80, 0", a, b)
	}
	time.Sleep(400 * time.Millisecond) // past the stopped driver's lease: Recover takes over only then

	payload = []byte("30")
	if err := snippetTransfer(ctx, nil, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	m := seenVar[*txn.Manager](t, "snippetTransfer.m")
	if err := seenVar[error](t, "snippetTransfer.err"); err != nil {
		t.Fatalf("the snippet: %v", err)
	}
	if n := seenVar[int](t, "snippetTransfer.n"); n != 1 {
		t.Errorf("Recover finished %d transactions, want 1 (the stopped one)", n)
	}
	for _, gid := range []int64{gid0, seenVar[int64](t, "snippetTransfer.gid")} {
		if st, err := m.Status(ctx, gid); err != nil || st.State != txn.StateCommitted {
			t.Errorf("gid %d: %+v, %v; want committed", gid, st, err)
		}
	}
	if a, b := balances(); a != 50 || b != 50 {
		t.Fatalf("after the snippet: a %d, b %d, want 50, 50 (20 and 30 moved, each once)", a, b)
	}

	// More than a holds: refused, and nothing moved.
	payload = []byte("70")
	if err := snippetTransfer(ctx, nil, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	err = seenVar[error](t, "snippetTransfer.err")
	if !errors.Is(err, txn.ErrAborted) || !errors.Is(err, errRefused) {
		t.Fatalf("a transfer above the balance: %v, want txn.ErrAborted and the refusal", err)
	}
	if a, b := balances(); a != 50 || b != 50 {
		t.Fatalf("after the refusal: a %d, b %d, want 50, 50", a, b)
	}
}
