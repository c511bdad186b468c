package sqllock

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
)

// Dialect names the SQL a Client speaks: MySQL or Postgres (workerid's SQL
// leaser takes the same values). The zero Dialect is invalid.
type Dialect int

const (
	// MySQL is MySQL 8 and MariaDB 10.5 or later (GET_LOCK, INSERT ... ON
	// DUPLICATE KEY UPDATE, LAST_INSERT_ID(expr), UTC_TIMESTAMP(6)).
	MySQL Dialect = iota + 1
	// Postgres is PostgreSQL 12 or later (advisory locks, INSERT ... ON
	// CONFLICT ... RETURNING, lock_timeout).
	Postgres
)

// String returns "mysql" or "postgres".
func (d Dialect) String() string {
	switch d {
	case MySQL:
		return "mysql"
	case Postgres:
		return "postgres"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// Valid reports whether d is MySQL or Postgres.
func (d Dialect) Valid() bool { return d == MySQL || d == Postgres }

// mysqlLockNameLen is MySQL's limit on GET_LOCK names (MariaDB's is 192).
const mysqlLockNameLen = 64

// mysqlLockName is the GET_LOCK name of the lock called name (prefix +
// key): name itself when it has at most 64 bytes of a-z, 0-9 and _.:/-
// (names MySQL and MariaDB compare alike, whatever their case rules), else
// the prefix, '#' and as many hex digits of SHA-256(key) as fit in 64
// bytes (at least 31: 124 bits, so that two keys collide with negligible
// probability; they would then share one lock, never the fencing counter).
// The database's name is not part of it (see the package documentation):
// adding it would change every name, and processes of two versions would
// then hold one key at once during an upgrade.
func mysqlLockName(prefix, key string) string {
	if len(prefix)+len(key) <= mysqlLockNameLen && plainName(key) {
		return prefix + key
	}
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:])
	return prefix + "#" + h[:mysqlLockNameLen-len(prefix)-1]
}

// pgLockKey is the advisory lock key of the lock called name (prefix +
// key): the first 8 bytes of SHA-256(name), as a signed 64-bit integer.
// Two names collide with probability about n²/2⁶⁵ for n names in use;
// they then share one lock (never a fencing counter: those are per name).
func pgLockKey(name string) int64 {
	sum := sha256.Sum256([]byte(name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// The database's clock in microseconds since the Unix epoch, as a BIGINT:
// the floor of every fencing token (see the package documentation).
const (
	// UTC_TIMESTAMP(6) is the statement's start.
	mysqlNowUS = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
	// now() is the start of the statement's (implicit) transaction.
	pgTxNowUS = "(extract(epoch FROM now()) * 1000000)::bigint"
)

// sessionSQL is the SQL of a session lock on one table.
type sessionSQL struct {
	acquire string // waits up to a slice (MySQL: a whole number of seconds)
	try     string // one attempt
	grace   string // MySQL: the hold's token and how long to wait before it may start
	check   string // extends the row's expiry if this connection holds the lock
	confirm string // MySQL: is the lock still this connection's (after 0 rows changed)
	release string // frees the lock and marks the row cleanly released
	undo    string // frees a lock not handed out, taking back its extension of the row's expiry
	unlock  string // frees one level of the lock, if held, and nothing else: true if it did
	holder  string // owner and token of the current holder
}

// leaseSQL is the SQL of the lease table.
type leaseSQL struct {
	acquire string
	renew   string
	release string
	confirm string // MySQL: is the row still the hold's (after 0 rows affected)
	holder  string
}

func newSessionSQL(d Dialect, table string) sessionSQL {
	if d == MySQL {
		r := strings.NewReplacer("{t}", table, "{now}", mysqlNowUS)
		// Arguments: name, owner, TTL in µs, lock name, timeout in
		// seconds, TTL in µs. The assignments run left to right and see
		// the values assigned before them: expires comes last. The insert
		// ID is the new token, negated when the row's previous hold had
		// not expired (its session ended without a release): the caller
		// reads grace, then waits.
		const acquire = `INSERT INTO {t} (name, token, owner, session, expires)
SELECT ?, LAST_INSERT_ID({now}), ?, CONNECTION_ID(), {now} + ? FROM DUAL WHERE GET_LOCK(?, ?) = 1
ON DUPLICATE KEY UPDATE
  token = GREATEST(token + 1, VALUES(token))
    + 0 * LAST_INSERT_ID(IF(expires > {now}, -1, 1) * GREATEST(token + 1, VALUES(token))),
  owner = VALUES(owner), session = VALUES(session),
  expires = GREATEST(expires, {now}) + ?`
		return sessionSQL{
			acquire: r.Replace(acquire),
			try:     r.Replace(acquire),
			// Arguments: TTL in µs, name.
			grace: r.Replace("SELECT token, expires - ? - {now} FROM {t} WHERE name = ?"),
			// Arguments: TTL in µs, name, token, lock name.
			check: r.Replace("UPDATE {t} SET expires = {now} + ? WHERE name = ? AND token = ? AND IS_USED_LOCK(?) = CONNECTION_ID()"),
			// Arguments: name, token, lock name.
			confirm: r.Replace("SELECT COUNT(*) FROM {t} WHERE name = ? AND token = ? AND IS_USED_LOCK(?) = CONNECTION_ID()"),
			// Arguments: name, token, lock name. InnoDB reads the row for
			// an UPDATE with a lock, then checks the rest of the WHERE on
			// it, once: RELEASE_LOCK runs once, on the hold's row.
			release: r.Replace("UPDATE {t} SET expires = 0 WHERE name = ? AND token = ? AND RELEASE_LOCK(?) = 1"),
			// Arguments: TTL in µs, name, token, lock name.
			undo: r.Replace("UPDATE {t} SET expires = expires - ? WHERE name = ? AND token = ? AND RELEASE_LOCK(?) = 1"),
			// Arguments: lock name. 1 if it freed one level of the lock
			// (GET_LOCK is re-entrant), 0 or NULL if it held none.
			unlock: "SELECT RELEASE_LOCK(?)",
			// Arguments: name, lock name.
			holder: r.Replace("SELECT owner, token FROM {t} WHERE name = ? AND session = IS_USED_LOCK(?)"),
		}
	}
	// now() is the statement's start, before any wait for the lock.
	r := strings.NewReplacer("{t}", table, "{now}", pgTxNowUS)
	// Arguments: key, name, owner, TTL in µs (and, for acquire, the
	// lock_timeout). RETURNING gives the token and how long to wait
	// before the hold may start (> 0 when the previous hold's session
	// ended without a release).
	const upsert = `INSERT INTO {t} AS f (name, token, owner, session, expires)
SELECT $2, {now}, $3, pg_backend_pid(), {now} + $4 FROM l
ON CONFLICT (name) DO UPDATE SET token = GREATEST(f.token + 1, EXCLUDED.token),
  owner = EXCLUDED.owner, session = EXCLUDED.session, expires = GREATEST(f.expires, {now}) + $4
RETURNING token, expires - $4 - {now}`
	const mine = `locktype = 'advisory' AND granted AND objsubid = 1
  AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`
	return sessionSQL{
		// set_config(..., true) lasts until the end of the statement's
		// implicit transaction.
		acquire: r.Replace(`WITH cfg AS (SELECT set_config('lock_timeout', $5, true)),
l AS (SELECT pg_advisory_lock($1) FROM cfg)
` + upsert),
		try: r.Replace(`WITH l AS (SELECT 1 WHERE pg_try_advisory_lock($1))
` + upsert),
		// Arguments: key, name, token, TTL in µs.
		check: r.Replace(`UPDATE {t} SET expires = {now} + $4 WHERE name = $2 AND token = $3
  AND EXISTS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid() AND ` + mine + `)
RETURNING true`),
		// Arguments: key, name, token. The unlock runs once the row is
		// updated (and locked): in the UPDATE's WHERE it could run twice,
		// the second time on a newer version of the row (READ COMMITTED
		// re-checks the qualification of a row updated concurrently), and
		// answer false for a lock it had just freed.
		release: r.Replace(`WITH u AS (UPDATE {t} SET expires = 0 WHERE name = $2 AND token = $3 RETURNING 1)
SELECT pg_advisory_unlock($1) FROM u`),
		// Arguments: key, name, token, TTL in µs.
		undo: r.Replace(`WITH u AS (UPDATE {t} SET expires = expires - $4 WHERE name = $2 AND token = $3 RETURNING 1)
SELECT pg_advisory_unlock($1) FROM u`),
		// Arguments: key. Unlocks one level of a lock this session holds,
		// and answers false, without pg_advisory_unlock's warning, when it
		// holds none (the EXISTS, an InitPlan, runs first).
		unlock: "SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid() AND " + mine + `)
  THEN pg_advisory_unlock($1) ELSE false END`,
		// Arguments: key, name.
		holder: r.Replace(`SELECT f.owner, f.token FROM {t} f WHERE f.name = $2 AND EXISTS (
  SELECT 1 FROM pg_locks WHERE pid = f.session
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND ` + mine + ")"),
	}
}

func newLeaseSQL(d Dialect, table string) leaseSQL {
	if d == MySQL {
		r := strings.NewReplacer("{t}", table, "{now}", mysqlNowUS)
		return leaseSQL{
			// Arguments: name, owner, TTL in µs. The assignments run left
			// to right and see the values assigned before them: expires
			// comes last. LAST_INSERT_ID(expr) makes the statement's
			// insert ID the new token, or 0 if the lock is held: reliable
			// whatever clientFoundRows says, unlike the rows affected.
			acquire: r.Replace(`INSERT INTO {t} (name, owner, token, expires)
VALUES (?, ?, LAST_INSERT_ID({now}), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
  owner = IF(expires <= UTC_TIMESTAMP(6), VALUES(owner), owner),
  token = IF(expires <= UTC_TIMESTAMP(6), LAST_INSERT_ID(GREATEST(token + 1, VALUES(token))), token + LAST_INSERT_ID(0)),
  expires = IF(expires <= UTC_TIMESTAMP(6), VALUES(expires), expires)`),
			// Arguments: TTL in µs, name, token.
			renew: r.Replace("UPDATE {t} SET expires = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE name = ? AND token = ?"),
			// Arguments: name, token.
			release: r.Replace("UPDATE {t} SET owner = '', expires = UTC_TIMESTAMP(6) WHERE name = ? AND token = ?"),
			confirm: r.Replace("SELECT COUNT(*) FROM {t} WHERE name = ? AND token = ?"),
			holder:  r.Replace("SELECT owner, token FROM {t} WHERE name = ? AND expires > UTC_TIMESTAMP(6)"),
		}
	}
	r := strings.NewReplacer("{t}", table, "{now}", pgTxNowUS)
	return leaseSQL{
		// Arguments: name, owner, TTL in µs. When the lock is held, the
		// second SELECT reads the holder's row from the statement's
		// snapshot: how long it has left, in ms.
		acquire: r.Replace(`WITH ins AS (
  INSERT INTO {t} AS l (name, owner, token, expires)
  VALUES ($1, $2, {now}, now() + $3::bigint * interval '1 microsecond')
  ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner,
    token = GREATEST(l.token + 1, EXCLUDED.token), expires = EXCLUDED.expires
  WHERE l.expires <= now()
  RETURNING token)
SELECT token, 0::bigint FROM ins
UNION ALL
SELECT 0, GREATEST(ceil(extract(epoch FROM (expires - now())) * 1000), 0)::bigint
  FROM {t} WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM ins)`),
		renew:   r.Replace("UPDATE {t} SET expires = now() + $1::bigint * interval '1 microsecond' WHERE name = $2 AND token = $3"),
		release: r.Replace("UPDATE {t} SET owner = '', expires = now() WHERE name = $1 AND token = $2"),
		holder:  r.Replace("SELECT owner, token FROM {t} WHERE name = $1 AND expires > now()"),
	}
}
