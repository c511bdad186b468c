// Package sqlid hands out IDs from a database (MySQL/MariaDB or
// PostgreSQL, through database/sql and the user's driver), for services that
// have a database and no Redis. Every generator implements Generator
// (Next(ctx) (int64, error)) and is safe for concurrent use. Pick by what the
// IDs must be:
//
//   - Leaf segments (NewLeaf): Meituan Leaf's segment mode on its own table,
//     leaf_alloc. Dense, strictly increasing per generator, unique
//     everywhere, at memory speed (one atomic add per ID, no I/O, no
//     allocation). The default choice.
//   - Tinyid segments (NewTinyid): Didi Tinyid's table tiny_id_info, in one
//     database or several: database i of N hands out only IDs congruent to
//     i modulo N, so a tag is served while any database is up.
//   - Tickets (NewTickets): Flickr's ticket server, the "ID database" of
//     the seed: one row (MySQL) or one sequence value (PostgreSQL) per ID,
//     as fast as the database's round trips. The baseline.
//
// Leaf segments, the default choice:
//
//	ids, err := sqlid.NewLeaf(db, sqlid.MySQL) // db: *sql.DB of your driver; sqlid.Postgres
//	if err != nil {
//		return err
//	}
//	defer ids.Close()
//	if err := ids.CreateTable(ctx); err != nil { // once, or the DDL below in a migration
//		return err
//	}
//	if err := ids.Register(ctx, "order", 1, 1000, "orders"); err != nil { // a tag's row
//		return err
//	}
//	id, err := ids.Next(ctx, "order") // from memory; one round trip per segment
//
// The options that matter: WithMaxStep (the adaptive step's upper bound,
// 10,000,000), WithTargetInterval, WithTable (LeafTable), WithMetrics and
// WithLogger. MySQL 8, MariaDB 10.5 or PostgreSQL 12 or later are required.
//
// # Guarantees
//
// Unique: no two Next calls anywhere return the same ID from one row (one
// row per database for Tinyid), as long as the database keeps its committed
// writes. Monotonic per generator: a Leaf generator's or a one-database
// Tinyid generator's IDs are strictly increasing; Tickets from one server are
// increasing in the order the server ran the statements. Not globally
// ordered: two processes serve from different segments at the same time, so
// IDs are only roughly increasing (by segment) across processes, and not at
// all across the databases of a Tinyid generator. Not gap-free: a crash
// wastes the unused rest of a process's segments (at most two per tag and
// database), and Close wastes them too.
//
// When the database is down, a segment generator serves what it has in
// memory (up to two segments), then Next returns the database's error (with
// the fetch timeout named when the database did not answer in time); it
// serves again as soon as a fetch succeeds. Tickets have nothing in memory:
// every Next needs the database.
//
// # Leaf segments
//
// Each tag (Leaf's biz_tag: order, user, …) has a row in leaf_alloc. A
// process reserves a segment in one transaction, Leaf's own statements:
//
//	UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ?   -- the row's step
//	UPDATE leaf_alloc SET max_id = max_id + ? WHERE biz_tag = ?      -- the adaptive step
//	SELECT max_id, step FROM leaf_alloc WHERE biz_tag = ?
//
// and hands out [max_id - step, max_id - 1] from memory (Leaf's convention:
// a row registered with max_id 1 hands out 1, 2, 3, …). The UPDATE locks the
// row until the commit, so every reservation gets a range of its own, across
// any number of processes and Leaf's own servers on the same row. On
// PostgreSQL one statement does both, UPDATE ... RETURNING max_id, step
// (a statement is a transaction), so a reservation is one round trip.
// Both set update_time, and match only rows that can hand out IDs (step > 0,
// max_id >= 0): a row that cannot is left as it is and Next returns
// ErrBadRow with its values.
//
// Next is an atomic add on the segment in use. When 10 % of it is used
// (Leaf's threshold), a goroutine owned by the Segments registry reserves the
// next one (double buffer), so in steady state no caller waits for the
// database; Stats().Waits counts the calls that did. The switch to the next
// segment happens under a mutex only when the current one is used up, so IDs
// come out in the order of the atomic adds: strictly increasing per
// generator (an ID is larger than every ID whose Next returned before this
// Next began). While a prefetch is late, every 1024th caller yields the
// processor, so that callers keeping every CPU busy do not starve the
// goroutine reading the database's answer.
//
// The step adapts to the draw rate as in Leaf: the first segment has the
// row's step; after that the step doubles when the time between two fetches
// was shorter than the target interval (default 15 minutes, Leaf's) and
// halves when it was at least twice as long, never below the row's step
// (read again at every fetch, so operators tune a tag by updating it) and
// never above WithMaxStep (default 10,000,000; Leaf's is 1,000,000). The row's
// step is never written.
//
// # Tinyid segments, several databases
//
// Tinyid's table has the same idea with more columns: biz_type, begin_id,
// max_id, step, delta, remainder, version. A reservation is
//
//	UPDATE tiny_id_info SET max_id = max_id + step, version = version + 1 WHERE biz_type = ?
//	SELECT max_id, step, delta, remainder FROM tiny_id_info WHERE biz_type = ?
//
// (one UPDATE ... RETURNING on PostgreSQL), and the segment is, as in
// Tinyid, the values in (max_id - step, max_id] congruent to remainder modulo
// delta: with delta 1 a row registered with max_id 0 hands out 1, 2, 3, ….
// Tinyid's own servers compare and set on version; this package increments
// it, so both can share a row. Rows with step < delta, delta < 1, a
// remainder outside [0, delta) or a negative max_id are ErrBadRow.
//
// NewTinyid takes several databases (MySQL and PostgreSQL can be mixed).
// Register gives database i of N the row delta = N, remainder = i: the
// databases' series are disjoint by construction, whatever their max_id, so
// IDs never collide across databases and no coordination between them is
// needed. A generator keeps a double buffer per database and serves from one
// while it has IDs in memory; when that one runs out it moves to the next
// database that has some, without waiting. A database that is down is left
// alone for WithRetryDelay and tried again in the background, WithRetryDelay
// (at least 50 ms) after each failure until it answers, whether or not
// callers need it, so that once back it has IDs in memory for the next
// outage of another (not after ErrUnknownTag, ErrNoTable, ErrBadRow,
// ErrOverflow or ErrConflict: those wait for a caller). Only when no
// database has an ID in memory does Next wait, for each in turn, and fail
// with one *StoreError per database if none answers. Before it serves a
// database's segment, a generator checks that its delta and remainder do not
// meet another database's (x ≡ a mod m and x ≡ b mod n meet iff a ≡ b mod
// gcd(m, n)); a row that would is refused with ErrConflict. IDs from several
// databases are unique but not increasing: each database's series grows at
// its own pace.
//
// This package reads and writes Tinyid's table in place, with Tinyid's
// names, rather than adding delta and remainder columns to leaf_alloc: users
// who run Tinyid keep their rows, and leaf_alloc stays Leaf's.
//
// # Tickets
//
// Flickr's ticket server: a table with one row, replaced for every ID, and
// the connection's LAST_INSERT_ID():
//
//	CREATE TABLE tickets64 (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
//	  stub CHAR(1) NOT NULL DEFAULT '', UNIQUE KEY stub (stub)) ENGINE=InnoDB;
//	REPLACE INTO tickets64 (stub) VALUES ('a');
//	SELECT LAST_INSERT_ID();
//
// Both statements run on one connection (db.Conn): LAST_INSERT_ID is per
// connection. Two servers hand out disjoint series when both run with
// auto_increment_increment = 2 and auto_increment_offset 1 and 2 (odd and
// even IDs). The tests set them as global variables on the server's command
// line (--auto-increment-increment=2 --auto-increment-offset=1), as Flickr
// set them in my.cnf; a DSN's system variables (go-sql-driver:
// ?auto_increment_increment=2&auto_increment_offset=1) set them per
// connection instead, which works as long as every client does so. Flickr's
// table was MyISAM (table locks); on InnoDB, concurrent REPLACEs of the one
// row deadlock, so a Tickets sends one at a time and takes a REPLACE rolled
// back as a deadlock again. On PostgreSQL a ticket is SELECT
// nextval('tickets64'), a sequence made by CreateSchema with
// WithSequenceStep's increment and start (2 and 1, 2 and 2 for two servers).
//
// # Schemas
//
// Segments.CreateTable and Tickets.CreateSchema create what they need
// (IF NOT EXISTS); Register adds a tag's row as Leaf's and Tinyid's
// operators INSERT it. Names and types follow Leaf's and Tinyid's scripts:
//
//	leaf_alloc    biz_tag VARCHAR(128) PRIMARY KEY, max_id BIGINT NOT NULL DEFAULT 1,
//	              step INT NOT NULL, description VARCHAR(256), update_time TIMESTAMP
//	tiny_id_info  id BIGINT AUTO_INCREMENT PRIMARY KEY, biz_type VARCHAR(63) UNIQUE,
//	              begin_id BIGINT, max_id BIGINT, step INT, delta INT NOT NULL DEFAULT 1,
//	              remainder INT NOT NULL DEFAULT 0, create_time, update_time,
//	              version BIGINT NOT NULL DEFAULT 0
//	tickets64     id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, stub CHAR(1) UNIQUE
//	              (PostgreSQL: the sequence tickets64)
//
// (PostgreSQL: the same columns with bigint, integer, varchar and
// bigserial.) WithTable and WithTicketTable rename them. A missing table is
// ErrNoTable, naming the table, with its CREATE statement; a tag without a
// row is ErrUnknownTag, naming the tag and the table, with the INSERT that
// registers it.
//
// # Restoring an older backup
//
// A database restored from a backup older than the IDs issued (or a row set
// back by hand, or a failover to a replica that lags) hands out ranges
// again: every process that drew from them after the backup was taken can
// repeat IDs. A generator keeps the highest value it reserved and, if a
// fetch returns a range at or below it, raises max_id past it (UPDATE ... SET
// max_id = GREATEST(max_id, floor) + step) and serves above; Stats().Rollbacks
// counts it. That protects a process from its own IDs only. Before traffic
// resumes after a restore, raise every row above the highest ID issued:
//
//	UPDATE leaf_alloc SET max_id = (SELECT MAX(id) FROM orders) + 1 WHERE biz_tag = 'order';
//
// (or by a margin larger than the IDs issued since the backup, if they are
// not all in a table). For tickets, raise the AUTO_INCREMENT
// (ALTER TABLE tickets64 AUTO_INCREMENT = n) or the sequence (SELECT
// setval('tickets64', n)).
//
// # When not to use it
//
// Not for IDs that must be unguessable (they count up) or gap-free. Not
// when IDs must be ordered across processes by time (use package idgen's
// Snowflake). Not on a database that is restored from backups without the
// step above. Tickets cost database round trips per ID (one on PostgreSQL,
// two on MySQL) and serialize on one row: use them where IDs are
// rare, or as the baseline. For Redis, see package redisid, which runs the
// same segment engine on INCRBY.
package sqlid
