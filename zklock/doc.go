// Package zklock is a ZooKeeper lock: a fair (FIFO) mutual exclusion lock
// and a read-write lock on the same recipe, whose holder lives as long as
// its ZooKeeper session rather than for a TTL. *Client implements
// lock.Locker, and so do Client.Read and Client.Write, so lock.Do works with
// each of them.
//
// Give New a go-zookeeper connection and the session timeout it was made with:
//
//	conn, _, err := zk.Connect([]string{"zk1:2181"}, 10*time.Second)
//	if err != nil {
//		return err
//	}
//	defer conn.Close() // after locker.Close, which waits for the requests it started
//	locker, err := zklock.New(conn, zklock.WithSessionTimeout(10*time.Second))
//	if err != nil {
//		return err
//	}
//	defer locker.Close()
//	err = lock.Do(ctx, locker, "batch/7", func(ctx context.Context) error {
//		return withdraw(ctx, "batch-7", 1) // ctx is cancelled when the session is lost
//	})
//
// The options that matter: WithSessionTimeout (the timeout passed to
// zk.Connect; it bounds how late a holder learns of a lost session; default
// DefaultSessionTimeout, 4 s, the lowest a server with the default tickTime
// negotiates, as in workerid; 0 means unknown, and no bound), WithRoot (the parent of every lock's znode,
// DefaultRoot), WithACL, WithMetrics and WithLogger. Client.Read and
// Client.Write are the two sides of a read-write lock. ZooKeeper 3.5.3 or later
// is required (the key's parent is a container znode).
//
// # Guarantees
//
// The lock is held while the holder's node exists: until Release, or until
// its session ends. Waiters are served in the order of their nodes (FIFO), and
// every new acquisition of a key has a larger fencing token (the node's
// creation zxid; re-entry returns the same one). With WithSessionTimeout(T),
// a holder is told of the loss (Lost closes, lock.Do's ctx is cancelled) at
// most T/2 after the send of the last heartbeat the leader answered (T/3
// before a chain of heartbeats has run), before the server can expire the
// session and give the lock to another client, also through a follower cut
// off from its leader. Sessions, below, derives the bound and lists the faults
// under which two holders can still overlap; with WithSessionTimeout(0) there
// is no bound against a silent or half-open link. T defaults to
// DefaultSessionTimeout (4 s): pass the real timeout if it is lower.
//
// # Algorithm
//
// Every key has a parent znode; each attempt to obtain it creates one
// ephemeral sequential node under that parent, in Curator's protected mode:
// the name carries a UUID drawn for the attempt,
//
//	<root>/<escaped key>/_c_<uuid>-<kind>-<sequence>
//
// where kind is "lock" (Client.Obtain), "write" or "read", and whose data is
// the owner the Obtain's ctx carried (lock.WithOwner; empty without one),
// which Holder reads. The create is one
// round trip: a multi of the create and an empty setData on the parent, the
// setData's Stat giving the transaction's zxid (which is the new node's
// czxid) and the parent's number of children right after the create. When
// that number is 1 nobody else queues and the lock is held at once, so an
// uncontended Obtain + Release costs two round trips.
//
// Otherwise the attempt lists the parent's children, sorts them by sequence,
// and waits for the node it depends on: an exclusive node (lock, write) for
// the last node before it of any kind, a reader for the last exclusive node
// before it. It sets a data watch (getData) on that one node only, so a
// release wakes exactly one waiter (no herd effect), and nodes are served in
// sequence order (FIFO). When the watch fires the attempt lists again,
// except when the node it watched was the only one before it that it waited
// for: nodes before it can only go, never come, so the lock is then held
// without a further round trip.
//
// If the reply to the create is lost (connection loss), the attempt lists
// the parent's children and looks for its UUID: a node found is used, so no
// ghost node is left holding the lock, and one not found is created again
// with the same UUID. A node whose session is not the connection's current
// one is deleted, never used. If ctx ends meanwhile, the Client goes on
// looking in the background and deletes what it finds. Duplicates of the
// attempt's UUID seen while waiting are deleted as well.
//
// Every deletion in the background judges a node by its ephemeralOwner
// against the connection's session at the time of asking, never by a session
// captured when the attempt started: a node of the current session is
// deleted, one of another session is left to that (ended) session. This
// matters after an expiry: go-zookeeper has no session (ID 0) until it
// reconnects, a create queued then runs in the new session, and the Client
// still deletes the node if the attempt was given up.
//
// Release deletes the node (a missing node means lock.ErrNotHeld). An
// attempt given up (ctx ended, TryObtain refused) deletes its node before
// Obtain returns, also when ctx ends while the create is in flight (Obtain
// then waits for the create's reply): when Obtain returns, no node of the
// attempt is left, unless the server took longer than a second to answer;
// then the Client goes on deleting it in the background until the node or
// its session is gone.
//
// # Re-entry, owners and tokens
//
// Re-entry is by the owner in ctx (lock.WithOwner; lock.Do adds one): a
// Client counts, in process, how many times each owner holds each key, and
// only the outermost Release deletes the node. Re-entry works within one
// Client, not across Clients or processes; ctx without an owner never
// re-enters. The owner is not written to ZooKeeper (an owner also guards
// the Redis lock, so it stays secret). The fencing token is the node's
// creation zxid: zxids grow with every write to the ensemble, so each new
// acquisition of a key has a larger token, and re-entry returns the same
// one. An owner that holds the write side (or the mutex, the same
// exclusive lock) may take the read side too, and gets it at once, as
// Curator grants it: its own exclusive node does not count against its
// reader, and neither do the writers queued behind that node (they wait for
// it, so waiting for them would deadlock). While such writers queue, the
// read leans on the owner's exclusive node: the node stays until the owner
// has released both sides, so a queued writer never enters while the owner
// reads. With nobody queued the read has a node of its own and survives the
// write's release (a downgrade). Taking the write side while holding only
// the read side returns ErrUpgrade instead of deadlocking.
//
// # Sessions: what the holder knows, and when
//
// The lock is held as long as the node exists, that is until Release or
// the end of the node's session: the server (on an ensemble, the leader)
// expires a session the session timeout T after it last heard of the
// client, and deletes its nodes; the next waiter then holds the lock. The
// holder must learn of the loss before that. While leases are held, a
// monitor goroutine looks at conn.SessionID() every T/30 (5 to 100 ms; 10 ms
// with WithSessionTimeout(0)).
//
//   - Session expired or changed (go-zookeeper sets the session ID to 0 when
//     it learns of the expiry, then to the new session's): every lease of the
//     old session is lost at once (Lost() closes; Lease.Err and the cause
//     with which lock.Do cancels its function's ctx match lock.ErrLockLost
//     and ErrSessionExpired; at Close, lock.ErrClosed). The client learns of an
//     expiry only when it reconnects, which may be long after the fact;
//     hence the next rule.
//   - With WithSessionTimeout(T), the Client measures the session's
//     liveness itself. While leases are held it sends a heartbeat whenever
//     T/6 less two ticks has passed since its last request through the
//     leader (so that they go out at most T/6 apart): a sync, which a
//     follower forwards to the leader and answers only with the leader's
//     reply. Each request of the session that went
//     through the leader (a heartbeat, or a lock node's create: a write) and
//     was answered extends the session's leases to its send time s plus T/2
//     if such requests had by then been sent at most T/6 apart for 5T/12
//     (the heartbeats do that while leases are held), plus T/3 otherwise
//     (just after an acquisition by an idle Client); every lease of the
//     session is reported lost when that time has passed. Nothing
//     go-zookeeper merely receives counts: not the replies to its pings (a
//     follower cut off from its leader answers them for as long as its
//     syncLimit), not watch notifications or late replies (a half-open link
//     delivers them while the server hears nothing). A new lease is granted
//     only if its session's leases have T/6 to live at least; a lock handed
//     over by a notification after a long wait sends a sync first.
//   - With WithSessionTimeout(0) (T unknown), a lease is reported lost as
//     soon as go-zookeeper reports the connection down. That bounds nothing:
//     go-zookeeper declares a connection dead 2T/3 after the last packet it
//     received, notifications and late replies included, while the server
//     expires the session T after it last heard from the client. Measured
//     with T = 3 s and the old rule (lost T/3 after the connection was
//     declared dead): a notification arriving just before a partition gave
//     0.5 s with two holders, a half-open link 1 s, a follower cut off from
//     its leader (syncLimit 5 s) 3.1 s. Do not pass 0.
//   - A lease reported lost while its session survives has its node deleted
//     once the connection is back, so the next waiter does not wait for the
//     session's end.
//
// Why these windows. The monitor checks every tick, so a loss is reported
// by s + T/2 (or s + T/3) at the latest. The server hears of the client no
// earlier than s, so on a standalone server, or when connected to the
// leader, the session lives until s + T at least: the loss comes T/2 (T/3
// after an idle spell) before any other client can hold the lock. Through a
// follower, the leader learns of the follower's clients from its answers to
// the leader's pings, two per tick: when the follower forwarded the request
// sent at s, the leader had heard of every packet of the client the
// follower received up to half a tick before. The client's packets come at
// most T/6 apart on the chain of heartbeats, and T/3 apart otherwise
// (go-zookeeper's pings), so the session lives until s + T - T/6 - tick/2,
// or s + T - T/3 - tick/2, at least. ZooKeeper never negotiates a session
// shorter than 2 ticks (tick <= T/2). Either way the loss comes T/3 -
// tick/2 before the expiry: T/12 at worst, over T/4 with the usual T of 10
// ticks or more. (A packet that go-zookeeper held while disconnected goes
// out after a reconnection, which the leader hears of at once: it
// revalidates the session.) The cost is one sync per T/6 per Client while
// it holds leases. A brief outage loses nothing: leases survive while a
// heartbeat is answered within the window, so an outage of up to about T/3
// (T/2 less a heartbeat period and a round trip) passes, T/6 during the
// first 5T/12 after an acquisition by an idle Client. go-zookeeper waits a
// second before dialling a standalone server again, so with T under about
// 3.5 s (7 s in that first phase) a blip loses the leases.
//
// So two holders overlap only under these faults: the clocks of the holder
// and of the leader run at rates so different that they eat the margin
// (T/12 at worst); a message between the follower and the
// leader is delayed by more than that margin; WithSessionTimeout is given a
// T above the negotiated timeout (the server clamps it to its
// [minSessionTimeout, maxSessionTimeout], 2 to 20 ticks by default: pass
// the negotiated value); the holder process is paused (GC, SIGSTOP) past
// the loss, so that it acts after Lost closed; an operator deletes the lock
// node; or WithSessionTimeout(0) is given (above). This is stricter than
// Curator's recommended policy (LOST after a full session timeout of
// SUSPENDED), which can report the loss after another holder has taken
// over.
//
// Lost is a promise about when the holder is told, not about when it stops:
// the holder's work must watch ctx (lock.Do) and pass the token to the
// resource, which must refuse tokens older than one it has seen.
//
// # Schema
//
//	<root>                                   persistent, created on demand (default /coordkit/locks)
//	<root>/<escaped key>                     container node: the server deletes it once empty
//	<root>/<escaped key>/_c_<uuid>-lock-<seq>   ephemeral sequential, mutex node, no data
//	<root>/<escaped key>/_c_<uuid>-write-<seq>  ephemeral sequential, write side
//	<root>/<escaped key>/_c_<uuid>-read-<seq>   ephemeral sequential, read side
//
// Keys are escaped, not refused: url.PathEscape (so '/' becomes %2F, '%'
// becomes %25, control characters and non-ASCII bytes %XX), and "." and
// ".." become %2E and %2E%2E; distinct keys get distinct nodes. Empty keys
// and keys longer than MaxKeyLen bytes return ErrInvalidKey. The key
// parents are container nodes (ZooKeeper 3.5 or later), so empty parents are
// cleaned up by the server (its ContainerManager, every minute by default)
// with no extra round trip on Release; a parent removed between two
// attempts is created again. Every acquisition also sets the parent's
// (empty) data, which bumps its data version. Nodes get the ACL of
// WithACL; with digest ACLs the connection authenticates first (AddAuth).
// The mutex nodes follow the "lock-" naming of Curator's InterProcessMutex
// and go-zookeeper's zk.Lock, ordered by sequence.
//
// # When not to use it
//
// Do not use it without ZooKeeper already in place: a TTL lock on Redis
// (package lock) is cheaper to run. Every acquisition is a ZooKeeper write
// (a quorum round and an fsync), so it is not for thousands of acquisitions
// per second on one key. Safety rests on the session: a holder paused (GC,
// SIGSTOP) past the loss keeps running after its lease is reported lost
// unless it checks ctx, so use the fencing token. A holder's node
// deleted by hand (an operator's force release) is not noticed by the holder
// until Release returns lock.ErrNotHeld. The TTL, MaxHold and Retry options
// of lock do not apply.
package zklock
