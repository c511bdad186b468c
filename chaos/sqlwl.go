package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/sqllock"
)

// The sql backend: lock.Do over sqllock on MariaDB and PostgreSQL, with
// both of its locks on each: session locks (GET_LOCK, advisory locks) and
// the lease table. Every section picks one of the four variants and one of
// its sqlKeys(-keys) keys; a key is "<variant>-k<i>" and the variant routes it to its
// Client (sqlLocker), so the lock checkers see four sets of keys. The
// clients reach each database through their slot's proxy (a DSN per
// server in -addrs: MariaDB first).
//
// Each session-lock pool keeps its idle connections (SetMaxIdleConns), as a
// service's pool does, and every second (and once more when the process
// stops) the process checks them: sqllock's doc promises that no connection
// goes back to the pool holding a session lock. A connection that does is
// recorded as a poolheld event, an anomaly (checkSQLPool).
var sqlVariants = []string{"mys", "myl", "pgs", "pgl"}

// sqlVariantName describes a variant for people.
var sqlVariantName = map[string]string{
	"mys": "MariaDB session lock", "myl": "MariaDB lease table",
	"pgs": "PostgreSQL session lock", "pgl": "PostgreSQL lease table",
}

// Fault kinds of the SQL backends (sql, sqlid).
const (
	// fSQLRestart is sql-restart: kill -9 a database server and start it
	// again on its data (committed writes survive, as InnoDB's and
	// PostgreSQL's durable defaults promise).
	fSQLRestart = "sql-restart"
	// fSQLRowLock is sql-row-lock: an operator's transaction locks a
	// session lock's fencing row (SELECT ... FOR UPDATE) at a moment the
	// lock is free, and keeps it 1.2 to 2.5 s: the next acquisition is
	// granted the lock and then waits for the row until its lock wait
	// ends (after 1 s), once or twice, and obtains it within the clients'
	// 4 s obtain timeout (sqllock/doc.go, Session locks: "it waited for the fencing row
	// behind a slower transaction ... an operator's DELETE in an open
	// transaction").
	fSQLRowLock = "sql-row-lock"
	// fSQLSessionKill is sql-session-kill: an operator (or wait_timeout,
	// a proxy, a failover) ends the session that holds a session lock:
	// KILL CONNECTION of IS_USED_LOCK's connection on MariaDB,
	// pg_terminate_backend of the advisory lock's backend on PostgreSQL,
	// at a moment a holder has it (most sections last 10 ms, so its
	// release comes next). The server frees the lock at once; sqllock's
	// fencing row makes the next holder wait until the killed holder has
	// been told (sqllock/doc.go, Unclean ends), and a release that finds
	// the session ended answers lock.ErrNotHeld (checkSessionKills).
	fSQLSessionKill = "sql-session-kill"
)

// opPoolHeld is a session-lock connection found idle in its pool while
// its session held a lock: Key the lock's key, Val how many levels (or
// locks), Res the pool.
const opPoolHeld = "poolheld"

// aPoolHeld is the anomaly of a poolheld event.
const aPoolHeld = "sql-pool-conn-holds-lock"

// sqlPoolAudit is how often a client of the sql backend checks its
// session-lock pools' idle connections.
const sqlPoolAudit = time.Second

// sqlIdleConns is the session-lock pools' idle-connection limit: more than
// a process ever has, so that no idle connection is closed by the pool.
const sqlIdleConns = 64

// sqlKeys is the number of keys of each sql variant for -keys n: half as
// many, rounded up, so that a lease-table key black-holed under its holder
// has waiters (four variants of n keys spread the workers thin).
func sqlKeys(n int) int { return (n + 1) / 2 }

// chaosKey draws a section's key of backend b from rnd: k0..k(keys-1), or
// for sql a variant's key.
func chaosKey(b string, keys int, rnd *rand.Rand) string {
	if b == "sql" {
		v := sqlVariants[rnd.IntN(len(sqlVariants))]
		return fmt.Sprintf("%s-k%d", v, rnd.IntN(sqlKeys(keys)))
	}
	return fmt.Sprintf("k%d", rnd.IntN(keys))
}

// backendKeys lists every key the sections of backend b use.
func backendKeys(b string, keys int) []string {
	var out []string
	if b == "sql" {
		for _, v := range sqlVariants {
			for i := range sqlKeys(keys) {
				out = append(out, fmt.Sprintf("%s-k%d", v, i))
			}
		}
		return out
	}
	for i := range keys {
		out = append(out, fmt.Sprintf("k%d", i))
	}
	return out
}

// sqlLocker routes a key to its variant's Locker.
type sqlLocker map[string]lock.Locker

func (l sqlLocker) route(key string) (lock.Locker, error) {
	v, _, _ := strings.Cut(key, "-")
	if x, ok := l[v]; ok {
		return x, nil
	}
	return nil, fmt.Errorf("chaos: key %q has no SQL variant", key)
}

func (l sqlLocker) Obtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	x, err := l.route(key)
	if err != nil {
		return nil, err
	}
	return x.Obtain(ctx, key, opts...)
}

func (l sqlLocker) TryObtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	x, err := l.route(key)
	if err != nil {
		return nil, err
	}
	return x.TryObtain(ctx, key, opts...)
}

// sqlDSNs are the DSNs of the servers at the given addresses (MariaDB's,
// PostgreSQL's): MariaDB's row lock waits end after 1 s (a service's
// setting; the default 50 s outlasts every fault), PostgreSQL's are bounded
// by sqllock's wait slice.
func sqlDSNs(my *testserver.MariaDB, pg *testserver.Postgres, myAddr, pgAddr string) []string {
	return []string{my.DSNAt(myAddr, "innodb_lock_wait_timeout=1"), pg.DSNAt(pgAddr)}
}

// dialSQL opens the four variants' Clients over the DSNs of cfg.addrs and
// starts the pool audit, which ends with ctx (the returned close func
// waits for it and runs the last audit).
func dialSQL(ctx context.Context, cfg clientConfig, rec *Recorder) (lock.Locker, func(), error) {
	if len(cfg.addrs) != 2 {
		return nil, nil, errors.New("chaos client: sql needs the MariaDB and PostgreSQL DSNs in -addrs")
	}
	var dbs []*sql.DB
	closeDBs := func() {
		for _, db := range dbs {
			db.Close()
		}
	}
	open := func(driver, dsn string) *sql.DB {
		db, err := sql.Open(driver, dsn) // only parses the DSN
		if err != nil {
			return nil
		}
		dbs = append(dbs, db)
		return db
	}
	myS, myL := open("mysql", cfg.addrs[0]), open("mysql", cfg.addrs[0])
	pgS, pgL := open("pgx", cfg.addrs[1]), open("pgx", cfg.addrs[1])
	if myS == nil || myL == nil || pgS == nil || pgL == nil {
		closeDBs()
		return nil, nil, errors.New("chaos client: bad SQL DSN")
	}
	myS.SetMaxIdleConns(sqlIdleConns)
	pgS.SetMaxIdleConns(sqlIdleConns)
	var clients []*sqllock.Client
	add := func(c *sqllock.Client, err error) *sqllock.Client {
		if err == nil {
			clients = append(clients, c)
		}
		return c
	}
	l := sqlLocker{
		"mys": add(sqllock.NewMySQL(myS)),
		"myl": add(sqllock.NewLeaseTable(myL, sqllock.MySQL)),
		"pgs": add(sqllock.NewPostgres(pgS)),
		"pgl": add(sqllock.NewLeaseTable(pgL, sqllock.Postgres)),
	}
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
		closeDBs()
	}
	if len(clients) != len(sqlVariants) {
		closeAll()
		return nil, nil, errors.New("chaos client: sqllock clients")
	}
	a := &poolAudit{rec: rec, keys: sqlKeys(cfg.keys), pools: map[string]*sql.DB{"mys": myS, "pgs": pgS}}
	actx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // owned by the close func below: ends when actx ends
		defer close(done)
		a.loop(actx)
	}()
	return l, func() {
		stop()
		<-done
		// The workers have ended (every hold released): the last check.
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		a.check(cctx)
		cancel()
		closeAll()
	}, nil
}

// poolAudit checks the idle connections of the session-lock pools.
type poolAudit struct {
	rec   *Recorder
	keys  int
	pools map[string]*sql.DB // by variant
	mu    sync.Mutex         // one check at a time
}

func (a *poolAudit) loop(ctx context.Context) {
	t := time.NewTicker(sqlPoolAudit)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, sqlPoolAudit/2)
		a.check(cctx)
		cancel()
	}
}

// check takes as many connections from each pool as it has idle (the idle
// ones first: a pool hands those out before it opens new ones) and asks
// each session whether it holds a session lock of a key of the variant.
// A connection taken by sqllock is never idle while it holds a lock, so
// every one found holding is an anomaly.
func (a *poolAudit) check(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, v := range []string{"mys", "pgs"} {
		db := a.pools[v]
		n := db.Stats().Idle
		var conns []*sql.Conn
		for range n {
			c, err := db.Conn(ctx)
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			for i := range a.keys {
				key := fmt.Sprintf("%s-k%d", v, i)
				name := sqllock.DefaultPrefix + key
				var held int64
				var err error
				if v == "mys" {
					// The GET_LOCK name is the name itself: short, of a-z0-9-:.
					err = c.QueryRowContext(ctx, "SELECT COALESCE(IS_USED_LOCK(?) = CONNECTION_ID(), 0)", name).Scan(&held)
				} else {
					// A bigint advisory key k is classid k>>32, objid k&0xffffffff, objsubid 1.
					k := uint64(pgAdvisoryKey(name))
					err = c.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
  AND pid = pg_backend_pid() AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1`,
						int64(k>>32), int64(k&0xffffffff)).Scan(&held)
				}
				if err != nil {
					break // a broken connection holds nothing
				}
				if held > 0 {
					a.rec.Record(Event{Op: opPoolHeld, Key: key, Val: held, Res: sqlVariantName[v]})
				}
			}
		}
		for _, c := range conns {
			c.Close()
		}
	}
}

// pgAdvisoryKey is sqllock's advisory key of a lock name (its doc: the
// first 64 bits of SHA-256(name)).
func pgAdvisoryKey(name string) int64 {
	sum := sha256.Sum256([]byte(name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// sqlServers are the database servers of the SQL backends and the
// orchestrator's own pools on them (direct, not through a proxy).
type sqlServers struct {
	my   *testserver.MariaDB
	pg   *testserver.Postgres
	myDB *sql.DB
	pgDB *sql.DB
}

// newSQLServers starts MariaDB and PostgreSQL (with pgOpts) and opens the
// orchestrator's pools (no idle connections kept: a fault's session ends
// with it).
func newSQLServers(pgOpts ...testserver.SQLOption) (*sqlServers, error) {
	s := &sqlServers{}
	var err error
	if s.my, err = testserver.NewMariaDB(); err != nil {
		return nil, err
	}
	if s.pg, err = testserver.NewPostgres(pgOpts...); err != nil {
		s.close()
		return nil, err
	}
	if s.myDB, err = sql.Open("mysql", s.my.DSN()); err == nil {
		s.pgDB, err = sql.Open("pgx", s.pg.DSN())
	}
	if err != nil {
		s.close()
		return nil, err
	}
	s.myDB.SetMaxIdleConns(0)
	s.pgDB.SetMaxIdleConns(0)
	return s, nil
}

// addrs are the servers' addresses, MariaDB first.
func (s *sqlServers) addrs() []string { return []string{s.my.Addr(), s.pg.Addr()} }

// createLockTables creates sqllock's tables (session fences, lease table)
// in both databases, before the clients start.
func (s *sqlServers) createLockTables(ctx context.Context) error {
	for _, mk := range []func() (*sqllock.Client, error){
		func() (*sqllock.Client, error) { return sqllock.NewMySQL(s.myDB) },
		func() (*sqllock.Client, error) { return sqllock.NewLeaseTable(s.myDB, sqllock.MySQL) },
		func() (*sqllock.Client, error) { return sqllock.NewPostgres(s.pgDB) },
		func() (*sqllock.Client, error) { return sqllock.NewLeaseTable(s.pgDB, sqllock.Postgres) },
	} {
		c, err := mk()
		if err != nil {
			return err
		}
		err = c.CreateTable(ctx)
		c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *sqlServers) close() {
	for _, db := range []*sql.DB{s.myDB, s.pgDB} {
		if db != nil {
			db.Close()
		}
	}
	if s.my != nil {
		s.my.Close()
	}
	if s.pg != nil {
		s.pg.Close()
	}
}

// server is server i (0 MariaDB, 1 PostgreSQL), its name and pool.
func (s *sqlServers) server(i int) (interface {
	Pause() error
	Resume() error
	Restart() error
}, string, *sql.DB) {
	if i%2 == 0 {
		return s.my, "mariadb", s.myDB
	}
	return s.pg, "postgres", s.pgDB
}

// heal resumes both servers and starts a stopped one.
func (s *sqlServers) heal() error {
	var errs []error
	for _, srv := range []interface {
		Resume() error
		Running() bool
		Start() error
	}{s.my, s.pg} {
		srv.Resume()
		if !srv.Running() {
			if err := srv.Start(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// applySQL applies the faults that act on the SQL servers; it reports
// false for the others.
func (e *env) applySQL(ctx context.Context, s step, f *Fault) (bool, error) {
	srv, name, db := e.sql.server(s.Target)
	switch s.Kind {
	case fProxyBlackhole:
		if e.cfg.backend != "sql" {
			return false, nil
		}
		// A lease-table holder loses its row only while its renewals do
		// not get through: black-hole a process that holds one in a long
		// section (held 100 ms: the others last at most hold; at most
		// 600 ms: a long section lasts 2 TTL, so that it is still held
		// when a row taken too early would be), so that the row expires
		// under it, as the doc says, and no earlier.
		sl := e.slots[s.Target%len(e.slots)]
		_, _, f.Proc = sl.current()
		f.Target = f.Proc
		f.Detail = "no lease-table key held 100-600 ms within 2 s"
		if e.waitLeaseHeld(ctx, f.Proc, 100*time.Millisecond, 600*time.Millisecond, 2*time.Second) {
			f.Detail = "while holding a lease-table key in a long section"
		}
		for _, p := range sl.proxies {
			p.SetBlackhole(true)
		}
		sleepCtx(ctx, s.Dur)
		for _, p := range sl.proxies {
			p.SetBlackhole(false)
		}
		return true, nil
	case fServerPause:
		f.Target = name
		if err := srv.Pause(); err != nil {
			return true, err
		}
		sleepCtx(ctx, s.Dur)
		return true, srv.Resume()
	case fSQLRestart:
		f.Target = name
		return true, srv.Restart()
	case fSQLRowLock:
		v := "mys"
		if s.Target%2 == 1 {
			v = "pgs"
		}
		var names []string // the drawn key first
		for i := range sqlKeys(e.cfg.keys) {
			names = append(names, fmt.Sprintf("%s%s-k%d", sqllock.DefaultPrefix, v, (s.Target/2+i)%sqlKeys(e.cfg.keys)))
		}
		used, detail, err := lockFenceRow(ctx, db, v == "mys", names, s.Dur)
		f.Target, f.Detail = name+" "+strings.TrimPrefix(used, sqllock.DefaultPrefix), detail
		return true, err
	case fSQLIDRollback:
		f.Target = name
		var err error
		f.Detail, err = rollbackSQLID(ctx, db, s.Target%2 == 0, s.Dur)
		return true, err
	case fSQLSessionKill:
		v := "mys"
		if s.Target%2 == 1 {
			v = "pgs"
		}
		var keys []string // the drawn key first
		for i := range sqlKeys(e.cfg.keys) {
			keys = append(keys, fmt.Sprintf("%s-k%d", v, (s.Target/2+i)%sqlKeys(e.cfg.keys)))
		}
		key, detail, start, err := killLockSession(ctx, db, v == "mys", keys, 3*time.Second, func() map[string]bool { return e.sectionKeys(v, 5*time.Millisecond) })
		f.Target, f.Detail = name+" "+key, detail
		if start != 0 {
			f.Start = start // the lookup: the session held the key from then to End
		}
		return true, err
	}
	return false, nil
}

// killLockSession is sql-session-kill on one of keys (the variant's): it
// looks for the session holding each in turn, every few ms for up to d,
// and kills the first it finds. It returns the key, a detail and when the
// successful lookup began (CLOCK_MONOTONIC), 0 if none was held. It
// looks only at the keys inSection returns (held by a client in a section
// that began a moment ago), so that the killed session's holder releases
// next, most often before its watchdog's check: a session that holds a
// lock while its Obtain waits for the fencing row tells nothing about a
// release.
func killLockSession(ctx context.Context, db *sql.DB, mysql bool, keys []string, d time.Duration, inSection func() map[string]bool) (string, string, int64, error) {
	// One connection for the lookups and the kill: the orchestrator's
	// pools keep none idle, and a new PostgreSQL backend per statement
	// took 25 ms, past most sections' 10 ms.
	conn, err := db.Conn(ctx)
	if err != nil {
		return keys[0], "", 0, err
	}
	defer conn.Close()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		held := inSection()
		for _, key := range keys {
			if !held[key] {
				continue
			}
			name := sqllock.DefaultPrefix + key
			start := monoNow()
			var id sql.NullInt64
			if mysql {
				err = conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", name).Scan(&id)
				if err == nil && id.Valid {
					_, err = conn.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id.Int64))
				}
			} else {
				// The lookup and the kill in one statement: the session
				// killed is the one holding the lock as it ran.
				k := uint64(pgAdvisoryKey(name))
				// (The LIMIT keeps the subquery from being flattened,
				// so that pg_terminate_backend runs on its row only.)
				var ok bool
				err = conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT pid, pg_terminate_backend(pid) FROM (SELECT pid FROM pg_locks
  WHERE locktype = 'advisory' AND granted AND classid::bigint = %d AND objid::bigint = %d AND objsubid = 1 LIMIT 1) l`,
					int64(k>>32), int64(k&0xffffffff))).Scan(&id, &ok)
				if err == nil && !ok {
					err = fmt.Errorf("pg_terminate_backend(%d): false", id.Int64)
				}
				if errors.Is(err, sql.ErrNoRows) {
					err = nil
				}
			}
			if err != nil {
				return key, "", 0, err
			}
			if !id.Valid {
				continue
			}
			return key, fmt.Sprintf("session %d, which held %s, killed", id.Int64, key), start, nil
		}
		sleepCtx(ctx, time.Millisecond)
	}
	return keys[0], fmt.Sprintf("none of %s held in a section within %v", strings.Join(keys, ", "), d), 0, nil
}

// lockFenceRow is sql-row-lock on one of the locks called names: take
// one at a moment it is free (trying each every few ms for up to 3 s, the
// drawn one first, without a place in their lines: the next acquisition
// then comes from a waiter that has most of its obtain timeout before it;
// if none was free, wait up to 3 s in the first one's line), lock its
// fencing row in a transaction, free the lock, so that the next waiter is
// granted it and waits for the row, and keep the row d. It returns the
// name it locked.
func lockFenceRow(ctx context.Context, db *sql.DB, mysql bool, names []string, d time.Duration) (string, string, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return names[0], "", err
	}
	defer conn.Close() // the pool keeps no idle connection: the session ends
	tryQ, waitQ, rowQ, unlockQ := "SELECT GET_LOCK(?, 0)", "SELECT GET_LOCK(?, 3)",
		"SELECT name FROM "+sqllock.DefaultFenceTable+" WHERE name = ? FOR UPDATE", "SELECT RELEASE_LOCK(?)"
	arg := func(name string) any { return name }
	if !mysql {
		tryQ, waitQ = "SELECT pg_try_advisory_lock($1)::int", "SELECT 1 FROM (SELECT pg_advisory_lock($1)) l"
		rowQ, unlockQ = "SELECT name FROM "+sqllock.DefaultFenceTable+" WHERE name = $1 FOR UPDATE", "SELECT pg_advisory_unlock($1)"
		arg = func(name string) any { return pgAdvisoryKey(name) }
		if _, err := conn.ExecContext(ctx, "SET lock_timeout = '3s'"); err != nil {
			return names[0], "", err
		}
	}
	name, how := "", ""
	tries := 0
	for deadline := time.Now().Add(3 * time.Second); name == ""; tries++ {
		for _, n := range names {
			var got sql.NullInt64
			if err := conn.QueryRowContext(ctx, tryQ, arg(n)).Scan(&got); err != nil {
				return n, "", err
			}
			if got.Int64 == 1 {
				name, how = n, fmt.Sprintf("free at try %d", tries+1)
				break
			}
		}
		if name != "" {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var got sql.NullInt64
			if err := conn.QueryRowContext(ctx, waitQ, arg(names[0])).Scan(&got); err != nil || got.Int64 != 1 {
				return names[0], fmt.Sprintf("no lock free in %d tries, and not obtained in its line in 3 s", tries+1), nil
			}
			name, how = names[0], fmt.Sprintf("no lock free in %d tries, obtained in its line", tries+1)
		}
		sleepCtx(ctx, 3*time.Millisecond)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return name, "", err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, rowQ, name)
	if err != nil {
		return name, "", err
	}
	rows.Close()
	var freed any
	if err := tx.QueryRowContext(ctx, unlockQ, arg(name)).Scan(&freed); err != nil {
		return name, "", err
	}
	sleepCtx(ctx, d)
	return name, fmt.Sprintf("lock %s; its fencing row locked %v after the lock was freed", how, d), nil
}

// checkSQLPool: sqllock's doc promises that no connection goes back to the
// pool holding a session lock; every poolheld event a client recorded
// (poolAudit) is one that did.
func (r *Result) checkSQLPool(in Input) {
	for _, e := range in.Events {
		if e.Op == opPoolHeld {
			r.violate(aPoolHeld, e.Key, fmt.Sprintf("%s found an idle connection of its %s pool holding %s (%d level(s)) at %s",
				e.Proc, e.Res, e.Key, e.Val, time.Unix(0, e.Wall).UTC().Format("15:04:05.000")))
		}
	}
}

// aSessionKillUnrep: a hold whose session was killed while it held the
// lock (sql-session-kill) answered its release other than "not held",
// without Lost closed first: sqllock/doc.go promises lock.ErrNotHeld with
// ErrSessionLost, so that the caller learns that part of its section may
// have run without the lock.
const aSessionKillUnrep = "session-kill-unreported"

// checkSessionKills: for each sql-session-kill, the hold of its key that
// held from before the lookup found the session until after the kill
// (acquired by Start, its release invoked after End: no other session
// held the key meanwhile, so the killed session was its) must have been
// told: Lost, or its release answering "not held". A hold whose process
// ended before it answered its release is not judged.
func (r *Result) checkSessionKills(in Input) {
	for _, f := range in.Faults {
		if f.Kind != fSQLSessionKill || f.Err != "" || !strings.Contains(f.Detail, "killed") {
			continue
		}
		_, key, _ := strings.Cut(f.Target, " ")
		for _, h := range r.byKey[key] {
			if h.Acquired == 0 || h.Acquired > f.Start || h.Release != 0 && h.Release < f.End || h.Release == 0 && h.Lost == 0 {
				continue
			}
			told := h.Lost != 0 && (h.Release == 0 || h.Lost <= h.Released) || h.RelRes == "notheld"
			if !told && h.Released != 0 {
				r.violate(aSessionKillUnrep, key, fmt.Sprintf("%s held %s when its session was killed (%s), and its release answered %q with Lost open",
					h.ID, key, f.Detail, h.RelRes), h)
			}
		}
	}
}

// backendLong is the fraction of long sections (-long) of a backend when
// the flag does not set one: the sql backend's lease-table holders lose
// their rows only while they hold past a renewal that failed, which a
// section of up to 10 ms, ended by its release, never does. Few, so that
// most workers run short sections and queue up behind a long one (a row
// taken too early needs a waiter).
var backendLong = map[string]float64{"sql": 0.03}

// sectionKeys returns the keys of variant v that a client process holds
// in a section it entered at most within ago, by the tails of their
// histories.
func (e *env) sectionKeys(v string, within time.Duration) map[string]bool {
	keys := map[string]bool{}
	buf := make([]byte, 4096)
	now := monoNow()
	for _, sl := range e.slots {
		_, _, proc := sl.current()
		f, err := os.Open(filepath.Join(e.dir, "hist-"+proc+".jsonl"))
		if err != nil {
			continue
		}
		var n int
		if st, err := f.Stat(); err == nil {
			n, _ = f.ReadAt(buf, max(st.Size()-int64(len(buf)), 0))
		}
		f.Close()
		open := map[string]Event{}
		for _, line := range bytes.Split(buf[:n], []byte("\n")) {
			var ev Event
			if json.Unmarshal(line, &ev) != nil || ev.Hold == "" || !strings.HasPrefix(ev.Key, v+"-") {
				continue
			}
			switch ev.Op {
			case opAcquired:
				open[ev.Hold] = ev
			case opRelease, opLost:
				delete(open, ev.Hold)
			}
		}
		for _, ev := range open {
			if now-ev.Mono <= within.Nanoseconds() {
				keys[ev.Key] = true
			}
		}
	}
	return keys
}

// waitLeaseHeld polls the tail of proc's history until one of its holds of
// a lease-table key (myl-*, pgl-*) has been held for from minAge to maxAge,
// or until d has passed (as waitHeldFor does for any hold).
func (e *env) waitLeaseHeld(ctx context.Context, proc string, minAge, maxAge, d time.Duration) bool {
	path := filepath.Join(e.dir, "hist-"+proc+".jsonl")
	deadline := time.Now().Add(d)
	buf := make([]byte, 8192)
	open, gone := map[string]int64{}, map[string]bool{}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		f, err := os.Open(path)
		if err == nil {
			var n int
			if st, err := f.Stat(); err == nil {
				n, _ = f.ReadAt(buf, max(st.Size()-int64(len(buf)), 0))
			}
			f.Close()
			for _, line := range bytes.Split(buf[:n], []byte("\n")) {
				var ev Event
				if json.Unmarshal(line, &ev) != nil || ev.Hold == "" ||
					!(strings.HasPrefix(ev.Key, "myl-") || strings.HasPrefix(ev.Key, "pgl-")) {
					continue
				}
				switch ev.Op {
				case opAcquired:
					if !gone[ev.Hold] {
						open[ev.Hold] = ev.Mono
					}
				case opRelease, opLost:
					gone[ev.Hold] = true
					delete(open, ev.Hold)
				}
			}
		}
		for _, at := range open {
			if age := monoNow() - at; age >= minAge.Nanoseconds() && age <= maxAge.Nanoseconds() {
				return true
			}
		}
		time.Sleep(time.Millisecond)
	}
	return false
}
