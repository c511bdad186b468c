// Package etcdlock is a lock on etcd: a fair (FIFO) mutual exclusion lock
// whose holds live as long as the Client's etcd lease, with the hold key's
// create revision as the fencing token, and a read-write lock on the same
// recipe. *Client implements lock.Locker, and so do Client.Read and
// Client.Write (lock.RWLocker), so lock.Do works with each of them.
//
// Give New an etcd client (go.etcd.io/etcd/client/v3):
//
//	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"etcd1:2379"}})
//	if err != nil {
//		return err
//	}
//	defer cli.Close()
//	locker, err := etcdlock.New(cli, etcdlock.WithTTL(10*time.Second))
//	if err != nil {
//		return err
//	}
//	defer locker.Close()
//	err = lock.Do(ctx, locker, "batch-7", func(ctx context.Context) error {
//		return withdraw(ctx, "batch-7", 1) // ctx is cancelled when the lease is lost
//	})
//
// The options: WithTTL (the lease's TTL T, default DefaultTTL, 10 s),
// WithPrefix (the keys' prefix, DefaultPrefix), WithLogger, and WithMetrics
// (lock.Metrics, as on every coordkit lock: waits, holds, keep-alives per
// hold, losses with their cause, releases) with WithMetricsKey. This package
// is the module github.com/coordkit/coordkit/etcd, of its own, so that
// etcd's client (gRPC, protobuf) stays out of the module graph of users of
// the other backends. It runs on etcd 3.4 and later: it uses transactions,
// range requests bounded by create revision, watches from a revision and
// leases (Grant, KeepAlive, Revoke, TimeToLive), all in etcd's v3 API since
// 3.0 and 3.1.
//
// # Guarantees
//
// The lock is held while the holder's hold key exists and is the first
// under the key's prefix: until Release, until the Client's lease ends
// (expired, revoked, or Close), or until an operator deletes it
// (ForceRelease). Waiters are served in the order of their keys' create
// revisions (FIFO across Clients). Every new acquisition of a key has a
// larger fencing token: the hold key's create revision, which etcd's
// revision counter gives in the order of the cluster's writes, across
// leader changes; re-entry returns the same token.
//
// A hold is never granted on a lease the server no longer has (the lock of
// etcd's own v3lock API did, Jepsen, etcd 3.4.3, etcd#11456): the hold key
// is created by a transaction whose put carries the lease, and etcd refuses
// the whole transaction when the lease is gone ("lease not found"); the
// Client then takes the lease as lost, reports its holds lost, and starts
// again on a new lease.
//
// A holder is told of the loss (Lost closes; lock.Do's ctx is cancelled
// with a cause matching lock.ErrLockLost and ErrLeaseLost) before the
// server can expire the lease and give the lock to another Client: the
// Client sends a keep-alive every T/6 and takes the lease as alive until
// the send time of the last keep-alive the server answered plus 2T/3; the
// server (its leader, which a follower forwards keep-alives to) renews the
// lease on receipt, no earlier than that send, for T. The loss comes T/3
// before the earliest expiry. A follower cut off from its leader cannot
// renew (it forwards to the leader), so its answers count for nothing it
// did not do. A leader cut off from its followers still answers
// keep-alives until it steps down, an election timeout after it last heard
// a quorum; the others elect a leader no earlier than an election timeout
// after they last heard it, and a new leader renews every lease for a
// full T when it takes over, so those answers too end before any expiry
// (chaos's etcd-member-partition isolates the leader half the time). Nothing else the Client receives counts: not watch events,
// not gRPC's pings. When the server refuses a keep-alive (the lease was
// revoked, or expired) the holds are lost at once.
//
// So two holders overlap only under these faults: the holder's clock and
// the leader's run at rates so different that they eat the margin (T/3);
// the holder process is paused (GC, SIGSTOP) past the loss, so that it
// acts after Lost closed; an operator deletes the hold key (ForceRelease),
// which the holder learns of only at Release (lock.ErrNotHeld).
//
// Lost is a promise about when the holder is told, not about when it stops:
// the holder's work must watch ctx (lock.Do) and pass the token to the
// resource, which must refuse tokens older than one it has seen.
//
// # Algorithm
//
// One etcd lease per Client, granted on first use with WithTTL's TTL (the
// server may grant a longer one: its shortest is 1.5 election timeouts,
// rounded up to seconds; the Client runs on what it granted), and kept
// alive by the Client itself: a keep-alive (LeaseKeepAlive, once) every
// T/6, whose send time it knows; etcd client's KeepAlive channel does not
// say when the answered request was sent, and a late answer must not
// stretch the window. When the lease is lost every hold on it is lost; the
// Client revokes it (the server may still keep it when the Client only lost
// touch) and grants a new one for the next Obtain.
//
// Obtain, with the lease L (hex) and the owner o in ctx (lock.WithOwner;
// empty without one):
//
//  1. One transaction: if the hold key "<prefix>/<key>/<L>-<n>" (see Names
//     below) has no create revision, put it with value o and lease
//     L, and read the keys made last under "<prefix>/<key>/" (by create
//     revision, at most three). The
//     transaction's revision is the new key's create revision r, the token.
//     If no key was made before the new one, the lock is held: an
//     uncontended Obtain + Release is two round trips (the lease's grant
//     aside). A key found at the name (a creation sent again after no
//     answer, whose first copy made it) is deleted and the key made anew.
//  2. Otherwise it watches its predecessor only (the key made last before
//     its own), from just after the read's revision, for its deletion: a release wakes
//     exactly one waiter (no herd). When the predecessor was the only key
//     made before its own, its deletion makes the hold key the first (etcd's
//     revisions only grow: no key made later comes before it), and one read
//     of the hold key from the nearest member (serializable, no quorum) at a
//     revision no older than the deletion confirms that it is still there:
//     the lock is held. A hand-off is then the release's deletion, the
//     watch event and that read.
//  3. Otherwise (more keys before it, a watch that failed, a member behind
//     the deletion) one transaction reads, with a quorum, the keys under the
//     prefix made last before r, and the hold key itself. If the hold key is
//     gone (its lease with it, or deleted by hand), Obtain starts again (on a
//     new lease if the lease is lost). With no predecessor, the lock is held;
//     else it goes back to 2.
//
// Re-entry is by owner, within one Client: the Client counts the levels of
// each (owner, key) hold in process, and only the outermost Release
// deletes the hold key (one request, with no condition: see Names). A
// Client's owners take turns for a
// key in process (a channel per key, the key's slot) before one of them
// queues in etcd, so a Client has one attempt or hold per key at a time;
// TryObtain returns lock.ErrNotObtained when another owner of the same
// Client holds or waits for the key.
//
// The hold key's creation runs detached from ctx (bounded by 5 s), so that
// its outcome is known: when ctx ends meanwhile, or while waiting, the
// attempt deletes its key before Obtain returns. A creation that gets no
// answer is sent again by Obtain: the transaction is conditional on the
// key's absence, so a late first copy makes nothing beside the second, and
// a key found is deleted and made anew. "No key left behind" has two
// exceptions, where Obtain returns while the Client still deletes the key
// in the background (until it is gone, the lease ends, or the Client is
// closed): when the deletion of an attempt given up takes over a second;
// and when a creation gets no answer and TryObtain, or Obtain whose ctx
// ended, gives up (the mutex's slot is kept until the key is gone, so that
// this Client's next attempt on the key waits for that). A copy of a
// creation that got no answer may also reach the server after its attempt
// has ended (held on the wire), and make the key again with no one to
// delete it, since no later attempt uses the name: so once such an
// attempt ends (released, or given up), the Client watches that name for
// the rest of its lease and deletes any key made there (one watch per
// name; TestLateCreationSwept). Until it is deleted, such a key holds or
// queues like any other.
//
// Names: a hold key's name "<L>-<n>" is a new one (n counts the Client's
// names) unless this Client's last attempt under the same prefix on lease L
// gave its name back, which it does only once every request on it has
// answered and its key is known to be gone: Release's deletion answered,
// or an abandoned attempt's conditional deletion did. A name on which a
// request got no answer is never used again: a deletion that returned an
// error and is applied later deletes nothing but its own hold's key
// (TestLateReleaseSparesNextHold), and a creation without an answer is
// swept (above). Reuse keeps the keys under a lock's prefix few: etcd
// keeps every deleted key in its index until the next compaction, and the
// acquisition's read of the prefix walks them all (a new name for every
// attempt made one key's Obtain + Release 2.4 times slower after 24,000
// pairs; TestNamesReused). A Client keeps at most 1024 names for reuse.
//
// # The read-write lock
//
// Client.Read and Client.Write are the two sides of a read-write lock per
// key, another lock than the mutex of the same key (Obtain): its hold keys
// live under "<prefix>.rw/<key>/", readers' under "r/", writers' under
// "w/", named as the mutex's are. Each attempt makes a hold key of its own (one Client may hold the
// read side of a key for several owners at once), by the same transaction
// carrying the lease, and the key's create revision is the lease's token
// (a reader's too: larger for every new acquisition of either side). A
// writer holds when no key at all was made before its own, and otherwise
// watches the key just before it; a reader holds when no writer's key was
// made before its own, and otherwise watches the last writer's key before
// it. Both are served in create revision order: a reader that comes after
// a waiting writer waits for it (writers are not starved), and the readers
// between two writers enter together. A release wakes only the keys that
// watch it: a writer's, the readers between it and the next writer, or the
// next writer if it is right behind; a reader's, the writer right behind
// it, if any (no herd: TestRWNoHerd).
//
// Re-entry is by owner within a Client, as for the mutex, per side. An
// owner that holds the write side may take the read side, at once: a level
// of its write hold (same token), whose key stays, exclusive, until the
// owner has released both sides, so that no writer queued behind enters
// while the owner reads; the read side does not outlive the write key (no
// shared read after a downgrade). An owner that holds the read side and
// asks for the write side gets ErrUpgrade (lock.ErrUpgrade): two readers
// doing so would wait for each other for ever; this holds too once the
// write levels of a writer's hold are released and only its reads remain.
// Several concurrent Obtains of one owner on one side do not re-enter each
// other: the second queues behind the first. Losses are the mutex's: every
// hold on the Client's lease, of either side, is lost with it.
//
// # Schema
//
//	<prefix>/<key>/<lease hex>-<n>       value: the owner (or ""), lease: the Client's; one attempt per Client and key at a time (mutex); n: see Names
//	<prefix>.rw/<key>/w/<lease hex>-<n>  a writer's hold key: value the owner, lease the Client's; n the same
//	<prefix>.rw/<key>/r/<lease hex>-<n>  a reader's hold key, the same
//
// A Client with the prefix "<prefix>.rw" would meet the read-write locks of
// a Client with the prefix "<prefix>": do not use both.
//
// Keys may not be empty, hold '/', or be longer than MaxKeyLen bytes
// (ErrInvalidKey): a '/' would put one key's holds under another's prefix.
//
// # When not to use it
//
// Every acquisition is an etcd write (a raft round and an fsync), so it is
// not for thousands of acquisitions per second on one key. A TTL lock on
// Redis (package lock) is cheaper to run where etcd is not in place
// already. lock.WithTTL, WithMaxHold and WithRetry do not apply: the lease
// has one TTL for all holds of a Client (lock.WithTTL(d ≤ 0) is still
// refused with ErrInvalidTTL).
package etcdlock
