// Package workerid leases Snowflake worker IDs to processes, through Redis
// (RedisLeaser) or ZooKeeper (ZKLeaser), and keeps each worker's high-water
// mark, so that a generator on a leased ID starts above every ID the ID's
// earlier holders issued.
//
// # Leasing
//
// Lease(ctx, service) takes the lowest free ID in [0, max] (WithMax, default
// 1023) and keeps it until Release or loss.
//
//   - Redis: one key per ID, <prefix>{<service>}:<id> (prefix
//     "coordkit:worker:" by default), holding a JSON holder record, taken with
//     SET NX PX and renewed every TTL/3 by the watchdog (renew.lua compares
//     the record). The lease is lost when a renewal answers "not held", or
//     when renewals have failed for 90 % of the TTL (WithTTL, default 10 s),
//     before Redis can expire the key.
//   - ZooKeeper: under a zklock lock on the service, an ephemeral node
//     <root>/<service>/ids/<id> (root "/coordkit/workers" by default). The
//     lease is lost when the node is gone or belongs to another session, or
//     when a heartbeat could not confirm it in time, before the server can
//     expire the session (ZKLeaser's comment gives the windows).
//
// Lost closes when the lease ends; Err says why.
//
// Both leasers stop a holder's generator by closing Lost, which a goroutine
// of the holder's process does when its deadline has passed. A holder
// stopped (a GC pause, SIGSTOP, a VM frozen) across that deadline cannot run
// that goroutine while stopped, so the generator does not rely on it: after
// every clock reading it asks the lease's keeper whether the deadline is
// still ahead (idgen.WithLeaseDeadline), and once it is not, Next returns
// idgen.ErrLeaseLost at once on resumption. A call that read the clock
// before the stop completes after it, with a time before the deadline,
// below the IDs of a holder that took the ID over after the deadline.
//
// # Generators and high-water marks
//
// Lease.NewSnowflake returns the lease's generator, built with
// idgen.OpenSnowflake over the ID's high-water store (Redis: the key
// <prefix>{<service>}:hw:<id>, Unix milliseconds raised by a Lua max;
// ZooKeeper: the persistent node <root>/<service>/hw/<id>, raised with a
// versioned set). Stores round marks up to the millisecond and never lower
// them. The generator:
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
// Release stops the generator for good first (idgen.Snowflake.Retire: Next
// returns an error matching idgen.ErrLeaseLost and ErrReleased, and no ID is
// issued above its final mark), then stores that final mark, then closes
// Lost and frees the ID: the ID's next holder starts above every ID this one
// issued. After a loss, the generator is stopped at once (Lost), and its
// final mark is stored in the background, retried for up to 10 s; a store
// only raises a mark, so this is safe even once the ID is someone else's.
// That final mark helps a successor that loads the mark after it was stored
// (Redis frees a lost key at most 10 % of the TTL after the holder stops, or
// at once if the key was deleted; ZooKeeper when the session expires); when
// the store is unreachable, only the last checkpoint and the clock protect
// the IDs issued since.
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
package workerid
