// Package txn runs distributed transactions from inside the application,
// with no coordinator server: Saga, TCC and XA global transactions whose log
// lives in the application's own database (MySQL/MariaDB or PostgreSQL),
// driven by whichever process started them and, if that process dies,
// recovered by any other; and the sub-transaction barrier that makes their
// branch funcs safe to call again. It takes a *sql.DB and imports no
// driver.
//
// Every process of the service builds a Manager on the log's database,
// registers the same transaction types, and runs Recover now and then:
//
//	m, err := txn.New(db, sqllock.MySQL, snowflake) // the log's database; gids from an *idgen.Snowflake or a txn.IDFunc
//	if err != nil {
//		return err
//	}
//	if err := m.CreateTables(ctx); err != nil { // once, or the DDL below in a migration
//		return err
//	}
//	bar, err := txn.NewBarrier(sqllock.Postgres, "") // per resource database; bar.CreateTable(ctx, accounts) once
//	if err != nil {
//		return err
//	}
//	err = m.RegisterSaga("transfer", txn.SagaStep{
//		Action: func(ctx context.Context, b txn.Branch) error {
//			_, err := bar.Do(ctx, accounts, b, func(tx *sql.Tx) error { return debit(ctx, tx, b.Payload) })
//			return err // debit wraps txn.ErrAbort to refuse (insufficient funds); other errors are retried
//		},
//		Compensate: func(ctx context.Context, b txn.Branch) error {
//			_, err := bar.Do(ctx, accounts, b, func(tx *sql.Tx) error { return credit(ctx, tx, b.Payload) })
//			return err
//		},
//	}, creditStep)
//	if err != nil {
//		return err
//	}
//	gid, err := m.Run(ctx, "transfer", payload, time.Minute)
//	// nil: committed; errors.Is(err, txn.ErrAborted): undone; txn.ErrStuck: needs a person (m.Stuck lists it)
//
// # Guarantees
//
// With the log in one database (or a synchronous primary) and branch funcs
// that are idempotent (the Barrier makes a func that works in one local SQL
// transaction so):
//
//   - A transaction logged by Run reaches a final state (committed,
//     aborted, or stuck with its reason) as long as some process calls
//     Recover: a process killed between any two steps leaves a log that
//     another process drives to the end, from the state the log has.
//   - Every state change is committed to the log before the step it allows:
//     a branch is "started" before its forward func is called, the
//     transaction is "rolling_back" before the first compensation or Cancel
//     and "confirming" before the first Confirm. So the log never claims
//     less than was done; it may claim more (a branch started whose func
//     never ran), which the Barrier absorbs (null compensation).
//   - One driver at a time: a driver owns a transaction through a lease in
//     its log row (the database's clock, renewed by every write and every
//     TTL/3) with an owner token that each takeover increments. Every write
//     of a driver is an UPDATE ... WHERE gid = ? AND owner_token = ?: once
//     Recover has taken a transaction over, the deposed driver's writes are
//     refused (ErrDeposed) and it stops. Its branch func may still be
//     running meanwhile: two calls of one op can overlap, and the Barrier
//     lets one of them through.
//   - A branch func is retried with backoff (WithRetry) until it succeeds or
//     the transaction's deadline passes; then the transaction is marked
//     stuck, with the branch, the op and the last error as the reason, and
//     Stuck lists it. Nothing acts on a stuck transaction any more.
//
// What it does not give: isolation. Saga and TCC commit each branch in its
// own local transaction; other transactions see the intermediate states
// (money debited and not yet credited, or frozen). Business rules belong
// in the funcs (a Try that freezes, a balance check that refuses).
//
// # Saga
//
// Branches are steps 0..n-1, each an action and a compensation.
//
//	running ──(every action succeeded)──────────────────────▶ committed
//	running ──(an action refused: ErrAbort)──▶ rolling_back ──▶ aborted
//	any non-final ──(a func still failing at the deadline)──▶ stuck
//
// In running, the driver marks step i started, calls its action until it
// succeeds (then marks it done) or refuses. In rolling_back it compensates,
// from the last step to the first, every step that was started or done —
// the refused one included, since its action may have had effects before
// refusing (with the Barrier, a compensation of an action that rolled back
// does nothing) — marking each undone. Recovery of a running Saga goes
// forward: the started step's action is called again.
//
// # TCC
//
// Branches are 0..n-1, each a Try, a Confirm and a Cancel.
//
//	running ──(every Try succeeded)──▶ confirming ──(every Confirm)──▶ committed
//	running ──(a Try refused, or the driver lost)──▶ rolling_back ──(every Cancel)──▶ aborted
//	any non-final ──(a func still failing at the deadline)──▶ stuck
//
// Trys run in order, each marked started then done; Confirms run on every
// branch, Cancels in reverse on every branch whose Try was started. A TCC
// transaction that Recover finds running (its Try phase's driver is gone)
// is cancelled: nothing is confirmed yet, so cancelling is always allowed,
// while confirming would need every Try to have succeeded. Confirm and
// Cancel cannot refuse: every error is retried until the deadline.
//
// # The barrier
//
// A Barrier's table (gid, branch, op, barrier_id; unique together, with the
// op that inserted the row as its reason) lives in each resource database,
// and its rows are inserted in the branch func's own local transaction,
// beside its business writes. Barrier.Call (or Do, which opens and commits
// the local transaction) inserts, ignoring a duplicate, the row of the op
// and, for a compensation or Cancel, the row of the forward op it undoes;
// then:
//
//   - idempotency: an op whose row was already there has run (and
//     committed) before: fn is not called;
//   - null compensation: an undo op that inserted its forward op's row finds
//     that the forward op never committed: fn is not called;
//   - hanging prevention: the row the undo op left makes a forward op
//     arriving after it (a Try delayed in the network, a deposed driver's
//     action) find its row there: fn is not called.
//
// A concurrent call of the same op waits in the database for the first
// one's row lock and then finds its row (or, if the first rolled back,
// proceeds). The rows are committed or rolled back with the business
// writes, so "the op's row exists" and "the op's effects are committed"
// never disagree. The barrier needs the func's writes in the same database
// as its table, in one local transaction; a func that calls out (HTTP)
// sends the Branch along and the callee uses its own Barrier. Old rows
// may be deleted once their transaction is final and no late call can
// arrive (a retention far above any network delay and lease TTL).
//
// # Failures
//
//   - A forward func returns an error wrapping ErrAbort: rollback (above);
//     Run returns an error wrapping ErrAborted and the func's error.
//   - A func returns any other error: called again after WithRetry's delay
//     (its first error is written to the branch row's last_error); past the
//     deadline, stuck (ErrStuck).
//   - Run's ctx ends, or a write to the log fails (the database down, a
//     lost reply to a COMMIT): the driver stops where it is and returns the
//     error; the transaction stays in the log under a lease that expires
//     after the lease TTL, and Recover resumes it from the log's state (a
//     write whose COMMIT reply was lost is found done or not done, and the
//     step is redone either way: funcs must be idempotent).
//   - The driver's process dies or pauses: the same, once the lease expires.
//     A paused driver that wakes up is refused its next write (ErrDeposed).
//   - The lease cannot be renewed for a TTL (log unreachable): the driver's
//     ctx is cancelled with ErrDeposed as cause, and it stops.
//   - A resource database is down: its funcs fail and are retried until the
//     deadline.
//   - Recover meets a transaction whose type this Manager did not register
//     (or with another mode or number of branches): it leaves it alone and
//     reports the error; a process that knows the type recovers it.
//   - The deadline is judged by the driver's clock against the time left
//     that the database's clock gave at the start or takeover; the lease by
//     the database's clock alone.
//
// # Schema
//
// The log (CreateTables; WithTablePrefix changes "coordkit_txn_"): one row
// per global transaction and one per branch. Times are microseconds since
// the Unix epoch by the database's clock. On MySQL and MariaDB:
//
//	CREATE TABLE coordkit_txn_global (
//	  gid         BIGINT NOT NULL PRIMARY KEY, -- from IDs
//	  name        VARCHAR(255) NOT NULL,       -- the registered type
//	  mode        VARCHAR(8) NOT NULL,         -- saga | tcc | xa
//	  state       VARCHAR(16) NOT NULL,        -- running | confirming | rolling_back | committed | aborted | stuck
//	  phase       VARCHAR(16) NOT NULL,        -- the state a stuck transaction was in
//	  reason      TEXT NOT NULL,               -- why it rolled back or is stuck
//	  payload     BLOB NOT NULL,               -- passed to every func
//	  branches    INT NOT NULL,
//	  deadline    BIGINT NOT NULL,
//	  owner       VARCHAR(64) NOT NULL,        -- the driving Manager
//	  owner_token BIGINT NOT NULL,             -- fencing token: +1 at each takeover
//	  lease_until BIGINT NOT NULL,
//	  version     BIGINT NOT NULL,             -- +1 at each write
//	  created     BIGINT NOT NULL,
//	  updated     BIGINT NOT NULL,
//	  KEY coordkit_txn_global_state (state, lease_until)
//	) ENGINE=InnoDB;
//	CREATE TABLE coordkit_txn_branch (
//	  gid        BIGINT NOT NULL,
//	  branch     INT NOT NULL,
//	  state      VARCHAR(16) NOT NULL, -- pending | started | done | confirmed | undone
//	  last_error TEXT NOT NULL,
//	  updated    BIGINT NOT NULL,
//	  PRIMARY KEY (gid, branch)
//	) ENGINE=InnoDB;
//
// The barrier, in each resource database (Barrier.CreateTable):
//
//	CREATE TABLE coordkit_txn_barrier (
//	  gid        BIGINT NOT NULL,
//	  branch     INT NOT NULL,
//	  op         VARCHAR(16) NOT NULL, -- action | compensate | try | confirm | cancel
//	  barrier_id INT NOT NULL,
//	  reason     VARCHAR(16) NOT NULL, -- the op that inserted the row
//	  created    DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
//	  PRIMARY KEY (gid, branch, op, barrier_id)
//	) ENGINE=InnoDB;
//
// On PostgreSQL the same columns with bigint, integer, text, bytea and
// timestamptz, and CREATE INDEX for the state index.
//
// # AT mode
//
// Seata's AT mode (its default) parses each business SQL statement, reads
// the rows before and after to build an undo log, and holds global row
// locks in its coordinator so that other global transactions do not see
// the uncommitted changes. It is out of scope: it needs an SQL parser for
// each dialect that understands every statement a user may write
// (multi-table UPDATEs, INSERT ... ON DUPLICATE KEY, triggers, generated
// columns) and would have to rewrite users' SQL — which the project does
// not do — and without its global row locks (a coordinator in every read
// path) its rollback overwrites whatever another writer did meanwhile.
// Use a Saga whose compensation is written by hand behind the Barrier (the
// business knows how to undo a debit), or TCC when the intermediate state
// must be reserved rather than visible (freeze, then confirm).
//
// # XA
//
// RegisterXA's branches each name a resource database and the work done in
// it, inside an XA transaction with id XAPrefix + gid + "_" + branch
// (MySQL and MariaDB: XA START, the work, XA END, XA PREPARE; PostgreSQL:
// BEGIN, the work, PREPARE TRANSACTION, which needs
// max_prepared_transactions > 0, 0 by default).
//
//	running ──(every branch prepared; the decision logged)──▶ confirming ──(XA COMMIT / COMMIT PREPARED each)──▶ committed
//	running ──(a branch's work or prepare failed, or the driver lost)──▶ rolling_back ──(XA ROLLBACK / ROLLBACK PREPARED)──▶ aborted
//	confirming or rolling_back ──(still failing at the deadline)──▶ stuck
//
// The work is not retried: its error is the branch's "no" vote, and so is
// a PostgreSQL branch that pg_prepared_xacts does not list after its
// PREPARE TRANSACTION (in a transaction aborted by an error the work did
// not return, PostgreSQL rolls back and answers no error). The commit
// decision (confirming) is logged before phase two; a transaction Recover
// finds running has no decision and is rolled back (presumed abort). Phase
// two is retried until it succeeds; an id the database does not know was
// finished already (a lost reply) or, for a rollback, never prepared. On
// MySQL a prepared branch belongs to its session until phase two or until
// the session ends (the driver pins the connection, and closes it if it
// stops between the phases: the server keeps the prepared branch for XA
// RECOVER; it survives a server restart too). Recover also lists the
// package's prepared branches in the registered XA resource databases (XA
// RECOVER, pg_prepared_xacts) and commits those whose transaction the log
// says committed and rolls back those it says aborted: a deposed driver's
// late prepare, or one whose process died.
//
// On MySQL and MariaDB, a branch prepared on a session that is still open
// is unknown to every other session (MariaDB 10.11 answers XAER_NOTA to XA
// COMMIT and XA ROLLBACK) while XA RECOVER lists it. A successor driver
// that gets XAER_NOTA therefore looks in XA RECOVER: listed, the branch is
// still its deposed predecessor's, and phase two is retried (until that
// driver finishes it or its session ends; until the deadline, then stuck,
// if it never does). A driver deposed in phase one rolls back what it
// prepared once the log refuses it; one deposed in phase two closes its
// sessions.
//
// What it costs: every branch's row locks are held from its work until
// its commit in phase two, across the log's writes in between (for the
// first of n branches: 2n local transactions on the log, besides the other
// branches' work and prepares), and,
// if the driver dies between the phases, until Recover runs after the lease
// TTL (or a person resolves a stuck one). Other transactions touching those
// rows wait meanwhile. Seed 003's "XA is CP and slower": consistent and
// isolated (nobody sees a half-done transfer), at the price of
// availability. Prefer Saga or TCC for long or contended transactions.
//
// # Recovery
//
// Recover is one pass; RecoverLoop repeats it. Run the loop in one process
// at a time, under package election (concurrent passes are safe, only
// wasteful: the row lock and the token let one driver through):
//
//	err := e.Run(ctx, func(ctx context.Context, _ *election.Term) error {
//		return m.RecoverLoop(ctx, 5*time.Second)
//	})
//
// Manager.Stuck lists the stuck transactions, and so does the operator
// command "coordctl txn stuck --mysql DSN" (or --postgres URL), with the
// state each was stuck in, its branches and the reason.
package txn
