// Package sqllock implements lock.Locker on a relational database that a
// fleet already runs: MySQL or MariaDB, and PostgreSQL. It takes a
// *sql.DB and imports no driver (tests and examples use
// github.com/go-sql-driver/mysql and github.com/jackc/pgx/v5/stdlib). It
// has two locks, and the database recipes that need none (below):
//
//   - Session locks (NewMySQL: GET_LOCK; NewPostgres: advisory locks) live
//     in the server's memory, held by one database session: a connection
//     pinned for the hold and never returned to the pool while it holds
//     anything. A waiter waits in the server, which hands the lock over at
//     the release without polling.
//   - The lease table (NewLeaseTable) is a row per lock with an expiry
//     judged by the database's clock, taken and renewed by single
//     conditional statements. It holds no connection between statements,
//     so it works through connection poolers (PgBouncer in transaction
//     mode, ProxySQL), where session locks do not.
//
// Open the database with the driver of your choice and build a Client:
//
//	db, err := sql.Open("pgx", "postgres://app@db/app") // or "mysql" (go-sql-driver), and NewMySQL
//	if err != nil {
//		return err
//	}
//	locker, err := sqllock.NewPostgres(db) // or sqllock.NewLeaseTable(db, sqllock.Postgres)
//	if err != nil {
//		return err
//	}
//	defer locker.Close()
//	if err := locker.CreateTable(ctx); err != nil { // once, or the DDL below in a migration
//		return err
//	}
//	err = lock.Do(ctx, locker, "withdraw:user-42", func(ctx context.Context) error {
//		return withdraw(ctx, "user-42", 100)
//	})
//
// The options that matter: WithDefaultTTL (DefaultTTL, 30 s: how often a
// session lock proves it is still held, TTL/3, and how long a lease-table row
// lives without renewal), WithTable (the fencing or lease table), WithPrefix,
// WithMetrics and WithLogger. MySQL 8, MariaDB 10.5 or PostgreSQL 12 or later
// are required.
//
// Both give every acquisition a fencing token, re-enter for the owner in
// ctx (lock.WithOwner; lock.Do adds one) on the same Client (another
// Client, or process, with the same owner waits like any other owner),
// renew or check through package
// watchdog, close Lost and cancel lock.Do's ctx when the lock is lost, and
// report to lock.Metrics and a *slog.Logger like every coordkit lock.
//
// # Guarantees
//
// Mutual exclusion holds while the database is one server (or a
// synchronous primary), the holder's process and the database agree on the
// passing of time within the TTL, and the database's clock does not jump:
//
//   - The holder's process pauses past its TTL (GC, SIGSTOP): a session
//     lock stays held (the server knows nothing of the pause) unless its
//     connection ended meanwhile, in which case the next owner waited for
//     the row's expiry; a lease-table row expires and is taken over. Lost
//     closes when the watchdog runs again; later writes carry the older
//     token.
//   - The database is paused: nobody acquires anything; the holder's Lost
//     closes a TTL after its last successful check or renewal, and its
//     session lock's connection is closed, so the server frees the lock
//     once it runs again.
//   - The database crashes and restarts: session locks end, and the next
//     owner waits for the row's expiry (committed, so it survives the
//     crash with InnoDB and PostgreSQL's durable defaults); the lease table
//     keeps its rows and its holders renew them once the server is back.
//   - A connection is cut or killed: a session lock is lost at the next
//     check (TTL/3), and passes on after the row's expiry; the lease table
//     reconnects and is not affected.
//   - The holder is partitioned from the database (nothing gets through,
//     the connection stays open): a session lock is lost a TTL after its
//     last check, and its connection closed; the server keeps the session,
//     and the lock, until it hears of the close (when the link heals) or
//     gives up on the connection itself (TCP keepalive, wait_timeout,
//     idle_session_timeout): safe, but the lock is unavailable meanwhile.
//   - An asynchronous replica promoted after a failover may lack the last
//     acquisitions: the lease table's rows and the tokens' clock floor
//     follow the new primary, session locks are gone with the old one.
//     Fencing tokens stay increasing unless the new primary's clock is
//     behind.
//
// Liveness: a lock whose holder released is free at once; one whose holder
// vanished is free at most a TTL after its last check or renewal. A
// session lock's waiters are served by the server (MariaDB and PostgreSQL
// grant waiters, as a rule, in the order they queued); lease-table waiters race, and one can
// starve under constant contention. Each hold of a session lock, and each
// Client's waiter at the front of a key's line, occupies a connection of
// the pool (db.SetMaxOpenConns bounds them; Obtain then waits for a free
// one, within ctx).
//
// # Schema
//
// Client.CreateTable creates the Client's table (CREATE TABLE IF NOT
// EXISTS); the first Obtain of a Client checks its columns and primary key
// and returns ErrSchema, naming what is wrong and the DDL, if they are not
// these (MySQL types; PostgreSQL uses text, bigint and timestamptz):
//
//	-- session locks' fencing rows (WithTable; default coordkit_fences)
//	CREATE TABLE coordkit_fences (
//	  name    VARBINARY(512) NOT NULL PRIMARY KEY, -- prefix + key
//	  token   BIGINT NOT NULL,         -- the last fencing token issued
//	  owner   VARBINARY(255) NOT NULL, -- the last holder's owner
//	  session BIGINT NOT NULL,         -- its CONNECTION_ID() / backend pid
//	  expires BIGINT NOT NULL          -- µs since 1970 (database clock); 0 once released
//	) ENGINE=InnoDB
//
//	-- the lease table (WithTable; default coordkit_locks)
//	CREATE TABLE coordkit_locks (
//	  name    VARBINARY(512) NOT NULL PRIMARY KEY,
//	  owner   VARBINARY(255) NOT NULL, -- '' once released
//	  token   BIGINT NOT NULL,
//	  expires DATETIME(6) NOT NULL     -- UTC (timestamptz on PostgreSQL)
//	) ENGINE=InnoDB
//
// On MySQL the first Obtain also refuses, with an error wrapping
// ErrInvalid, a pool whose sessions have autocommit off (autocommit=0 in
// the DSN): the Client's statements would never commit.
//
// The name is the prefix (WithPrefix, default "coordkit:") and the key: a
// key is 1 to MaxKeyLen bytes of UTF-8 without NUL; byte strings compare
// exactly (VARBINARY, text), so "Key", "key" and "key " are three locks.
// Rows stay after a release (a row's token is the next one's floor); the
// rows of keys no longer used may be deleted while free, that is once their
// expiry has passed (0, or a time behind the database's clock: DELETE ...
// WHERE expires < now), and tokens then start again from the database's
// clock, which is above every token issued. A session lock's row whose
// expiry is ahead protects a holder whose session ended uncleanly: do not
// delete it.
//
// A MySQL lock name is the name itself when it is at most 64 bytes (MySQL's
// limit; MariaDB's is 192) of a-z, 0-9 and _.:/-, and otherwise the prefix,
// '#' and at least 31 hex digits of SHA-256(key), so that the case rules
// of MySQL versions do not matter. GET_LOCK names are server-wide, across
// databases, while fencing rows are per database: Clients on two databases
// of one server, with the same prefix and key, share one lock (they
// exclude each other) but each database has its own row, so an acquisition
// in one does not see an unclean end of a hold in the other (it skips the
// wait for that hold's expiry) and their tokens are not ordered. Give the
// Clients of each database their own prefix (WithPrefix); Clients that
// guard one resource must use one database.
//
// A PostgreSQL advisory key is the first 64 bits of SHA-256(name), in the
// database's advisory key space (shared with the application's own
// pg_advisory_lock(bigint) calls): two names collide with probability
// about n²/2⁶⁵ for n names in use, and then share a lock (never a fencing
// row: tokens stay right).
//
// # Session locks
//
// Acquisition is one statement on a pinned connection (db.Conn) that takes
// the lock, increments the fencing counter and sets the row's expiry:
//
//	MySQL:      INSERT INTO fences ... SELECT ... FROM DUAL WHERE GET_LOCK(name, wait) = 1
//	            ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(...), expires = ...
//	PostgreSQL: WITH cfg AS (SELECT set_config('lock_timeout', wait, true)),
//	            l AS (SELECT pg_advisory_lock(key) FROM cfg)
//	            INSERT INTO fences ... SELECT ... FROM l ON CONFLICT (name) DO UPDATE ... RETURNING token
//
// TryObtain uses GET_LOCK(name, 0) and pg_try_advisory_lock. A waiter
// waits in the server a slice at a time (WithWaitSlice, 1 s): GET_LOCK's
// timeout, or a lock_timeout that ends with the statement's implicit
// transaction. Each statement runs on a ctx detached from the caller's
// cancellation (drivers close a connection whose statement is cancelled,
// and the server can still grant the lock to the dead session), in a
// goroutine of the Client's; a caller whose ctx ends returns at once, and
// the goroutine gives back whatever its statement took and returns the
// connection to the pool. Goroutines of one Client that want the same key
// wait in a local line, so only one of them holds a connection waiting in
// the server.
//
// Session locks are re-entrant per session: a session granted the lock
// twice must unlock it twice. An acquiring statement can end after the
// grant without handing the lock out: it waited for the fencing row behind
// a slower transaction (a previous holder's COMMIT in an fsync stall, an
// operator's DELETE in an open transaction) until lock_timeout,
// statement_timeout (max_statement_time, innodb_lock_wait_timeout) or a
// cancel ended it, or it failed. Every such end, and every give-back, is
// followed by unlocking until the session holds the lock no more
// (pg_advisory_unlock, RELEASE_LOCK, guarded so that a lock not held is not
// unlocked), or by closing the connection, before the connection is used
// again or pooled. So a hold's connection holds its lock exactly once, and
// no connection goes back to the pool holding one.
//
// While held, the watchdog checks the pinned connection every TTL/3 with
// one statement that proves the lock is still this session's (WHERE
// IS_USED_LOCK(name) = CONNECTION_ID(); EXISTS a granted advisory lock of
// pg_backend_pid() in pg_locks) and moves the row's expiry to the
// database's now + TTL. A broken connection or a lock not held loses the
// lease at once (ErrSessionLost, lock.ErrNotHeld); checks that fail for a
// whole TTL lose it with watchdog.ErrExpired. A lost lease's connection is
// closed, never returned to the pool: its session ends and the server
// frees the lock.
//
// Release is one statement that frees the lock and sets the row's expiry
// to 0 (MySQL: UPDATE ... WHERE name AND token AND RELEASE_LOCK(name) = 1,
// which InnoDB evaluates once on the locked row; PostgreSQL: WITH u AS
// (UPDATE ... RETURNING 1) SELECT pg_advisory_unlock(key) FROM u, since a
// qualification in READ COMMITTED can run twice on a concurrently updated
// row). The connection then goes back to the pool holding nothing; a
// release that is not confirmed closes it instead. A release that finds
// the session already ended (killed, cut, timed out) answers
// lock.ErrNotHeld with ErrSessionLost and closes Lost with that cause:
// the lock had been free since the session ended, and the caller learns
// that part of its critical section may have run without it. An uncontended
// lock-and-release costs two round trips (after the first use of a
// PostgreSQL connection, whose statements pgx prepares and caches). On
// MySQL the Client writes its arguments into its statements (strings as
// hex literals, read the same under every sql_mode and character set):
// go-sql-driver/mysql would otherwise prepare every statement with
// arguments first, a round trip more, unless the DSN sets
// interpolateParams=true.
//
// Unclean ends. The server frees a session lock the moment the session
// ends: the holder's process died, its connection was cut or killed
// (KILL, pg_terminate_backend, wait_timeout, a proxy), or the server
// crashed and restarted. The holder may then still believe it holds the
// lock until its next check. The fencing row bridges that gap: when the
// acquisition finds the previous hold's expiry ahead (it ended without a
// release), the new holder's Obtain waits until that expiry (the previous
// holder's last check plus its TTL, by the database's clock: the time by
// which that holder has reported the loss) before it returns; TryObtain
// returns lock.ErrNotObtained instead. So a crashed holder's lock passes
// on after at most its TTL, not at once: choose the TTL accordingly.
//
// # Lease table
//
// Acquisition is one statement: insert the row, or take it over if its
// expiry has passed by the database's clock (now() on PostgreSQL,
// UTC_TIMESTAMP(6) on MySQL), with the next token:
//
//	PostgreSQL: INSERT ... ON CONFLICT (name) DO UPDATE SET ... WHERE l.expires <= now() RETURNING token
//	            (in a WITH that also reads the holder's time left, for the waiter's next poll)
//	MySQL:      INSERT ... ON DUPLICATE KEY UPDATE owner = IF(expires <= UTC_TIMESTAMP(6), ...), ...
//	            token = IF(..., LAST_INSERT_ID(next token), token + LAST_INSERT_ID(0)), expires = ...
//
// On MySQL the new token travels as the statement's insert ID (0 if the
// lock is held), which does not depend on clientFoundRows the way the
// number of rows affected does. Renewal (every TTL/3, by the watchdog) is
// UPDATE ... SET expires = now + TTL WHERE name = ? AND token = ?;
// release marks the row free the same way. A renewal attempt lasts at most
// TTL/3 (then it is logged, reported and tried again). A MySQL update that changed no
// row is confirmed by a read, so a DSN without clientFoundRows=true is
// fine. Waiters poll with exponential backoff and jitter (WithPoll), never
// past the holder's expiry when PostgreSQL reports it; ctx bounds every
// wait.
//
// Late answers (both locks): an acquisition answered after its TTL has run
// since it was sent (a stalled link, a paused process) may have expired in
// the database, or would be lost on arrival; it is given back, never
// returned, and a statement not answered within its bound (the TTL, plus
// the wait slice of a session lock) counts as not obtained: TryObtain
// returns an error matching lock.ErrNotObtained, Obtain tries again. A
// session lock granted late in its wait in the server (answered more than
// TTL/3 after its statement was sent, while the lease counts from the
// send) is checked once more before Obtain returns it (one round trip):
// the lease it returns has its TTL ahead. Left to the watchdog, that check
// would run at once with the little that was left as its deadline, and a
// check cut by its deadline closes the connection, ending the session and
// the hold under a caller that finished in time.
//
// # Fencing tokens
//
// A token is the larger of the row's last token + 1 and the database's
// clock in microseconds since 1970, written in the statement that takes
// the lock (both dialects allow one statement). It is strictly larger for
// every new acquisition of a key as long as the row survives (the counter)
// or the database's clock does not go back (the floor: a row deleted, or
// restored from an older backup, starts again above every token issued
// before, since no key is taken a million times a second). Re-entry
// returns the hold's token.
//
// # Recipes without a lock
//
// The ticket-stock recipes of a database, as helpers:
//
//   - Stock.Take: one conditional UPDATE ... SET n = n - k WHERE id = ? AND
//     n >= k, its rows affected checked (ErrInsufficient; ErrNoRow for a
//     key no row has, told apart by a second statement only when no row
//     changed): atomic by the database's row lock, one round trip. Right
//     when the whole critical section is one row's arithmetic.
//   - ForUpdate: a transaction that first locks its rows with SELECT ... FOR
//     UPDATE, then runs fn; Tx is the same without the SELECT. The locking
//     clause is the caller's explicit choice (WithLocking: FOR UPDATE by
//     default, NOWAIT, SKIP LOCKED, FOR SHARE), always appended: the query
//     must not have one (ForUpdate never searches a query's text). Deadlocks
//     and lock wait timeouts of either database (MySQL 1213 and 1205,
//     PostgreSQL 40P01 and 55P03) and serialization failures (40001) roll
//     back and run it again, a bounded number of times with backoff
//     (WithAttempts, WithBackoff). Right for several rows that change
//     together; index the WHERE columns (InnoDB locks every row it scans).
//   - Versioned.Update: read the row and its version, compute, then UPDATE
//     ... SET ..., version = version + 1 WHERE id = ? AND version = ?; no
//     row changed means another writer got in between: back off and start
//     again, a bounded number of times (ErrConflict). No lock is held while
//     fn computes; under heavy contention on one row the retries cost more
//     than a lock.
//
// Statements name tables and columns that must match [a-z_][a-z0-9_]*
// (they are written into the SQL; values always travel as arguments).
//
// # When not to use it
//
// Session locks do not work through a pooler that multiplexes sessions
// (PgBouncer in transaction or statement mode): each statement may run on
// another server connection, and the check reports the lease lost at once.
// Use the lease table there. A replicated database with asynchronous
// failover is as safe as its replication: use fencing tokens, or zklock.
// For a counter or a stock level, a conditional UPDATE (Stock.Take) or a
// version column (Versioned) needs no lock at all; for several rows that
// change together, a transaction with SELECT ... FOR UPDATE (ForUpdate) is
// the database's own lock. Each hold of a session lock keeps a
// connection busy: thousands of simultaneous holds want the lease table.
package sqllock
