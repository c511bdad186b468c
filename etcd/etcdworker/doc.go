// Package etcdworker leases Snowflake worker IDs to processes through etcd,
// with the Lease of package workerid (github.com/coordkit/coordkit/idgen/workerid):
// *Leaser implements workerid.Leaser, as RedisLeaser, ZKLeaser and
// SQLLeaser do, and keeps each worker ID's high-water mark, so that a
// generator on a leased ID starts above every ID its earlier holders
// issued.
//
// Lease a worker ID at start-up, give it back at shutdown, and issue
// Snowflakes that stop the moment the lease is lost:
//
//	leaser, err := etcdworker.New(cli, etcdworker.WithTTL(10*time.Second)) // cli: a *clientv3.Client
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
// The options: WithMax (the highest worker ID, 1023), WithTTL (the etcd
// lease's TTL T, 10 s), WithCheckpoint (how often the high-water mark is
// saved, 3 s), WithPrefix, WithHost, WithLogger. It runs on etcd 3.4 and
// later, in the module github.com/coordkit/coordkit/etcd (etcd's client
// stays out of the graph of the other backends' users).
//
// # Guarantees
//
// Exclusion: a worker ID of a service has at most one live holder. Its key
// is created by a transaction that carries the holder's etcd lease and
// succeeds only while the key does not exist, so the server admits one
// holder at a time, and a put on a lease the server no longer has is
// refused. The key lives as long as the lease: until Release (which
// revokes it) or until the server expires it, T after the last keep-alive
// it received. The holder's generators stop (Lost closes, and
// idgen.WithLeaseDeadline refuses every Next after the deadline, also in a
// process that was stopped across it) 2T/3 after the send of the last
// renewal that succeeded: T/3 before the server can expire the lease and
// give the ID to another process. A renewal is a keep-alive of the lease
// (a follower forwards it to the leader: a member cut off from its leader
// renews nothing) and then a read of the key: a keep-alive refused (the
// lease was revoked or expired) or a key gone or on another lease loses
// the lease at once. Overlap needs a fault beyond these: the holder's and
// the leader's clocks running at rates so different that they eat the
// margin; an operator who revokes the lease (etcdctl lease revoke) or
// deletes or writes the key, which frees the ID at once while the holder
// learns at its next renewal, within T/6 (TestOperatorTakesLease); or a
// data loss on the cluster.
//
// High-water marks: Lease.NewSnowflake starts above the ID's stored mark;
// its generator saves its mark every WithCheckpoint, on Release before
// the ID is freed, and after a loss in the background (see workerid's
// Lease, which runs the same code on every backend). A store only raises
// the mark (a compare-and-swap on the key's mod revision), so a late save
// of a former holder cannot lower its successor's.
//
// # Schema
//
// For service S (not empty, none of "{}/" nor white space) under the
// prefix P (WithPrefix, DefaultPrefix):
//
//	P/S/ids/<id>   the holder record, JSON (owner: a random UUID per lease, host, pid, since); lease: the holder's
//	P/S/hw/<id>    the ID's high-water mark, decimal Unix milliseconds; no lease, only raised
//
// # Algorithm
//
// Lease grants an etcd lease of WithTTL's TTL (whole seconds; the server
// may grant longer, and the Lease runs on what it granted), reads the
// service's ID keys (one range read), and creates the lowest free ID's key
// with a transaction conditional on its absence; if another process took
// that ID first, it tries the next free one, and with none left it returns
// *workerid.ExhaustedError. Every failure revokes the lease it granted.
// A watchdog (package watchdog) renews every T/6 and takes the lease as
// held until the send time of the last renewal that succeeded (the Grant
// at first) plus 2T/3. Release revokes the lease, which deletes the key at
// once. A lost lease is not revoked: the server expires it (or already
// has); lease again.
//
// # When not to use it
//
// As workerid's: not for a fixed fleet with configured IDs, not for an ID
// per request. Each Lease is three round trips or more and keeps an etcd
// lease alive with two requests every T/6.
package etcdworker
