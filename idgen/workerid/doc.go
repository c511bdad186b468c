// Package workerid leases Snowflake worker IDs to processes, through Redis
// (RedisLeaser), ZooKeeper (ZKLeaser) or a table in MySQL, MariaDB or
// PostgreSQL (SQLLeaser), and keeps each worker's high-water mark, so that
// a generator on a leased ID starts above every ID the ID's earlier holders
// issued. The three leasers implement Leaser: a program picks its backend
// at start-up and uses the same code after. So does the etcd module's
// (github.com/coordkit/coordkit/etcd/etcdworker), whose leases NewLease
// makes: the same Lease, generator and high-water handling.
//
// Lease a worker ID at start-up, give it back at shutdown, and issue
// Snowflakes that stop the moment the lease is lost:
//
//	leaser, err := workerid.NewZK(conn, workerid.WithSessionTimeout(10*time.Second))
//	// or workerid.NewRedis(rdb), workerid.NewSQL(db)
//	if err != nil {
//		return err
//	}
//	lease, err := leaser.Lease(ctx, "orders") // the lowest free ID in [0, 1023]
//	if err != nil {
//		return err
//	}
//	defer lease.Release(ctx)
//	ids, err := lease.NewSnowflake(ctx, idgen.LayoutTwitter) // starts above the ID's high-water mark
//	if err != nil {
//		return err
//	}
//	id, err := ids.Next()
//
// The options that matter: WithMax (the highest worker ID, 1023), WithTTL (a
// Redis or SQL lease's time to live, 10 s), WithSessionTimeout (the ZooKeeper
// connection's session timeout, 4 s),
// WithCheckpoint (how often the high-water mark is saved), WithMetrics and
// WithLogger.
//
// # Guarantees
//
// Exclusion: a worker ID of a service has at most one live holder, that is,
// one process whose generator issues IDs on it. On Redis the key admits one
// holder record at a time, and a holder's generators stop at its deadline,
// a tenth of the TTL before the key can expire (a margin for clock-rate
// drift and scheduling delay); on ZooKeeper the node belongs to one
// session, and its holder's generators stop at least T/3 − tick/2 before
// the session can expire; in SQL the row has one owner at a time, its
// expiry is computed by the database's clock when the database runs the
// claim or renewal (after the holder read its own clock to send it), and
// the holder's generators stop at its deadline, a tenth of the TTL before
// the row can expire. The exceptions are stated where they arise: a Redis
// or a database that loses the key or row while its holder runs (below,
// "Failover and data loss"), an operator who deletes or edits the key,
// node or row, clocks of the holder and the server that run at rates
// differing by more than the margin (or a server clock that is stepped
// forward: Redis and SQL expiries follow the server's wall clock), and a
// WithSessionTimeout larger than the timeout the server negotiated.
//
// A paused holder: every leaser stops a holder's generator by closing Lost,
// which a goroutine of the holder's process does when its deadline has
// passed. A holder stopped (a GC pause, SIGSTOP, a VM frozen) across that
// deadline cannot run that goroutine while stopped, so the generator does
// not rely on it: after every clock reading it asks the lease's keeper
// whether the deadline is still ahead (idgen.WithLeaseDeadline), and once
// it is not, Next returns idgen.ErrLeaseLost at once on resumption. A call
// that read the clock before the stop completes after it, with a time
// before the deadline, below the IDs of a holder that took the ID over
// after the deadline.
//
// At release: Release stops the generator for good first (Next returns an
// error matching idgen.ErrLeaseLost and ErrReleased), stores its final
// high-water mark, then closes Lost and frees the ID (deletes the key or
// node if still this lease's). The ID's next holder therefore starts above
// every ID this one issued. Close on a leaser stops only its own background
// work; leases already made stay held until released.
//
// At lease loss: the generator stops at once (Lost), and its final mark is
// stored in the background, retried for up to 10 s; a store only raises a
// mark, so this is safe even once the ID is someone else's. That final mark
// helps a successor that loads the mark after it was stored (Redis frees a
// lost key at most a tenth of the TTL after the holder stops, or at once if
// the key was deleted; ZooKeeper when the session expires); when the store
// is unreachable, only the last checkpoint and the clock protect the IDs
// issued since. A lost lease is not taken back: lease again.
//
// At restart (a process that crashed or was killed without Release): its
// ID stays taken until the key's or row's TTL runs out (Redis, SQL) or the
// server expires its session (ZooKeeper, T after the session was last
// heard from), and a
// process started meanwhile leases the lowest ID that is free, usually
// another one. Whoever leases the crashed holder's ID later starts above
// its stored mark: the last checkpoint (at most WithCheckpoint old) or,
// with idgen.WithBorrow, the last reservation. IDs the crashed holder
// issued after its last checkpoint lie before the crash, and the ID was
// taken for at least a tenth of the TTL (Redis, SQL) or T/3 − tick/2
// (ZooKeeper) after its generator last issued: they repeat only if the new
// holder's clock is behind the crashed holder's by more than that.
//
// # Algorithm
//
// Lease(ctx, service) takes the lowest free ID in [0, max] (WithMax,
// default 1023) and keeps it until Release or loss. Service names are not
// empty and contain none of "{}/" nor white space.
//
//   - Redis: Lease reads which IDs are taken (one MGET per 1024 IDs) and
//     takes the lowest free one with SET NX PX TTL (WithTTL, default 10 s),
//     its value a holder record with a new random owner UUID; if another
//     process took that ID first, it tries the next free one. The watchdog
//     renews the key every TTL/3 (renew.lua: PEXPIRE only while the key
//     still holds this lease's record). The lease's deadline is 90 % of the
//     TTL after the send time of the last renewal that succeeded (the SET's
//     at first): the lease is lost when a renewal answers "not held" or the
//     deadline passes, before Redis can expire the key. Release deletes the
//     key only if it still holds the record (release.lua).
//   - ZooKeeper: Lease takes the zklock lock "workerid-<service>", lists
//     the IDs taken (the children of the service's ids node) and creates the
//     lowest free one as an ephemeral node (another leaser's node there:
//     the next ID), then releases the lock. The node lives as long as the
//     session. Heartbeats (a sync, so that a follower answers by way of the
//     leader, then an exists of the node) go out at most T/6 apart, T the
//     session timeout (WithSessionTimeout, default 4 s); each that succeeds
//     extends the lease to its send time plus T/2 (T/3 in the lease's first
//     5T/12). The lease is lost when the node is gone or owned by another
//     session, or when that time passes, before the server can expire the
//     session (ZKLeaser gives the windows and their derivation, and what
//     happens when the create's reply is lost). Release deletes the node if
//     the session still owns it.
//   - SQL: Lease reads which IDs of the service are held (one SELECT of the
//     rows whose expiry is ahead of the database's clock) and claims the
//     lowest other one with one conditional upsert, a transaction of its
//     own: the row is inserted, or taken over if it is free or has expired,
//     with a new random owner UUID and an expiry TTL (WithTTL, default 10 s)
//     after the database's now; a row another leaser holds is left alone,
//     and the next free ID is tried. The primary key (service, id) and the
//     condition, which the database checks on the row's latest committed
//     version under its row lock, let one claim of an ID win at a time. The
//     watchdog renews the row every TTL/3 (an UPDATE of its expiry that
//     matches only while the row is still this lease's owner's and has not
//     expired); the deadline is 90 % of the TTL after the send time of the
//     last renewal that succeeded, as on Redis. Release marks the row free
//     (an empty owner, expiry now) only if it is still this lease's
//     owner's, and keeps its high-water mark. Every statement stands alone
//     (no session state, no transaction held open), so the leaser works
//     through connection poolers (with a driver configured for them).
//
// Lost closes when the lease ends; Err says why: ErrReleased after
// Release; after a loss, an error matching watchdog.ErrNotHeld (the key,
// node or row is gone or another's, or the row has expired) or
// watchdog.ErrExpired (not confirmed in time).
//
// # Generators and high-water marks
//
// Lease.NewSnowflake returns the lease's generator, built with
// idgen.OpenSnowflake over the ID's high-water store (see the schemas
// below). Stores round marks up to the millisecond and never lower them.
// The generator:
//
//   - starts above the stored mark, and fails with *idgen.ClockBackwardsError
//     if its clock is behind it by more than its tolerance (or borrow);
//   - stops issuing (idgen.ErrLeaseLost) the moment Lost closes;
//   - saves its mark every checkpoint interval (WithCheckpoint, default 3 s;
//     a save may take longer than a short interval, up to 2 s, so that a
//     slow store still gets it; the next one then follows at once).
//     With idgen.WithBorrow(ahead) each save is a reservation (the clock plus
//     ahead) and the generator borrows only below the last one stored, so a
//     restart after a crash starts above every ID it borrowed; keep the
//     checkpoint interval well below ahead, or borrowing waits for the clock.
//
// A lease has one generator: a second NewSnowflake returns
// ErrGeneratorExists (two generators on one ID would issue the same IDs in
// the same tick); share the first, which is safe for concurrent use. A
// NewSnowflake that fails does not count.
//
// # Redis key schema
//
// For service S, with the prefix P (WithPrefix, default
// "coordkit:worker:"), every key shares the hash tag {S}, so that a Cluster
// serves a service's keys from one slot and one MGET reads them:
//
//	P{S}:<id>      string  the holder record, JSON: owner (a random UUID per lease), host, pid, since;
//	                       SET NX PX TTL, renewed by the watchdog, deleted by Release
//	P{S}:hw:<id>   string  the ID's high-water mark, decimal Unix milliseconds; no TTL, only raised (highwater.lua)
//
// The holder record is compared whole by renew.lua and release.lua: a
// lease renews and deletes only its own key. List reads the records and
// their PTTLs.
//
// # ZooKeeper znode schema
//
// Under the root R (WithRoot, default "/coordkit/workers"), with the ACL of
// WithACL:
//
//	R/S/ids            persistent, created on demand
//	R/S/ids/<id>       ephemeral, the holder record (JSON: host, PID, since); owned by the holder's session
//	R/S/hw/<id>        persistent, the ID's high-water mark, decimal Unix milliseconds, raised by a versioned set
//	/coordkit/locks/workerid-S/...   zklock's lock on "workerid-S" (zklock.DefaultRoot and zklock's schema),
//	                                 held only while Lease picks an ID
//
// A node's holder is its ephemeral owner (the session), not its data: the
// heartbeat and Release check it. Nodes created without the lock (another
// tool) are respected: a create that finds the node takes the next ID.
//
// # SQL table schema
//
// One table (WithTable, default DefaultTable "coordkit_worker_node") holds
// the rows of every service; SQLLeaser.CreateSchema creates it, and
// SQLLeaser.Schema returns its CREATE TABLE. A statement that finds the
// table or a column missing returns an error matching ErrSchema that names
// the table and gives that statement. On MySQL and MariaDB (InnoDB; service
// and owner are VARBINARY, compared byte for byte whatever the collation;
// times are DATETIME(6) in UTC, never TIMESTAMP, whose values move with the
// session's time zone):
//
//	service     VARBINARY(128)  the service name (text on PostgreSQL)
//	id          BIGINT          the worker ID, in [0, max]
//	owner       VARBINARY(64)   the lease's random owner UUID; empty when free
//	host_name   VARCHAR(255)    the holder's host (WithHost), kept after release
//	pid         BIGINT          the holder's process ID, kept after release
//	launch_date DATE            the UTC date the holder leased the ID
//	created     DATETIME(6)     when the holder leased the ID (timestamptz on PostgreSQL)
//	modified    DATETIME(6)     the last claim, renewal or release
//	expires     DATETIME(6)     the row is held while this is ahead of the database's clock
//	high_water  BIGINT          the ID's high-water mark, Unix milliseconds (0: none); only raised, kept after release
//	PRIMARY KEY (service, id)
//
// Every time is the database's (UTC_TIMESTAMP(6) on MySQL and MariaDB, the
// transaction's now() on PostgreSQL), never a client's: Holder.Since is
// created, and Holder.TTL the time expires has left.
//
// The names follow Baidu uid-generator's WORKER_NODE table where they mean
// the same: ID, HOST_NAME, LAUNCH_DATE, MODIFIED and CREATED (MySQL and
// PostgreSQL compare unquoted column names regardless of case). It is not that
// table: uid-generator inserts a row with a new AUTO_INCREMENT ID at every
// start and never reuses an ID, so its IDs outgrow a Snowflake's worker
// bits (it spends 22 bits on them) and a crashed process's ID is simply
// abandoned. Here a row per (service, ID) is leased, renewed and reused,
// the lowest free ID within [0, max] first, which fits the 10 worker bits
// of Twitter's layout; a row outlives its holders to keep the ID's
// high-water mark. uid-generator's PORT and TYPE (container or actual
// host) have no counterpart: owner and pid tell holders apart. Read the
// table with the columns above, not as a WORKER_NODE.
//
// # Failover and data loss (Redis)
//
// A Redis lease is exclusive only while the server keeps its key. A restart
// without persistence, a restart from an older RDB (in which the key's TTL
// has run out), the lost tail of an AOF, or a failover to a replica that
// missed the key drops it while its holder runs. A second process can then
// lease the same ID at once, and the first keeps issuing IDs until its next
// renewal answers "not held": at most TTL/3 after its last renewal, plus the
// retries while the server is down, and never later than 90 % of the TTL
// after the last renewal that succeeded. During that overlap both issue IDs
// on one worker ID. What the high-water mark does then:
//
//   - The newcomer starts above the mark the server kept (restarted or
//     failed-over data keeps the mark, which has no TTL, at its older
//     value). IDs the first holder issues below that mark never repeat.
//   - Without borrowing the kept mark lies behind the first holder's clock:
//     both issue in the same ticks, and the same IDs can come out of both.
//     If the mark was lost too (a restart without data), the newcomer starts
//     from its clock alone, and on clocks that agree it issues the same IDs.
//     Nothing in this package prevents that.
//   - With idgen.WithBorrow(ahead), the kept mark is a reservation ahead past
//     the clock at the time it was stored: the newcomer starts above it, and
//     while the first holder's clock has not reached it and the first holder
//     did not borrow above it (under a later reservation that was lost),
//     nothing repeats. That holds when the data lost spans less than ahead
//     minus the overlap.
//
// TestRedisFailoverDropsLease shows both cases on a real redis-server. Where
// IDs must stay unique across a Redis failover, use the ZooKeeper leaser,
// whose nodes and marks are written to a quorum, or borrow well ahead of the
// replication lag plus TTL/3.
//
// # Crashes, restarts and failover (SQL)
//
// A row and its mark are committed before a claim, renewal, checkpoint or
// release returns, so a database that crashes and restarts with its data
// keeps them. While it is down (or paused) renewals fail: back within 90 %
// of the TTL after the last renewal, the lease survives; down longer, the
// holder loses it (watchdog.ErrExpired) before the row can expire, and the
// row, whose expiry followed the database's clock through the outage, is
// free once the database is back. The lost holder's final mark is stored
// when the database answers again (retried for 10 s), and a successor that
// loads it afterwards starts above every ID the holder issued
// (TestSQLServerKilled, TestSQLServerPausedPastTTL). A failover to an
// asynchronous replica that had not received the latest claim or mark is
// data loss, with the consequences described above for Redis; use
// synchronous replication (semi-sync, synchronous_commit with a standby)
// where IDs must stay unique across a failover.
//
// # When not to use it
//
// A fleet with a fixed, small set of instances (a StatefulSet's ordinal, a
// configured node number) needs no lease: give each its ID. Do not lease an
// ID per request or per short-lived job: every Lease is several round
// trips (and ZooKeeper or database writes), and a crashed holder's ID
// stays taken for a TTL or a session timeout. Where the worker bits are
// too few for the peak number of processes, Lease fails with
// *ExhaustedError; use a wider layout or a Redis-backed generator (package
// redisid) instead. The SQL leaser writes a row every TTL/3 per holder:
// on a database that cannot answer within a fraction of the TTL (a
// saturated primary, long lock waits on the table) leases are lost; give
// it a table of its own, and a TTL well above the database's worst
// latency. Do not point it at a uid-generator WORKER_NODE table (see the
// schema above).
package workerid
