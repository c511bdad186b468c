package main

// The txn suite: package txn's global transactions, a 2-branch transfer
// (debit an account in MariaDB, credit one in PostgreSQL) by Saga, TCC and
// XA, against the floor of the same transfer as two plain local
// transactions with no coordination (BEGIN, the UPDATE, COMMIT in each
// database, one after the other: nothing makes the pair atomic).
//
// Every measurement runs in a fresh process of this binary ("bench
// txnworker ..."), the modes interleaved round by round; the tables give
// the medians. Each of a worker's g goroutines moves 1 from its own
// account in MariaDB to its own account in PostgreSQL, so no two
// goroutines touch the same account row (what is measured is the
// coordination, not row-lock waits). The log of the global transactions
// is in MariaDB, on a pool of its own.
//
// Round trips are counted in the worker, on the connections themselves: a
// dialer wraps every connection of each pool, and a round trip is a write
// after a read (or the first write on the connection). Consecutive writes
// with no reply between them count once (a pipelined request, or a
// statement close that the server does not answer).
//
// The recovery phase starts a worker of txn-crash-g goroutines doing
// transfers with a short lease (txn-lease), kills it with SIGKILL
// mid-flight, and times a new Manager's Recover (in the parent) until no
// transaction is unfinished in the log and no XA branch is prepared in
// either database.

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/txn"
)

func init() { register(Suite{Name: "txn", Run: runTxnSuite}) }

var (
	txnGs = func() *[]int {
		gs := []int{1, 16}
		flag.Func("txn-g", "txn: comma-separated goroutine counts of the throughput phase (default 1,16)", func(v string) error {
			gs = nil
			for _, s := range strings.Split(v, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n < 1 {
					return fmt.Errorf("bad goroutine count %q", s)
				}
				gs = append(gs, n)
			}
			return nil
		})
		return &gs
	}()
	txnCrashG = flag.Int("txn-crash-g", 16, "txn: goroutines of the process killed in the recovery phase")
	txnLease  = flag.Duration("txn-lease", time.Second, "txn: lease TTL of the process killed in the recovery phase")
)

// txnModes are the throughput phase's modes; txnFloor is the floor.
var txnModes = []string{txnFloor, string(txn.ModeSaga), string(txn.ModeTCC), string(txn.ModeXA)}

const (
	txnFloor = "floor"
	// txnBalance is every account's opening balance: no transfer of the
	// suite is refused.
	txnBalance = int64(1) << 50
	// txnKillAfter is how long the recovery phase's worker runs before it
	// is killed.
	txnKillAfter = 300 * time.Millisecond
)

// The accounts, one table in each database, and the statements of each
// mode (as in examples/transfer): Saga and XA move balance; TCC's Try
// reserves in frozen (debit side) and incoming (credit side), which its
// Confirm or Cancel settles.
const (
	txnAcctDDL = `CREATE TABLE IF NOT EXISTS txnbench_acct (
  id VARCHAR(64) PRIMARY KEY, balance BIGINT NOT NULL, frozen BIGINT NOT NULL, incoming BIGINT NOT NULL)`

	txnDebit      = "UPDATE txnbench_acct SET balance = balance - ? WHERE id = ? AND balance >= ?"
	txnCredit     = "UPDATE txnbench_acct SET balance = balance + ? WHERE id = ?"
	txnUncredit   = "UPDATE txnbench_acct SET balance = balance - ? WHERE id = ?"
	txnUndebit    = "UPDATE txnbench_acct SET balance = balance + ? WHERE id = ?"
	txnFreeze     = "UPDATE txnbench_acct SET balance = balance - ?, frozen = frozen + ? WHERE id = ? AND balance >= ?"
	txnUnfreeze   = "UPDATE txnbench_acct SET balance = balance + ?, frozen = frozen - ? WHERE id = ?"
	txnSpend      = "UPDATE txnbench_acct SET frozen = frozen - ? WHERE id = ?"
	txnAnnounce   = "UPDATE txnbench_acct SET incoming = incoming + ? WHERE id = ?"
	txnUnannounce = "UPDATE txnbench_acct SET incoming = incoming - ? WHERE id = ?"
	txnReceive    = "UPDATE txnbench_acct SET balance = balance + ?, incoming = incoming - ? WHERE id = ?"
)

var errTxnRefused = errors.New("refused: no row matched")

// txnTransfer is the payload of a transfer: From's account in MariaDB,
// To's in PostgreSQL.
type txnTransfer struct {
	From, To string
	Amount   int64
}

func (t txnTransfer) debitArgs() []any    { return []any{t.Amount, t.From, t.Amount} }
func (t txnTransfer) undebitArgs() []any  { return []any{t.Amount, t.From} }
func (t txnTransfer) creditArgs() []any   { return []any{t.Amount, t.To} }
func (t txnTransfer) freezeArgs() []any   { return []any{t.Amount, t.Amount, t.From, t.Amount} }
func (t txnTransfer) unfreezeArgs() []any { return []any{t.Amount, t.Amount, t.From} }
func (t txnTransfer) receiveArgs() []any  { return []any{t.Amount, t.Amount, t.To} }

// txnPair is goroutine i's accounts.
func txnPair(i int) txnTransfer {
	return txnTransfer{From: fmt.Sprintf("a%d", i), To: fmt.Sprintf("b%d", i), Amount: 1}
}

// tripConn counts the round trips of one connection into n.
type tripConn struct {
	net.Conn
	n    *atomic.Int64
	sent atomic.Bool // a write since the last read
}

func (c *tripConn) Write(b []byte) (int, error) {
	if !c.sent.Swap(true) {
		c.n.Add(1)
	}
	return c.Conn.Write(b)
}

// SyscallConn exposes the socket, as the unwrapped connection does, so
// that go-sql-driver still makes its liveness check (a non-blocking read
// on the socket, not a round trip, before it reuses a connection).
func (c *tripConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

func (c *tripConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.sent.Store(false)
	}
	return n, err
}

// openCounted opens a pool on dsn whose connections count their round
// trips into n, keeping up to idle connections open between uses.
func openCounted(dsn string, d sqllock.Dialect, n *atomic.Int64, idle int) (*sql.DB, error) {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := new(net.Dialer).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &tripConn{Conn: c, n: n}, nil
	}
	var db *sql.DB
	if d == sqllock.Postgres {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		cfg.DialFunc = dial
		db = stdlib.OpenDB(*cfg)
	} else {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, err
		}
		cfg.DialFunc = dial
		c, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		db = sql.OpenDB(c)
	}
	db.SetMaxIdleConns(idle)
	return db, nil
}

// txnBank is one resource database: its accounts and its barrier.
type txnBank struct {
	db    *sql.DB
	d     sqllock.Dialect
	bar   *txn.Barrier
	trips atomic.Int64
}

// q rewrites a query's '?' placeholders for PostgreSQL.
func (b *txnBank) q(s string) string {
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

// exec runs one UPDATE; one that matched no row is errTxnRefused when
// refuse is set.
func (b *txnBank) exec(ctx context.Context, ex txn.Execer, refuse bool, stmt string, args ...any) error {
	res, err := ex.ExecContext(ctx, b.q(stmt), args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 && refuse {
		return errTxnRefused
	}
	return nil
}

// local runs one UPDATE in a local transaction of its own: the floor's
// half of a transfer.
func (b *txnBank) local(ctx context.Context, refuse bool, stmt string, args ...any) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := b.exec(ctx, tx, refuse, stmt, args...); err != nil {
		return err
	}
	return tx.Commit()
}

// barrier returns a Saga or TCC branch func running one UPDATE behind
// b's barrier in a local transaction; a refusal of a forward op aborts.
func (b *txnBank) barrier(refuse bool, stmt string, args func(txnTransfer) []any) txn.Func {
	return func(ctx context.Context, br txn.Branch) error {
		var t txnTransfer
		if err := json.Unmarshal(br.Payload, &t); err != nil {
			return fmt.Errorf("%w: %w", txn.ErrAbort, err)
		}
		_, err := b.bar.Do(ctx, b.db, br, func(tx *sql.Tx) error { return b.exec(ctx, tx, refuse, stmt, args(t)...) })
		if errors.Is(err, errTxnRefused) {
			return fmt.Errorf("%w: %w", txn.ErrAbort, err)
		}
		return err
	}
}

// xa returns an XA branch running one UPDATE in b's prepared transaction.
func (b *txnBank) xa(refuse bool, stmt string, args func(txnTransfer) []any) txn.XABranch {
	return txn.XABranch{DB: b.db, Dialect: b.d, Work: func(ctx context.Context, ex txn.Execer, br txn.Branch) error {
		var t txnTransfer
		if err := json.Unmarshal(br.Payload, &t); err != nil {
			return err
		}
		return b.exec(ctx, ex, refuse, stmt, args(t)...)
	}}
}

// txnRig is the two banks, the log's pool and a Manager with the
// transfer of each mode registered (named after its mode).
type txnRig struct {
	maria, pg *txnBank
	log       *sql.DB
	logTrips  atomic.Int64
	m         *txn.Manager
}

// newTxnRig opens the pools (counting round trips, idle connections kept
// for g goroutines) and a Manager with options opts.
func newTxnRig(mariaDSN, pgDSN string, g int, opts ...txn.Option) (*txnRig, error) {
	r := &txnRig{maria: &txnBank{d: sqllock.MySQL}, pg: &txnBank{d: sqllock.Postgres}}
	idle := 2*g + 4 // an XA branch pins a connection until phase two
	var err error
	if r.log, err = openCounted(mariaDSN, sqllock.MySQL, &r.logTrips, idle); err != nil {
		return nil, err
	}
	for _, x := range []struct {
		b   *txnBank
		dsn string
	}{{r.maria, mariaDSN}, {r.pg, pgDSN}} {
		if x.b.db, err = openCounted(x.dsn, x.b.d, &x.b.trips, idle); err != nil {
			r.close()
			return nil, err
		}
		if x.b.bar, err = txn.NewBarrier(x.b.d, ""); err != nil {
			r.close()
			return nil, err
		}
	}
	ids, err := idgen.NewSnowflake(idgen.Layout{}, int64(os.Getpid()%1024))
	if err != nil {
		r.close()
		return nil, err
	}
	if r.m, err = txn.New(r.log, sqllock.MySQL, ids, opts...); err != nil {
		r.close()
		return nil, err
	}
	from, to := r.maria, r.pg
	if err := r.m.RegisterSaga(string(txn.ModeSaga),
		txn.SagaStep{Action: from.barrier(true, txnDebit, txnTransfer.debitArgs), Compensate: from.barrier(false, txnUndebit, txnTransfer.undebitArgs)},
		txn.SagaStep{Action: to.barrier(true, txnCredit, txnTransfer.creditArgs), Compensate: to.barrier(false, txnUncredit, txnTransfer.creditArgs)},
	); err != nil {
		r.close()
		return nil, err
	}
	if err := r.m.RegisterTCC(string(txn.ModeTCC),
		txn.TCCBranch{
			Try:     from.barrier(true, txnFreeze, txnTransfer.freezeArgs),
			Confirm: from.barrier(false, txnSpend, txnTransfer.undebitArgs),
			Cancel:  from.barrier(false, txnUnfreeze, txnTransfer.unfreezeArgs),
		},
		txn.TCCBranch{
			Try:     to.barrier(true, txnAnnounce, txnTransfer.creditArgs),
			Confirm: to.barrier(false, txnReceive, txnTransfer.receiveArgs),
			Cancel:  to.barrier(false, txnUnannounce, txnTransfer.creditArgs),
		},
	); err != nil {
		r.close()
		return nil, err
	}
	if err := r.m.RegisterXA(string(txn.ModeXA), from.xa(true, txnDebit, txnTransfer.debitArgs), to.xa(true, txnCredit, txnTransfer.creditArgs)); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *txnRig) close() {
	for _, db := range []*sql.DB{r.log, r.maria.db, r.pg.db} {
		if db != nil {
			db.Close()
		}
	}
}

// transfer moves t by mode: a global transaction, or the floor's two
// local transactions.
func (r *txnRig) transfer(ctx context.Context, mode string, t txnTransfer) error {
	if mode == txnFloor {
		if err := r.maria.local(ctx, true, txnDebit, t.debitArgs()...); err != nil {
			return err
		}
		return r.pg.local(ctx, true, txnCredit, t.creditArgs()...)
	}
	p, err := json.Marshal(t)
	if err != nil {
		return err
	}
	_, err = r.m.Run(ctx, mode, p, time.Minute)
	return err
}

// trips returns the round trips counted so far: the log's, MariaDB's
// accounts', PostgreSQL's accounts'.
func (r *txnRig) trips() [3]int64 {
	return [3]int64{r.logTrips.Load(), r.maria.trips.Load(), r.pg.trips.Load()}
}

// txnResult is what a throughput worker reports on its stdout (one JSON
// line).
type txnResult struct {
	Transfers int64    `json:"transfers"`
	Secs      float64  `json:"secs"`
	Trips     [3]int64 `json:"trips"`  // log, MariaDB accounts, PostgreSQL accounts
	CPUUS     float64  `json:"cpu_us"` // the worker's CPU per transfer
	P50US     int64    `json:"p50_us"`
	P99US     int64    `json:"p99_us"`
	Retried   int64    `json:"-"` // branch rows of the run's transactions with an error recorded (the parent counts them)
}

// txnWorker runs in the worker process: it opens the rig, warms up (two
// transfers per goroutine: connections open, statements cached), prints
// "ready", waits for a line on stdin, then runs transfers on g goroutines
// for -dur and prints its txnResult; with -crash it runs until killed.
func txnWorker(args []string) error {
	fs := flag.NewFlagSet("txnworker", flag.ContinueOnError)
	mariaDSN := fs.String("mysql", "", "MariaDB DSN")
	pgDSN := fs.String("postgres", "", "PostgreSQL URL")
	mode := fs.String("mode", "", "floor, saga, tcc or xa")
	g := fs.Int("g", 1, "goroutines")
	dur := fs.Duration("dur", 2*time.Second, "timed phase")
	lease := fs.Duration("lease", txn.DefaultLeaseTTL, "lease TTL")
	crash := fs.Bool("crash", false, "run until killed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !slices.Contains(txnModes, *mode) {
		return fmt.Errorf("unknown mode %q", *mode)
	}
	r, err := newTxnRig(*mariaDSN, *pgDSN, *g, txn.WithLeaseTTL(*lease))
	if err != nil {
		return err
	}
	defer r.close()
	ctx, cancel := context.WithTimeout(context.Background(), *dur+2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, *g)
	for i := range *g {
		wg.Go(func() {
			for range 2 {
				if err := r.transfer(ctx, *mode, txnPair(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("warm-up: %w", err)
	default:
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	stop := time.Now().Add(*dur)
	if *crash {
		stop = time.Now().Add(time.Hour) // the parent kills it first
	}
	trips0, cpu0 := r.trips(), selfCPU()
	begin := time.Now()
	lats := make([][]int64, *g)
	for i := range *g {
		wg.Go(func() {
			for time.Now().Before(stop) {
				t0 := time.Now()
				if err := r.transfer(ctx, *mode, txnPair(i)); err != nil {
					errs <- err
					return
				}
				lats[i] = append(lats[i], time.Since(t0).Microseconds())
			}
		})
	}
	wg.Wait()
	res := txnResult{Secs: time.Since(begin).Seconds()}
	trips1 := r.trips()
	select {
	case err := <-errs:
		return err
	default:
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	res.Transfers = int64(len(all))
	n := max(res.Transfers, 1)
	for i := range res.Trips {
		res.Trips[i] = trips1[i] - trips0[i]
	}
	res.CPUUS = (selfCPU() - cpu0).Seconds() * 1e6 / float64(n)
	if len(all) > 0 {
		res.P50US = all[len(all)/2]
		res.P99US = all[min(len(all)*99/100, len(all)-1)]
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// startTxnWorker starts a worker and waits for its "ready".
func startTxnWorker(ctx context.Context, args ...string) (*procWorker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return spawnWorker(ctx, exe, append([]string{"txnworker"}, args...))
}

// txnServers are the suite's databases and an admin pool on each.
type txnServers struct {
	mariaDSN, pgDSN string
	maria, pg       *sql.DB
	accounts        int // a0.. in MariaDB, b0.. in PostgreSQL
}

// check verifies that the accounts hold what they held at the start
// (every transfer complete or undone: nothing lost, made or left
// reserved), that no transaction is unfinished in the log and no XA
// branch prepared.
func (s *txnServers) check(ctx context.Context) error {
	var sums [2][3]int64
	for i, db := range []*sql.DB{s.maria, s.pg} {
		if err := db.QueryRowContext(ctx, "SELECT COALESCE(SUM(balance), 0), COALESCE(SUM(frozen), 0), COALESCE(SUM(incoming), 0) FROM txnbench_acct").
			Scan(&sums[i][0], &sums[i][1], &sums[i][2]); err != nil {
			return err
		}
	}
	total := sums[0][0] + sums[1][0]
	if want := 2 * int64(s.accounts) * txnBalance; total != want || sums[0][1] != 0 || sums[1][2] != 0 {
		return fmt.Errorf("accounts broken: total %d (want %d), frozen %d, incoming %d", total, want, sums[0][1], sums[1][2])
	}
	left, err := s.unfinished(ctx)
	if err != nil {
		return err
	}
	prepared, err := s.prepared(ctx)
	if err != nil {
		return err
	}
	if len(left) > 0 || prepared > 0 {
		return fmt.Errorf("%d transactions unfinished, %d XA branches prepared", len(left), prepared)
	}
	return nil
}

// retried counts the branch rows of the log with an error recorded: a
// branch func that failed and was called again.
func (s *txnServers) retried(ctx context.Context) (int64, error) {
	var n int64
	err := s.maria.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+txn.DefaultTablePrefix+"branch WHERE last_error <> ''").Scan(&n)
	return n, err
}

// unfinished lists the gids of the log's unfinished transactions.
func (s *txnServers) unfinished(ctx context.Context) ([]int64, error) {
	rows, err := s.maria.QueryContext(ctx, "SELECT gid FROM "+txn.DefaultTablePrefix+"global WHERE state IN (?, ?, ?)",
		string(txn.StateRunning), string(txn.StateConfirming), string(txn.StateRollingBack))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var gids []int64
	for rows.Next() {
		var gid int64
		if err := rows.Scan(&gid); err != nil {
			return nil, err
		}
		gids = append(gids, gid)
	}
	return gids, rows.Err()
}

// prepared counts the XA branches prepared in both databases.
func (s *txnServers) prepared(ctx context.Context) (int, error) {
	rows, err := s.maria.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var p int
	if err := s.pg.QueryRowContext(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&p); err != nil {
		return 0, err
	}
	return n + p, nil
}

func runTxnSuite(env *Env) error {
	gs := *txnGs
	accounts := max(slices.Max(gs), *txnCrashG)
	maria, err := testserver.NewMariaDB()
	if err != nil {
		return err
	}
	defer maria.Close()
	// XA needs prepared transactions (off by default): one per goroutine
	// in phase two, and those a killed worker left.
	pg, err := testserver.NewPostgres(testserver.WithServerArgs("-c", fmt.Sprintf("max_prepared_transactions=%d", 2*accounts+10)))
	if err != nil {
		return err
	}
	defer pg.Close()
	ctx := context.Background()
	s := &txnServers{mariaDSN: maria.DSN("interpolateParams=true"), pgDSN: pg.DSN(), accounts: accounts}
	if s.maria, err = sql.Open("mysql", s.mariaDSN); err != nil {
		return err
	}
	defer s.maria.Close()
	if s.pg, err = sql.Open("pgx", s.pgDSN); err != nil {
		return err
	}
	defer s.pg.Close()
	if err := txnSetup(ctx, s); err != nil {
		return err
	}

	type key struct {
		g    int
		mode string
	}
	res := map[key][]txnResult{}
	for round := range env.Rounds {
		for _, g := range gs {
			for i := range txnModes {
				mode := txnModes[(i+round)%len(txnModes)] // a different mode first each round
				e0, err := s.retried(ctx)
				if err != nil {
					return err
				}
				r, err := runTxnWorker(ctx, s, "-mode", mode, "-g", strconv.Itoa(g), "-dur", env.Dur.String())
				if err != nil {
					return fmt.Errorf("%s, %d goroutines: %w", mode, g, err)
				}
				if err := s.check(ctx); err != nil {
					return fmt.Errorf("after %s, %d goroutines: %w", mode, g, err)
				}
				e1, err := s.retried(ctx)
				if err != nil {
					return err
				}
				r.Retried = e1 - e0
				res[key{g, mode}] = append(res[key{g, mode}], r)
			}
		}
	}
	ta := Table{
		Title: fmt.Sprintf("(a) throughput, each mode in its own process: g goroutines, each moving 1 from its own account in MariaDB to its own in PostgreSQL (distinct pairs), the log in MariaDB (median of %d interleaved rounds of %v, a fresh process per run)", env.Rounds, env.Dur),
		Cols:  []string{"g", "mode", "transfers/s", "vs floor", "latency p50 ms", "p99 ms", "log trips/transfer", "MariaDB trips/transfer", "PostgreSQL trips/transfer", "trips/transfer", "vs floor", "client CPU µs/transfer", "branches retried"},
	}
	for _, g := range gs {
		med := func(mode string, f func(txnResult) float64) float64 {
			xs := make([]float64, 0, env.Rounds)
			for _, r := range res[key{g, mode}] {
				xs = append(xs, f(r))
			}
			return Median(xs)
		}
		rate := func(r txnResult) float64 { return float64(r.Transfers) / r.Secs }
		per := func(i int) func(txnResult) float64 {
			return func(r txnResult) float64 { return float64(r.Trips[i]) / float64(max(r.Transfers, 1)) }
		}
		all := func(r txnResult) float64 {
			return float64(r.Trips[0]+r.Trips[1]+r.Trips[2]) / float64(max(r.Transfers, 1))
		}
		floorRate, floorTrips := med(txnFloor, rate), med(txnFloor, all)
		for _, mode := range txnModes {
			ps, trips := med(mode, rate), med(mode, all)
			ta.Row(g, mode, ps, Ratio(ps, floorRate),
				med(mode, func(r txnResult) float64 { return float64(r.P50US) / 1e3 }),
				med(mode, func(r txnResult) float64 { return float64(r.P99US) / 1e3 }),
				med(mode, per(0)), med(mode, per(1)), med(mode, per(2)), trips, Ratio(trips, floorTrips),
				med(mode, func(r txnResult) float64 { return r.CPUUS }),
				med(mode, func(r txnResult) float64 { return float64(r.Retried) }))
		}
	}
	ta.Print(env.Out)
	fmt.Fprintln(env.Out, "floor: the same transfer as two plain local transactions (BEGIN, UPDATE, COMMIT in MariaDB, then in PostgreSQL), no coordination. A round trip: a request written on a connection and its reply read, counted on the worker's connections (log: the Manager's pool on MariaDB; MariaDB and PostgreSQL: the accounts' pools, barrier and XA included). Branches retried: branch rows of the run (warm-up included) whose func failed at least once and was called again (0 expected: no account is shared).")
	fmt.Fprintln(env.Out)
	return txnRecovery(ctx, env, s)
}

// txnSetup makes the log's tables, each database's barrier and accounts.
func txnSetup(ctx context.Context, s *txnServers) error {
	r, err := newTxnRig(s.mariaDSN, s.pgDSN, 1)
	if err != nil {
		return err
	}
	defer r.close()
	if err := r.m.CreateTables(ctx); err != nil {
		return err
	}
	for _, b := range []*txnBank{r.maria, r.pg} {
		if err := b.bar.CreateTable(ctx, b.db); err != nil {
			return err
		}
		if _, err := b.db.ExecContext(ctx, txnAcctDDL); err != nil {
			return err
		}
	}
	for i := range s.accounts {
		t := txnPair(i)
		for _, x := range []struct {
			b  *txnBank
			id string
		}{{r.maria, t.From}, {r.pg, t.To}} {
			if _, err := x.b.db.ExecContext(ctx, x.b.q("INSERT INTO txnbench_acct (id, balance, frozen, incoming) VALUES (?, ?, 0, 0)"), x.id, txnBalance); err != nil {
				return err
			}
		}
	}
	return s.check(ctx)
}

// runTxnWorker runs one throughput worker and returns its result.
func runTxnWorker(ctx context.Context, s *txnServers, args ...string) (txnResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	w, err := startTxnWorker(ctx, append([]string{"-mysql", s.mariaDSN, "-postgres", s.pgDSN}, args...)...)
	if err != nil {
		return txnResult{}, err
	}
	defer func() {
		if w.cmd.ProcessState == nil {
			w.stop()
		}
	}()
	if err := w.start(); err != nil {
		return txnResult{}, err
	}
	var r txnResult
	line, err := w.out.ReadString('\n')
	if err != nil {
		return r, fmt.Errorf("worker: %w", err)
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return r, fmt.Errorf("worker: %q: %w", line, err)
	}
	w.stdin.Close()
	return r, w.cmd.Wait()
}

// txnCrash is one recovery measurement.
type txnCrash struct {
	unfinished, prepared      int     // at the kill
	recoverMS, killToDoneMS   float64 // first Recover call to done; kill to done
	passes                    int
	committed, aborted, stuck int
}

// txnRecovery: per mode, a worker of txnCrashG goroutines killed
// mid-flight, then a new Manager's Recover until done.
func txnRecovery(ctx context.Context, env *Env, s *txnServers) error {
	modes := []string{string(txn.ModeSaga), string(txn.ModeTCC), string(txn.ModeXA)}
	res := map[string][]txnCrash{}
	for round := range env.Rounds {
		for i := range modes {
			mode := modes[(i+round)%len(modes)]
			c, err := txnCrashOnce(ctx, s, mode)
			if err != nil {
				return fmt.Errorf("recovery, %s: %w", mode, err)
			}
			if err := s.check(ctx); err != nil {
				return fmt.Errorf("after recovery, %s: %w", mode, err)
			}
			res[mode] = append(res[mode], c)
		}
	}
	t := Table{
		Title: fmt.Sprintf("(b) recovery: a process of %d goroutines doing transfers (lease TTL %v) killed with SIGKILL after %v, then a new Manager's Recover (another process) until no transaction is unfinished and no XA branch prepared (median of %d interleaved rounds)",
			*txnCrashG, *txnLease, txnKillAfter, env.Rounds),
		Cols: []string{"mode", "unfinished at kill", "XA branches prepared at kill", "Recover ms", "ms/transaction", "kill to done ms", "Recover passes", "committed", "aborted", "stuck"},
	}
	for _, mode := range modes {
		med := func(f func(txnCrash) float64) float64 {
			xs := make([]float64, 0, env.Rounds)
			for _, c := range res[mode] {
				xs = append(xs, f(c))
			}
			return Median(xs)
		}
		t.Row(mode,
			med(func(c txnCrash) float64 { return float64(c.unfinished) }),
			med(func(c txnCrash) float64 { return float64(c.prepared) }),
			med(func(c txnCrash) float64 { return c.recoverMS }),
			med(func(c txnCrash) float64 { return c.recoverMS / float64(max(c.unfinished, 1)) }),
			med(func(c txnCrash) float64 { return c.killToDoneMS }),
			med(func(c txnCrash) float64 { return float64(c.passes) }),
			med(func(c txnCrash) float64 { return float64(c.committed) }),
			med(func(c txnCrash) float64 { return float64(c.aborted) }),
			med(func(c txnCrash) float64 { return float64(c.stuck) }))
	}
	t.Print(env.Out)
	fmt.Fprintf(env.Out, "Recover ms: from the first Recover call, made once the killed process's leases expired (the kill + %v), to done; kill to done includes that wait. Recover drives one transaction after another. Saga goes forward (committed); TCC in its Try phase is cancelled and XA without a logged decision rolled back (aborted); one past its decision finishes it.\n\n", *txnLease)
	return nil
}

// txnCrashOnce starts a worker, kills it mid-flight and recovers.
func txnCrashOnce(ctx context.Context, s *txnServers, mode string) (txnCrash, error) {
	var c txnCrash
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	w, err := startTxnWorker(wctx, "-mysql", s.mariaDSN, "-postgres", s.pgDSN, "-mode", mode,
		"-g", strconv.Itoa(*txnCrashG), "-lease", txnLease.String(), "-crash")
	if err != nil {
		return c, err
	}
	if err := w.start(); err != nil {
		w.stop()
		return c, err
	}
	time.Sleep(txnKillAfter)
	w.stop() // SIGKILL, and wait for it
	killed := time.Now()
	gids, err := s.unfinished(ctx)
	if err != nil {
		return c, err
	}
	c.unfinished = len(gids)
	if c.prepared, err = s.prepared(ctx); err != nil {
		return c, err
	}
	r, err := newTxnRig(s.mariaDSN, s.pgDSN, 1)
	if err != nil {
		return c, err
	}
	defer r.close()
	time.Sleep(time.Until(killed.Add(*txnLease + 10*time.Millisecond)))
	begin := time.Now()
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer rcancel()
	for {
		c.passes++
		if _, err := r.m.Recover(rctx, 0); err != nil {
			return c, err
		}
		left, err := s.unfinished(rctx)
		if err != nil {
			return c, err
		}
		p, err := s.prepared(rctx)
		if err != nil {
			return c, err
		}
		if len(left) == 0 && p == 0 {
			break
		}
		select {
		case <-rctx.Done():
			return c, fmt.Errorf("%d unfinished, %d prepared: %w", len(left), p, rctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	now := time.Now()
	c.recoverMS = float64(now.Sub(begin).Microseconds()) / 1e3
	c.killToDoneMS = float64(now.Sub(killed).Microseconds()) / 1e3
	for _, gid := range gids {
		st, err := r.m.Status(ctx, gid)
		if err != nil {
			return c, err
		}
		switch st.State {
		case txn.StateCommitted:
			c.committed++
		case txn.StateAborted:
			c.aborted++
		case txn.StateStuck:
			c.stuck++
		}
	}
	return c, nil
}
