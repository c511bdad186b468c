// Package semaphore is a counting semaphore on Redis (Client) and on
// ZooKeeper (ZK, Curator's InterProcessSemaphoreV2 on zklock: see its
// documentation): at most N holders
// of a name at once, each permit a lease (TTL, watchdog, Lost, a fencing
// token per acquisition), so that a crashed holder's permit comes back by
// itself. It is Redisson's RPermitExpirableSemaphore on coordkit's lock
// contract: Client implements lock.Locker, so lock.Do runs a function
// under a permit ("at most 10 calls to a rate-limited partner at once").
//
// At most 10 calls to a partner at once, on Redis:
//
//	sem := semaphore.New(rdb, semaphore.WithPermits(10))
//	defer sem.Close()
//	err := lock.Do(ctx, sem, "partner-api", func(ctx context.Context) error {
//		return withdraw(ctx, "partner", 1) // holds one permit; ctx ends if it is lost
//	})
//
// Acquire and TryAcquire return a *Permit for code that wants the permit itself;
// SetPermits changes N for every client at run time. The options that matter:
// WithPermits (N for a semaphore never set with SetPermits, default 1),
// WithDefaultTTL (DefaultTTL) or lock.WithTTL per call, WithPrefix,
// WithMetrics and WithLogger; NewZK with WithZKPermits for ZooKeeper. Redis 6.2
// or later (lock.MinRedisVersion) is required: the first acquisition asks the
// server (INFO, once per client) and returns lock.ErrServerVersion from an
// older one.
//
// # Guarantees
//
// At most N permits are held at any moment by Redis's clock, granted ones
// included, N being the value at the moment of each acquisition or grant (a smaller N takes effect as
// permits come back; a larger one at once). A holder learns of a permit
// it no longer has no later than TTL after the send of its last successful
// renewal, before Redis can give the permit to another (the expiry is
// counted from Redis's clock at the script, after the send). A release
// that begins after that deadline (on the client's clock: the process was
// stopped or starved past it) and gets no answer from Redis reports the
// permit lost (Lost closes, the error matches lock.ErrNotHeld), since it
// may be another holder's by then; before the deadline an unanswered
// release is a plain error, and the permit expires after its TTL. An
// acquisition whose answer arrives after its TTL has run since it was sent
// (held up in the network, the process stopped) is never returned: Redis
// may have expired that permit and given it to another; Acquire gives it
// back and tries again (TryAcquire answers ErrNoPermit). As for every
// Redis lock: a single Redis that loses data (a restart without
// persistence, a failover to a lagging replica) can let more than N in;
// fencing tokens still increase.
//
// On ZooKeeper (ZK), at most N permits are handed out, N being the value
// each acquisition read under the acquirers' mutex: the count and the
// create are made under the mutex, and an acquisition that cannot show it
// held the mutex throughout (its session expired in between, so another
// acquirer may have taken the last permit) deletes the permit it created
// and fails with an error matching lock.ErrLockLost. Until that deletion
// the node is counted by other acquisitions, which then wait rather than
// take one too many.
//
// # Redis key schema
//
// For a semaphore named name, with the client's prefix P (DefaultPrefix,
// "coordkit:sem:"), every key shares the hash tag {name}, so each script
// touches one Redis Cluster slot:
//
//	P{name}           zset    permit id -> expiry (Redis server time, ms)
//	P{name}:fence     string  fencing counter; never deleted
//	P{name}:limit     string  N, when SetPermits set it (else each client's WithPermits)
//	P{name}:q         list    queued waiters in arrival order: "<client id>:<n>|<grant ms>"
//	P{name}:qt        zset    waiter (its queue entry) -> deadline (server ms)
//	P{name}:tok       hash    permit id -> its fencing token
//	P{name}:r:<id>    string  a release's marker, kept for 10 s
//	P wake:<client>   channel one per Client; a message names one of its waiters,
//	                          "<client id>:<n>|<token>" when it grants it a permit
//
// # Algorithm
//
// Acquire, release, renew, leave and SetPermits are one Lua script and one
// round trip each (internal/redisfn/lua/semaphore): functions of the
// coordkit_v<N> Redis Functions library on Redis 7 and later (FCALL),
// else EVALSHA of the same code, as package lock's Client runs its own
// (see its Algorithm). Acquire drops the permits whose expiry has passed
// and the waiters whose deadline has, then takes a permit if fewer than N
// are held and the caller is among the first F waiters (F free permits;
// a caller not queued only when fewer than F wait): waiters are served in
// arrival order. The permit is a member of the sorted set scored with
// server time + TTL, and its fencing token is the larger of the counter + 1
// and the server's clock in microseconds (so a counter restored from older
// data cannot repeat a token, as in package lock). Otherwise the caller
// queues (Acquire) and waits on its client's channel, subscribed on the
// server that holds the semaphore (as in package lock: the master of its
// slot on a Cluster, its shard on a Ring).
//
// A release hands its permit over in the same script, as package lock's
// release grants the lock: if a live waiter is queued, the first one
// becomes a holder at once (its permit id in the sorted set with a fresh
// token, out of the queue) and one message to its client carries the
// token; the waiter holds the permit from the message on, without another
// round trip, and its watchdog renews it. A grant is held for the waiter's
// grant TTL (min(TTL, waiter timeout), written in its queue entry): a
// waiter that vanished keeps the permit no longer than that, then it comes
// back like any expired permit. If the message is lost or late, the
// waiter's next attempt (it calls again when the first permit may expire,
// and at least every half of its grant TTL and every third of its waiter
// timeout, keeping its place) finds the permit held for it and takes it;
// only a waiter that cannot run for half its grant TTL or more, over its
// call-in and the grant's end, loses its turn (and one whose answer comes
// after its TTL gives the permit back and queues again). A waiter that gives up (leave) gives a
// permit granted to it back; leave and a larger N hand free permits to the
// first waiters the same way. A watchdog renews each permit every TTL/3; a
// renewal that finds the permit gone, or renewals that fail past the TTL,
// lose it: Lost closes, lock.Do's ctx is cancelled.
//
// A release judges the permit by its expiry on Redis's clock, not by its
// presence in the sorted set: a permit whose expiry has passed is not
// held, whether a script has swept it yet or not, and its release answers
// lock.ErrNotHeld.
//
// A command whose reply was lost and that go-redis sent again runs twice:
// an acquisition that finds the permit it took (or was granted) answers
// that permit and its token again, and a release that finds its marker
// answers that it released, as its first run did, and grants nothing
// again; a renewal, a leave and SetPermits find their own effect done and
// do it again harmlessly. No script shortens a live permit's expiry:
// each sets only the expiry of the permit it creates, takes or renews, to
// now + its TTL (a grant's: now + the grant TTL, which the taker's
// acquisition and renewals only lengthen, the grant TTL being at most the
// TTL).
//
// # When not to use it
//
// Permits are not reentrant: an owner that holds one and acquires again
// takes a second (a nested lock.Do with N = 1 waits for ever). For mutual
// exclusion use package lock, which re-enters and hands over.
package semaphore
