// Package lock is coordkit's lock contract — Locker, Lease, Do, WithOwner,
// the options and errors shared by the Redis lock here, redlock and zklock —
// and its flagship implementation: a reentrant Redis hash lock with fencing
// tokens, a watchdog, notified (not polled) waiting and an optional fair
// mode. It also holds the simple SET NX PX lock (Simple) and an optimistic
// WATCH/MULTI/EXEC helper (Optimistic, Update) for the read-modify-writes
// that need no lock at all.
//
// Take a lock for the length of a function with Do; the function's ctx is
// cancelled if the lease is lost:
//
//	locker := lock.New(rdb) // rdb: a go-redis v9 client (Client, ClusterClient, FailoverClient)
//	err := lock.Do(ctx, locker, "withdraw:user-42", func(ctx context.Context) error {
//		// context.Cause(ctx) matches lock.ErrLockLost (and why) if the lease is lost.
//		return withdraw(ctx, "user-42", 100)
//	}, lock.WithTTL(10*time.Second))
//
// or hold a Lease by hand, and pass its fencing token to the resource:
//
//	lease, err := locker.Obtain(ctx, "report:daily") // waits until held or ctx ends
//	if err != nil {
//		return err // errors.Is(err, lock.ErrNotObtained) when ctx ended first
//	}
//	defer lease.Release(ctx)
//	_ = lease.Token() // strictly larger for every new hold of the key
//
// The options that matter: WithTTL per call (default DefaultTTL, 30 s, or the
// Client's WithDefaultTTL; the lease is renewed every TTL/3 while held, so the
// TTL is how long a crashed holder blocks the key), WithFair (waiters of every
// client served in arrival order), WithPrefix (the Redis keys' prefix,
// "coordkit:lock:"), WithHolderMeta (who holds it, for coordctl lock inspect),
// WithMetrics and WithLogger. NewSimple is the plain SET NX PX lock, NewRW a
// read-write lock; Optimistic and Update need no lock. The same code runs on
// redlock.New, zklock.New and sqllock's constructors: they all implement Locker.
// Redis 6.2 or later (MinRedisVersion) is required: the first call asks the
// server (INFO, once per client) and returns ErrServerVersion from an older
// one.
//
// # Guarantees
//
// Mutual exclusion holds while the holder's process and the Redis server
// agree on elapsed time within the TTL and Redis does not lose the write.
// What each failure does, and what the user sees:
//
//   - Redis restarts without the lock, from an older snapshot, or loses the
//     tail of an everysec AOF; a failover promotes a replica that had not
//     received the lock; the lock's hash is deleted (an eviction, a manual
//     DEL, ForceRelease): another owner can take the lock while the old
//     holder still runs. The old holder's Lost closes at its next renewal
//     (TTL/3) at the latest, at once if its owner obtains the key again
//     through the same Client (a nested Do or Obtain: that is a new hold
//     with a new token, never a level of the lost one; see Hold identity).
//     Fencing tokens stay strictly increasing (see Fencing), so the
//     protected resource refuses the stale holder. WithWaitReplicas
//     narrows the failover window.
//   - The holder's process pauses (GC, SIGSTOP) past the TTL: the lock
//     expires and another owner takes it; the old holder's Lost closes when
//     the watchdog runs again (renewal answers "not held", or a whole TTL
//     passed since the last successful renewal). Its later writes carry the
//     older token. If it releases first and Redis does not answer, the
//     release reports the loss (ErrNotHeld, Lost closes): its deadline had
//     passed by its own clock.
//   - The answer to an acquisition is held up (a congested or half-open
//     link, the process stopped while it waited) until after the TTL has
//     run from the moment it was sent: Redis may have expired the hold and
//     given it to another owner by then. Obtain never returns such a lease
//     (Client and Simple alike): it releases it and tries again, or TryObtain
//     returns ErrNotObtained. A lease Obtain returns was held in Redis, by
//     the client's clock, at the moment it returned.
//   - A reply is lost and go-redis (or the caller) sends the command again:
//     no effect beyond the first run (see Resent commands).
//   - The connection to Redis is cut: renewals fail; Lost closes a TTL
//     after the start of the last successful renewal, before Redis expires
//     the key (the TTL is counted in whole milliseconds on both sides).
//   - The Redis host's clock jumps: key expiry follows it, so a forward jump
//     can expire the lock early (two holders until the next renewal), and a
//     backward jump after a data loss can repeat the tokens of the jump.
//
// Redlock (package redlock) or ZooKeeper (package zklock) remove the single
// point of failure.
//
// Liveness: a lock whose holder vanished is free at most TTL later; a waiter
// that vanished is skipped at most one waiter timeout later. Without fair
// mode a waiter can starve under constant barging; in fair mode it is served
// after the waiters queued before it.
//
// # Redis key schema
//
// For a lock named key, with the client's prefix P (DefaultPrefix,
// "coordkit:lock:"), every key shares the hash tag {key}, so that one Lua
// script touches one Redis Cluster slot and the same code runs on a single
// node, Sentinel and Cluster through redis.UniversalClient:
//
//	P{key}            hash    owner -> hold count; PEXPIRE TTL; reserved fields (owners never start with NUL):
//	                          "\x00t" the hold's fencing token, "\x00l:<call id>" one per hold level
//	                          ("1" fresh, "0" re-entry), "\x00grant" a granted waiter's entry,
//	                          "\x00p" the level id a hand-off released, "\x00w" a waiter may be queued,
//	                          "\x00m" the holder's metadata (WithHolderMeta)
//	P{key}:fence      string  fencing counter; no TTL, never deleted by a release
//	P{key}:q          list    queued waiters, in arrival order: "<client id>:<n>|<grant ms>|<owner>"
//	P{key}:qt         zset    waiter -> deadline (Redis server time, ms)
//	P{key}:qtm        hash    waiter -> its client's holder metadata (WithHolderMeta; such a client's id starts with "m"), while queued
//	P{key}:r:<id>     string  answer of the release of the level taken by call <id>, kept for the release window
//	P wake:<client>   channel one per Client (subscribed on each server that holds a key it waits for); a message names one of its waiters: "<client id>:<n>"
//	                          (wake up and try) or "<client id>:<n>|<token>" (the lock is granted to you)
//
// (The channel is "P" + "wake:" + the client id.) Simple uses a string at
// P simple:{key} (holding the holder's random value, PX TTL), its own
// fencing counter at P simple:{key}:fence, and the answer of the release of
// the hold with value v at P simple:{key}:r:<v> (for the release window). A key may not begin with '}'
// (Obtain refuses it with ErrInvalid): the hash tag would be empty and the
// keys fall in different Cluster slots.
//
// # Algorithm
//
// Acquire, release and renew are one Lua script and one round trip each;
// the scripts are in internal/redisfn/lua/lock, one file each (Simple's and
// RW's too), and package redlock runs the same ones on each of its
// masters. On Redis 7 and later they are the functions of one Redis
// Functions library, "coordkit_v<N>" (N its version, in every function's
// name: "ck<N>_acquire"), which a Client loads at its first call on every
// node that serves keys (every master of a Cluster) and calls with FCALL:
// its helpers are defined once, at load, not on every call. After a
// failover to a node without it, a FUNCTION FLUSH or a restart without
// data, the next call is answered "Function not found" (it ran nothing),
// and the Client loads the library again and sends the call once more.
// Where FUNCTION is missing (Redis < 7) or refused (an ACL, a managed
// service), where a library of that name holds other code (another build
// of the same version), or with the environment variable
// COORDKIT_REDIS_FUNCTIONS=off, the Client runs the same code by EVALSHA
// (EVAL once after NOSCRIPT): each script is its helpers followed by its
// body. It chooses once, at its first call (a load that fails on the
// network, or with an error that may pass, leaves it calling by EVALSHA
// and trying again at most once a second); Info.Scripts (Inspect) says
// which. Both ways hold the same keys and give the same answers. When
// Redis is over its maxmemory (noeviction), a holder still renews and
// releases (the library's renew, release, hand-off, leave and
// force-release may run then), and a new acquisition is refused with
// Redis's OOM error, having written nothing (TestOutOfMemory).
// A Client pipelines its acquisitions and releases under load: while four
// are in flight, further ones queue and leave together in one pipeline (one
// write and one read for the batch). An idle client sends each call at
// once.
//
// Acquire (acquire.lua): if the hash holds the caller's owner, increment its
// count, record the level and re-arm the TTL (re-entry: the token is the
// hold's, recorded in the hash at the fresh acquisition). If the hash is
// absent, take the next fencing token (see Fencing) and create the hash
// with count 1, the token and the level, PEXPIRE TTL. Otherwise queue the
// caller's waiter entry (or refresh its deadline to server time + the
// waiter timeout) and return the holder's PTTL and the fencing counter's
// value.
//
// Release (release.lua): not the owner's level → not held. Decrement; at zero
// delete the hash and, if the hash's "\x00w" field says a waiter may be
// queued, grant the lock to the first live queued waiter. (A waiter that
// queues while the hash exists sets the field, and so does whoever creates
// a hold while entries are left in the queue; an uncontended release reads
// no queue. A waiter queued while no hash existed, after its holder's key
// expired, and not seen when the next hold was created, calls in on its
// own timer, as after a lost message; clients of older versions, which do
// not set the field, wait the same way.) The grant: in
// the same script its owner becomes the holder (count 1, the next fencing
// token, a TTL of min(its TTL, its waiter timeout)), the entry is recorded
// under the hash field "\x00grant", and one message on that waiter's
// client's channel carries the token — one message to one process, never a
// herd, and no moment where the lock is free for someone else to take. The
// waiter returns from Obtain on that message, with no round trip of its own,
// if the token is larger than the counter its last attempt saw (so a late
// message from an older grant is never mistaken for a new one) and the grant
// TTL has not run out since that attempt was sent; its watchdog renews the
// short grant TTL to the lease's TTL within a third of it. If the message
// is lost, the waiter's next attempt finds its entry under the grant field
// and takes the lock (one level, no second count): a queued waiter calls in
// at least every half of its grant TTL (and every third of its waiter
// timeout), so a grant made to it is still there when it does, and it
// keeps its turn (only a waiter that cannot run for half its grant TTL
// or more, a process paused that long, may lose it, when that pause
// covers its call-in and the grant's end; it queues again); a waiter that gives up
// gives the grant back (leave.lua), and one that vanished holds it until
// the grant TTL ends, at most one waiter timeout. Steady contention across
// clients therefore costs two commands per critical section: the release
// and the releaser's next attempt, which queues. (Redlock's waiters are
// plain "<client id>:<n>" entries: a release only wakes them, and they
// acquire in their next round trip.)
//
// Waiting: a Client's waiters share its one channel, never one per waiter or
// per key, subscribed where the releases publish: on the server that holds
// the key (on a Redis Cluster the master of the key's slot, on a Ring the
// key's shard), one Pub/Sub connection per server, opened by the first
// wait for a key there and kept until Close, or until it is dropped (a
// SUBSCRIBE that cannot be written or is not confirmed within 10 s, a node
// that left the Cluster): a waiter whose connection was dropped, or whose
// key moved to another server, listens again before its next wait, within
// that wait's bound. It is subscribed, and the
// subscription confirmed, before any of its waiters for a key there is
// queued, and each waiter is registered locally before its first attempt,
// so no wake-up is missed while that connection lasts (go-redis subscribes
// again on a new connection after one is cut, and a message published
// before it has is lost). Each
// wait is bounded by the holder's PTTL (the lock may expire without a
// release) and by a third of the waiter timeout (a queued waiter calls in to
// keep its place); ctx ends the wait (the waiter then leaves the queue:
// leave.lua, which passes the lock on if it is free). A message lost with
// the Pub/Sub connection costs at most one of those bounds. Why on the
// key's server: a Ring's shards forward no message, and a Cluster forwards
// a PUBLISH to its other masters over the cluster bus, whose outgoing
// connections lack TCP_NODELAY (redis/redis#11869, valkey-io/valkey#1758):
// measured on Redis 7.0 on loopback, a message that crosses the bus arrives
// p99 39 ms late (393 µs when it does not), which stalled a hot key's
// hand-offs on a Cluster until its waiters listened on the key's master
// (bench/README.md, lockproc Runs 10 and 11). A Client that waits for keys
// on several masters is subscribed on each, and the bus brings it a late
// copy of each message from the others: a copy for a waiter that is gone
// is dropped, and a late grant is told apart by its token (above). A key
// whose slot moves after its waiter listened is still heard, over the bus,
// until the waiter, before its next wait, subscribes on the new master.
//
// Fair mode (WithFair): a free lock is only taken by the first live waiter
// in the queue (or by anyone when the queue is empty), so waiters are served
// in arrival order across all clients and a releaser cannot barge — its next
// attempt queues behind the others. Without fair mode a free lock (one that
// expired, or was released with nobody queued) goes to whoever asks first;
// a release still grants the lock to the first waiter in the queue, and the
// goroutines of one Client wait in its local line (below).
//
// Local line (without fair mode): the goroutines of one Client that Obtain
// the same key line up in process, first come first served, and only the
// one at the front talks to Redis; it keeps its place until its hold ends
// or is lost. The outermost release of a front whose line is not empty is
// handoff.lua: in one round trip it gives the lock to the next in line's
// owner (a fresh acquisition: new fencing token, that owner's TTL), and
// that goroutine returns from Obtain with no round trip of its own. A key
// contended within one process thus costs one script per critical section,
// with no failed attempt, no Redis queue entry and no Pub/Sub message. If
// another client's live waiter is queued for the key, handoff.lua grants
// the lock to it instead, so other clients are not starved; Redis alone
// decides who holds the lock. If a hand-off's answer is lost, the next in
// line's first attempt finds the level the hand-off wrote under its call id
// and takes the lock. A
// release that fails with a Redis error stops the hold's renewal (the lock
// then expires after its TTL unless a retried Release frees it). TryObtain
// and re-entry by a holding owner do not line up.
//
// Vanished waiters: each queued waiter has a deadline in Redis server time
// (redis.call('TIME') inside the scripts, allowed by effects replication
// since Redis 5 and the only mode since Redis 7), refreshed by every attempt
// it makes; scripts drop expired waiters when they reach the head of the
// queue. A crashed waiter is therefore skipped at most one waiter timeout
// after it last called in, without any client clock.
//
// Fencing: the counter is separate from the hash, so it survives releases
// and expiry. Every fresh acquisition (and every grant and hand-off) takes
// the larger of the counter + 1 and the server's time in microseconds
// (redis.call('TIME')), and stores it back. The clock bound is what keeps
// tokens strictly increasing when the counter comes back with an old value
// or not at all: a restart from an older RDB, the lost tail of an
// appendfsync everysec AOF, a failover to a replica that lagged, a restart
// without persistence. Every token handed out before the loss was at most
// the server's clock at that moment, so the next one is larger, as long as
// the Redis host's clock does not go back and fewer than one acquisition
// per microsecond was ever made on the key (a script takes longer than
// that). The clock is that of the server that runs the script: after a
// failover, the promoted replica's, so a replica whose clock is behind the
// old master's by more than the failover took can repeat the old master's
// last tokens; so can a clock stepped back on the Redis host by d, for the
// tokens of the last d before a loss. Without a loss the counter alone
// keeps them increasing. A restore that brings back a hold of a fixed
// owner name (WithOwner) that was released since lets that owner re-enter
// it with its old, smaller token: the protected resource then refuses the
// holder's writes (safe, but failing until the hold ends).
//
// Hold identity: the hash records the fencing token of the hold
// ("\x00t"), set when the hold is created (fresh acquisition, grant or
// hand-off). Re-entry answers that token, so every level of a hold carries
// the hold's token; renew.lua renews only the hold with the lease's token.
// The Client joins a new level to a live local hold only when Redis
// answered that hold's token. A fresh acquisition by an owner whose local
// hold is still live means Redis lost that hold (a failover, an eviction,
// a restart, ForceRelease, expiry while the holder was paused): the old
// hold is reported lost at once (Lost closes, Do's ctx is cancelled with
// ErrLockLost, cause ErrNotHeld), and the new lease is a new hold with a
// new token, never a level of the old one. The same owner taking the lock
// again through another Client makes the old hold's next renewal fail.
//
// Resent commands: go-redis sends a command again after a network error on
// the read (MaxRetries, 3 by default), when Redis may have run it already,
// and a caller may retry a Release. Every call's id is written with the
// level it takes ("\x00l:<id>"): acquire.lua sent again finds its level and
// answers as the first time, taking no second level (also when the first
// run found the lock held and queued the waiter, and the second took the
// freed lock: the call leaves the queue when it holds). release.lua drops
// only its own level and keeps its answer for a resend, read only when the
// level is gone: every release stores its answer under P{key}:r:<id>, a key
// that names the released level, for the release window
// (WithReleaseWindow). A release sent again thus answers as the first did:
// never a second level dropped, and never ErrNotHeld for a lock it freed.
// The answer is never inferred from other state that can coincide: the
// fencing counter at the hold's token + 1 is also the next holder's token
// when the counter runs ahead of the clock, so a release of a hold that
// was lost (deleted, evicted, ForceRelease) answers ErrNotHeld even when
// the next holder's token is exactly token + 1. (Simple's release keeps its
// answer the same way, under P simple:{key}:r:<value>.)
// handoff.lua sent
// again finds the next owner's level (or its marker) and answers the same;
// after a hand-off whose answer was lost for good, the next in line's own
// attempt finds its level and holds. renew.lua and leave.lua are
// idempotent. An attempt whose answer was lost leaves the queue, so no
// later release grants the lock to a call that already failed.
//
// The watchdog (package watchdog) renews a hold every TTL/3 with renew.lua.
// One watchdog serves all levels one owner holds on a key through one
// Client. A level never shortens the hold: the key's expiry covers the
// longest-lived live level. A re-entry with a longer TTL (WithTTL) than the
// hold's raises the key's expiry and the hold's TTL (the TTL every later
// renewal sets, and from which Until and the loss are judged); a re-entry,
// a renewal or an inner release with a shorter TTL never lowers the key's
// expiry (acquire.lua and renew.lua set PEXPIRE only where it is later than
// the key's; release.lua leaves it). A re-entry without WithTTL joins the
// hold as it is (the client's default TTL does not apply to it). The
// hold's TTL stays the longest any of its levels chose until the hold
// ends: a crashed holder's lock is free after that TTL. The RW lock keeps
// the same rule per side (the writer's expiry and each reader's score only
// move later), and redlock per hold. Lost() closes when a renewal finds the lock gone, when renewals
// fail for a whole TTL (measured from the start of the last successful one),
// TTL after MaxHold, or when the Client is closed.
//
// Who holds a lock: Inspect (and coordctl lock inspect) shows the owner and,
// for a Client made with WithHolderMeta (ProcessMeta gives "service=… host=…
// pid=…"), the holder's metadata, stored by the acquisition's own HSET —
// no extra command, as a test counts in INFO commandstats. A queued
// waiter's metadata waits under its entry in P{key}:qtm, and the release
// that grants it the lock moves it into the new hold (a release by a
// client of an older version leaves the grant without it).
//
// # When not to use it
//
// For counters and other single-key read-modify-writes, Update or Optimistic
// (WATCH/MULTI/EXEC) or a Lua script need no lock. When the protected
// resource cannot check fencing tokens and a double holder would be
// unacceptable, use a consensus system (zklock) instead of Redis.
package lock
