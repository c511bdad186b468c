// Package workerid leases Snowflake worker IDs to processes, through Redis
// (RedisLeaser) or ZooKeeper (ZKLeaser), and keeps each worker's high-water
// mark, so that a generator on a leased ID starts above every ID the ID's
// earlier holders issued. Both leasers implement Leaser: a program picks
// its backend at start-up and uses the same code after.
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
//
// Lost closes when the lease ends; Err says why: ErrReleased after
// Release; after a loss, an error matching watchdog.ErrNotHeld (the key or
// node is gone or another's) or watchdog.ErrExpired (not confirmed in
// time).
//
// # Guarantees
//
// Exclusion: a worker ID of a service has at most one live holder, that is,
// one process whose generator issues IDs on it. On Redis the key admits one
// holder record at a time, and a holder's generators stop at its deadline,
// a tenth of the TTL before the key can expire (a margin for clock-rate
// drift and scheduling delay); on ZooKeeper the node belongs to one
// session, and its holder's generators stop at least T/3 − tick/2 before
// the session can expire. The exceptions are stated where they arise: a
// Redis that loses the key while its holder runs (below, "Failover and data
// loss"), an operator who deletes the key or node, clocks of the holder and
// the server that run at rates differing by more than the margin, and a
// WithSessionTimeout larger than the timeout the server negotiated.
//
// A paused holder: both leasers stop a holder's generator by closing Lost,
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
// ID stays taken until the key's TTL runs out (Redis) or the server expires
// its session (ZooKeeper, T after the session was last heard from), and a
// process started meanwhile leases the lowest ID that is free, usually
// another one. Whoever leases the crashed holder's ID later starts above
// its stored mark: the last checkpoint (at most WithCheckpoint old) or,
// with idgen.WithBorrow, the last reservation. IDs the crashed holder
// issued after its last checkpoint lie before the crash, and the ID was
// taken for at least a tenth of the TTL (Redis) or T/3 − tick/2
// (ZooKeeper) after its generator last issued: they repeat only if the new
// holder's clock is behind the crashed holder's by more than that.
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
//   - saves its mark every checkpoint interval (WithCheckpoint, default 3 s).
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
// # When not to use it
//
// A fleet with a fixed, small set of instances (a StatefulSet's ordinal, a
// configured node number) needs no lease: give each its ID. Do not lease an
// ID per request or per short-lived job: every Lease is several round
// trips (and ZooKeeper writes), and a crashed holder's ID stays taken for
// a TTL or a session timeout. Where the worker bits are too few for the
// peak number of processes, Lease fails with *ExhaustedError; use a wider
// layout or a Redis-backed generator (package redisid) instead.
package workerid
