// Package election elects one leader among the instances of a service, on
// any lock.Locker: lock.Client (Redis), redlock.Client, zklock.Client,
// sqllock.Client (MySQL/MariaDB and PostgreSQL: session locks and the
// lease table) and etcdlock.Client (the etcd module), with the guarantees
// of the lock underneath. It is the shape
// of etcd's Election, Curator's LeaderLatch and Kubernetes' leaderelection
// for fleets that already run coordkit's locks: a singleton job (one
// instance drains the outbox, one runs the scheduler) wrapped in Run, which
// calls the job whenever its instance leads and again after it returns,
// so the job is one that runs until its ctx ends. A one-off (send the
// nightly report once) takes one term: Campaign, the work, Resign.
//
// A job that runs for as long as its instance leads (the common case): Run
// calls it once per term, with a ctx that ends with the term:
//
//	e, err := election.New(locker, "outbox-drainer") // any lock.Locker
//	if err != nil {
//		return err
//	}
//	err = e.Run(ctx, func(ctx context.Context, term *election.Term) error {
//		return drainOutbox(ctx, term.Token()) // returns when ctx ends: the lead lost, or Run's ctx done
//	})
//
// A one-off (send the nightly report once) takes one term and resigns it:
//
//	term, err := e.Campaign(ctx) // waits until this instance leads
//	if err != nil {
//		return err
//	}
//	defer term.Resign(ctx)
//	return sendReport(ctx)
//
// A function given to Run that returns nil ends its term, and Run campaigns
// again after WithRetryPeriod (1 s): a one-shot job there would run every
// second. The options that matter: WithTTL (how long a crashed leader keeps the
// others waiting; default the locker's), WithRetryPeriod, WithIdentity (what
// Leader reports), WithCallbacks (Kubernetes-style OnStartedLeading,
// OnStoppedLeading, OnNewLeader).
//
// # Guarantees
//
//   - At most one term is live at a time as far as the lock's own guarantee
//     goes: a term ends (Done closes) no later than the lock reports its
//     lease lost, which each backend bounds (lock: within the TTL of the
//     last renewal; redlock: within TTL − drift; zklock: within the
//     session's window; sqllock: a session lock at the next check, TTL/3,
//     after its session ended, and within the TTL of the last check when
//     the database cannot be reached; the lease table within the TTL of
//     the last renewal; etcdlock: 2T/3 after the send of the last
//     keep-alive the server answered, T its lease's TTL). Two instances can both believe they lead only
//     while a paused or cut-off leader has not yet seen Done: exactly the
//     window in which its lock could be held by another.
//   - Term tokens are the lock's fencing tokens: every term's is larger than
//     every earlier term's. Have the resources a leader writes to refuse a
//     token below the last one they saw, and a deposed leader's late writes
//     are refused.
//   - Leader is a read at one moment: by the time it returns the leader may
//     have changed. It is for display and routing, not for exclusion.
//
// # Algorithm
//
// A term is a hold of the election's key. Campaign obtains the key with an
// owner of its own, "<identity>#<random>", and blocks in the lock's queue
// (notified, not polled, on every backend but sqllock's lease table, whose
// waiters poll) until it holds it. The term lasts until Resign (which
// releases the key, so the next campaigner leads at once) or until the
// lease is lost (its renewal failed past the TTL, the key was deleted, the
// ZooKeeper session expired, the database session that held a SQL session
// lock ended): Term.Done closes, and Term.Err says why. Run loops:
// campaign, run the function with a ctx that is cancelled when the term
// ends (its cause is the loss), resign, wait the retry period, campaign
// again. Every term won is resigned on every way out: when ctx ends while fn runs, or just as a campaign wins (the
// lock handed over as a SIGTERM handler cancels), the release runs with a
// ctx detached from the ended one and bounded by 5 s; a Campaign whose
// ctx ended as the lock was granted releases it and reports ctx's end.
// A release that fails (the server out of reach) frees the key as a
// crash does: when the lease expires, or on ZooKeeper when the deletion,
// retried in the background, succeeds or the session ends.
//
// Leader asks the locker who holds the key (lock.Client, redlock.Client,
// zklock.Client, sqllock.Client and etcdlock.Client have a Holder method:
// on Redis the hold's owner field, on Redlock the owner on a quorum of
// masters, on ZooKeeper the lock node's data, on SQL the owner column of
// the lock's fencing row or lease row, on etcd the first hold key's value) and returns the identity part of the owner;
// Observe and Run's OnNewLeader callback poll it every observe period.
//
// # When not to use it
//
// Not with lock.Simple (no notified waiting, and no Holder, so no Leader).
// Not with sqllock's session locks behind a pooler that multiplexes
// sessions (PgBouncer in transaction mode): use its lease table there.
// Not for leaders that must hand over in less than the lock's TTL after a
// crash: a leader that dies without resigning keeps the key until its
// lease expires.
package election
