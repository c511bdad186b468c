// Package redlock is a lock over N independent Redis masters (the Redlock
// algorithm) implementing lock.Locker, so lock.Do works with it unchanged.
// It is for users who will not trust one Redis master: a failover can hand
// the lock of package lock to two clients, while a Redlock holds as long
// as a majority of its masters keep their data and their clocks.
//
// Give New one client per independent master (an odd number, usually 3 or 5)
// and use it as any lock.Locker:
//
//	locker, err := redlock.New(masters, redlock.WithNodeTimeout(100*time.Millisecond))
//	if err != nil {
//		return err
//	}
//	defer locker.Close()
//	err = lock.Do(ctx, locker, "pay:9", func(ctx context.Context) error {
//		return withdraw(ctx, "user-9", 10) // ctx is cancelled if the quorum is lost
//	})
//
// redlock.Masters(c1, c2, c3) turns typed go-redis clients into the slice. The
// options that matter: WithNodeTimeout (each master's time to answer an
// acquisition, DefaultNodeTimeout 20 ms; 100–250 ms on a loaded host),
// WithDefaultTTL (DefaultTTL, 10 s) or lock.WithTTL per call, WithEvenMasters
// (to accept an even number of masters), WithHolderMeta, WithMetrics and
// WithLogger. Every master must run Redis 6.2 or later (lock.MinRedisVersion):
// the first Obtain that fails asks each master (INFO, once) and returns
// lock.ErrServerVersion if one is older.
//
// # Guarantees
//
// Mutual exclusion holds while a majority of the masters keep the lock's keys,
// and while the holder's process, the network and the masters' clocks agree on
// elapsed time within the drift: the lease is trusted for TTL − elapsed − drift
// from the start of the acquisition (and of each renewal), and Lost() closes
// when that runs out without a renewal. A process paused for longer than that
// (GC, swap, SIGSTOP) may still act after its lock expired: only the fencing
// token, checked by the protected resource, stops it. When it resumes, it
// learns of the loss from Lost, or from Release: a release begun after the
// deadline that no quorum confirms reports the hold lost (lock.ErrNotHeld, Lost
// closes), and an inner level's release begun after it does too. Key expiry
// follows each master's wall clock: a clock jump on a master shortens or
// stretches its TTLs.
//
// A master restarted without its data (no persistence, or
// appendfsync everysec losing the last second) forgets the locks it
// granted. With N = 3, one such restart leaves a holder on 2 of 3 masters
// and another client still cannot reach a quorum (if the holder had all 3:
// a master its acquisition or its last renewal did not reach in time —
// down, partitioned, answering past the bounds — counts as the first
// fault); a second master losing its data lets a second client obtain
// the lock while the first still
// believes it holds it (its next renewal finds the lock gone on 2 of 3
// masters and Lost() closes; its token is smaller than the new holder's).
// The tests show exactly this. A lock hash deleted on a master (an
// eviction, a manual DEL) is lost the same way: deleted on a majority, it
// lets another client obtain the lock, and the holder's Lost closes at its
// next renewal (TTL/3), which finds it gone. Re-entry through the same
// Client is counted in process and asks no master, so it does not find
// the loss out sooner, and it never revives the lost hold: the nested
// lease carries the hold's token and shares its Lost. Redis's Redlock
// description gives the remedies: persist with appendfsync always, or
// keep a crashed master down for at least the largest TTL in use before
// it rejoins (delayed restart), so that every lock it knew has expired
// anyway.
//
// A failed attempt's release on the masters that said they hold it waits
// for their answers (up to 20 × the node timeout per master) before the
// next attempt; on the silent ones and those that answered with an error
// it runs in the background, within the same bound. A master stalled for
// longer than that (SIGSTOP, swap) may still run the stale acquisition
// after its release; releases name their level, so that stale level never costs
// another hold's level, but it stays on that master until its TTL runs out
// (the owner's later holds there renew the hash and so keep it, until
// they end).
//
// Liveness: a lock whose holder vanished is free at most TTL later on every
// master; fewer than a quorum of live masters means no lock at all (Obtain
// waits, backing off, until its ctx ends), and locks work again as soon as
// a quorum is back. Waiters are woken in queue order per master but, as in
// package lock without fair mode, a releaser may take the lock again first;
// split votes between contenders are resolved by the random jitter. An
// acquisition given up at the node timeout may still reach its master after
// the release that undoes it (Redis reads the two on different
// connections); that master then keeps the failed attempt's hold until its
// TTL. A node timeout well above the clients' scheduling delays keeps this
// rare.
//
// # Algorithm
//
// Every master runs the reentrant hash lock of package lock, one server at
// a time, through the engine the two packages share: the same Lua scripts
// (acquire, release, handoff, renew, leave), the same key schema and the
// same targeted wake-ups, so reentrancy and owners work as in package lock
// (the owner comes from the ctx, lock.WithOwner).
//
// Acquire: the client notes the time, runs acquire.lua on all N masters in
// parallel, each bounded by the node timeout (WithNodeTimeout, 20 ms by
// default), and waits for every answer or the node timeout, whichever
// comes first. It holds the lock when
// a quorum (N/2+1) of masters granted it and the validity TTL − elapsed −
// drift is positive, with drift = TTL·0.01 + 2 ms (Drift). Otherwise it
// releases on every master that may hold the new level — those that said
// so, those whose answer was lost and those that had not answered
// (release.lua does nothing where the owner holds nothing); only masters
// that answered "held by another owner" are skipped, as the script took
// nothing there — before it retries or returns lock.ErrNotObtained; the
// masters that had not answered or answered with an error are released in
// the background, so that a silent or dead master does not delay the next
// attempt, or Obtain past its ctx, by more than the node timeout. An
// answer that comes after such a failure, from a master that took the
// level (or may have: an error), is released there again when it comes,
// since the first release may have arrived before the acquisition.
//
// Per-node timeouts are enforced by the rounds, not by the masters'
// clients: a round stops waiting for a master when the node timeout
// passes, whatever the client does with ctx deadlines, so a black-holed
// master costs an attempt the node timeout and no more, and the other
// masters' answers are not delayed by it. The masters are plain go-redis
// clients (redis.NewClient with an address; Masters for a slice of
// *redis.Client). ContextTimeoutEnabled in their options is recommended:
// go-redis then abandons the silent master's socket read at the deadline
// too, which frees its connection at once; without it the call runs until
// the client's ReadTimeout (3 s by default), in the background (Close
// waits for it). Hand-offs work the same way (a late answer of a failed
// hand-off is undone on its master); releases, renewals and the raising of
// fencing counters stop waiting at their bounds (20 × the node timeout,
// at least 100 ms), and their late answers change nothing.
//
// The default node timeout (20 ms) is chosen for acquisition, which is
// time-critical for safety: every millisecond an attempt waits comes off
// its validity. A release is not: where it is not confirmed in time, the
// hold expires after its TTL, and nobody else can hold the lock meanwhile.
// So on a host whose processes may be starved for hundreds of
// milliseconds (a loaded CI runner, a 2-core machine running tests beside
// its masters), a release over healthy masters can answer ErrNoQuorum
// ("not confirmed by a quorum") at the default, as the project's own tests
// saw under load; the lock is still safe, and freed by the TTL. Such
// hosts want WithNodeTimeout(100–250 ms), as the tests and the tickets
// example (-node-timeout) use: it lengthens each failed attempt against a
// dead master by that much, and bounds a release at 2–5 s.
//
// go-redis also sends a command again after a network error on the read
// (MaxRetries, 3 by default), when the server may already have run it.
// Every round's acquisition, hand-off and release carries an id, and a
// master that runs one twice answers as the first time (see Levels below):
// no second level, no "not held" for a hand-off that happened. A round
// whose answer from a master is lost for good releases its own level there
// (it drops nothing if the round never ran there).
//
// Waiting (Obtain): a waiter is queued, by acquire.lua, on each master
// where another owner holds the lock. The release that frees the lock on a
// master publishes the id of the first live waiter there on that waiter's
// client's channel; each Client subscribes once per master (one Pub/Sub
// connection per master, opened by its first wait, never one per waiter),
// so the right waiter wakes and tries again at once. (A master is meant to
// be one server, a *redis.Client. Given a Cluster as a master, the
// subscription is on the node go-redis picks for the channel's name, and a
// wake-up published on another node crosses the cluster bus, up to 40 ms
// late; given a Ring, wake-ups from the shards other than the channel's are
// not heard, and waiters call in on their timers. Package lock's clients
// subscribe on each key's server instead.) A waiter that gets
// the lock leaves the queues of the masters it did not get. Each wait is
// bounded by the holder's remaining TTL and a third of the waiter timeout
// (a queued waiter calls in to keep its place), and always by ctx. An
// attempt that took some masters but not a quorum (contenders split the
// vote) pauses a random jitter (WithRetryJitter) before the next; failing
// masters make it back off (doubling, at most 250 ms). lock.WithRetry
// replaces all this by polling.
//
// Local line: the goroutines of one Client that Obtain the same key line
// up in process, first come first served, and only the one at the front
// attempts (and queues on the masters); it keeps its place until its hold
// ends or is lost. The outermost release of a hold with someone in line
// hands the lock over: handoff.lua on every master releases the holder and
// makes the next one's owner the holder in the same script (no moment
// where the lock is free there, a fresh fencing token). That round is the
// next one's acquisition: with a quorum handed over and validity left
// (its TTL − elapsed − drift from the round's start) it holds the lock
// without a round trip of its own; otherwise what the round may have given
// it is released (the masters that handed over and those whose answer was
// lost) and it attempts as usual. A master where another client's waiter
// is queued does not hand over: it releases the lock and wakes that waiter,
// as a plain release does, so a process hot on a key does not shut other
// clients out by hand-offs (it still competes with them for the next
// round). A key contended within one process so costs one script per
// master per critical section, with no split votes between the process's
// own goroutines. TryObtain and re-entry do not line up; the masters alone
// decide who holds the lock.
//
// Extension: the watchdog (package watchdog) renews every TTL/3 with
// renew.lua on all masters; a round succeeds with a quorum of renewals.
// The masters that had not answered by then are renewed all the same:
// their commands run on in the background, within the slow bound (20 ×
// the node timeout), so every master that holds the lease and runs its
// renewal within that bound keeps it at least until the Until the round
// set, not only the quorum that decided it.
// When so many masters answer "not held" that no quorum is possible the
// lease is lost at once; when rounds keep failing, it is lost TTL − drift
// after the start of the last successful round (the acquisition's for the
// first). Lost() closes and lock.Do cancels its function's ctx with
// lock.ErrLockLost. A master that lost the lock (restarted empty) is not
// acquired again by renewals; the lease lives on the others while they are
// a quorum.
//
// Release: the outermost level runs release.lua on every master (or
// handoff.lua, see the local line); inner levels (re-entry through the
// same Client) are counted locally and cost no round trip.
//
// Under load a Client pipelines acquisitions, releases and hand-offs per
// master: while one call or batch is in flight to a master (WithInFlight),
// further ones queue and leave together in one pipeline. The node timeout
// still bounds each caller's wait; a call whose wait ended before its
// batch left is not sent.
//
// # Fencing tokens
//
// Each master has its own counter (P{key}:fence). A round passes one
// reading of the client's clock (µs) to every master as the token floor: a
// master's fresh token is the larger of its counter + 1 and that floor
// (package lock), so the masters of a round answer the same token unless a
// counter is ahead of the client's clock. Lease.Token is the largest token
// of the quorum that granted the lock; before the lease is returned, the
// client makes sure a quorum of the masters it holds have a counter of at
// least that value (those whose token was the maximum count; the others
// are raised with raise_fence.lua, a round trip only when the tokens
// differed, which also records that value as the hold's token there, so
// that a re-entry of the same owner through another client answers it
// from any quorum). Any later holder's quorum shares at least one of those
// masters, where it acquires after this hold ended and gets a larger
// counter value: tokens of successive holders increase strictly, whatever
// the clocks. When masters lose their data (a restart from an older
// snapshot or without persistence, every master at once included), the
// floor still puts the next token above every earlier one as long as the
// clients' clocks do not go back and differ by less than the time from the
// last acquisition before the loss to the first one after it (an earlier
// client whose clock ran ahead by d set tokens that a later client may
// repeat within d). An attempt that cannot raise a quorum fails with
// ErrFence and is retried. Re-entry through the same Client returns the
// same token without a round trip; re-entry through another Client with
// the same owner gets the largest of the hold's tokens on its quorum, not
// necessarily the same.
//
// Levels: every round has an id, written on each master with the level it
// takes (package lock's "\x00l:<id>" field). A master that runs a round's
// acquisition or hand-off twice (go-redis resent it after a lost reply)
// answers as the first time and holds one level; releases and renewals
// name the hold's level, so a release never drops another hold's level and
// a hold that vanished and was taken again by its owner through another
// Client is not renewed in that one's name (its next renewal finds it
// gone). A round that took a fresh hold on a quorum while this Client
// believed the owner held the key (two goroutines of one owner, after the
// hold vanished) reports the old hold lost at once and replaces it.
//
// # Redis key schema
//
// On every master, with the prefix P (DefaultPrefix, "coordkit:redlock:"),
// the keys of package lock:
//
//	P{key}            hash    owner -> hold count; PEXPIRE TTL; "\x00t" the master's token of the
//	                          hold, "\x00l:<id>" the level of round <id> (package lock)
//	P{key}:fence      string  fencing counter; raised by raise_fence.lua
//	P{key}:q          list    queued waiter ids "<client id>:<n>"
//	P{key}:qt         zset    waiter id -> deadline (server time, ms)
//	P{key}:r:<req>    string  answer of one release or hand-off, kept for the release window
//	P wake:<client>   channel one per Client; a message is the id of the waiter to wake
//
// # When not to use it
//
// If one Redis (with replicas) is trusted, package lock is simpler and
// faster. If a double holder is unacceptable and the resource cannot check
// fencing tokens, use a consensus system (package zklock): Redlock's safety
// rests on timing assumptions (bounded pauses, bounded clock drift) that a
// consensus system does not need. Do not give it replicas of one master as
// "masters" — they are not independent.
package redlock
