package lock

import (
	"context"
	"time"

	"github.com/coordkit/coordkit/internal/lockopt"
)

// Locker obtains leases on keys. Seven types implement it, so Do and
// package election work with each of them:
//
//   - *Client: the reentrant Redis hash lock (New);
//   - *Simple: the plain Redis SET NX PX lock (NewSimple);
//   - *redlock.Client: the Redlock quorum over N Redis masters;
//   - *zklock.Client: the ZooKeeper lock;
//   - *sqllock.Client: MySQL/MariaDB and PostgreSQL session locks, and the
//     lease table (NewMySQL, NewPostgres, NewLeaseTable);
//   - *semaphore.Client: a permit of a Redis counting semaphore;
//   - *semaphore.ZK: a permit of a ZooKeeper counting semaphore.
//
// The sides of the read-write locks, RW.Read and RW.Write here and
// zklock.Client's Read and Write, are Lockers too.
type Locker interface {
	// Obtain blocks until key is held by the caller, ctx ends, or an error
	// occurs. When ctx ends while waiting the error is
	// errors.Join(ErrNotObtained, ctx.Err()). If ctx carries an owner (see
	// WithOwner) that already holds key, Obtain re-enters and returns a lease
	// with the same fencing token.
	Obtain(ctx context.Context, key string, opts ...Option) (Lease, error)
	// TryObtain makes one attempt and returns ErrNotObtained if another
	// owner holds key.
	TryObtain(ctx context.Context, key string, opts ...Option) (Lease, error)
}

// Lease is one level of hold on a key.
type Lease interface {
	// Key returns the key the lease holds.
	Key() string
	// Token returns the fencing token: strictly larger for every new
	// (non-reentrant) acquisition of the key, the same on re-entry.
	Token() int64
	// Lost returns a channel that is closed once the lock is no longer known
	// to be held (expired, deleted, session lost, renewal failing for a TTL).
	// It is not closed by Release.
	Lost() <-chan struct{}
	// Release drops one level of reentrancy; the outermost release frees the
	// key. It returns ErrNotHeld if the lock was no longer held. Releasing a
	// lease twice returns ErrNotHeld the second time.
	Release(ctx context.Context) error
}

// LeaseStatus is implemented by the leases of every Locker in this module
// (Client, Simple, redlock.Client, zklock.Client): what a holder checks
// before it commits, beyond Lost.
type LeaseStatus interface {
	// Err returns nil while the lease is not known to be lost; once Lost
	// is closed, an error matching ErrLockLost and the reason: ErrClosed
	// (the client was closed), ErrNotHeld (another owner holds the lock,
	// or nobody does: the key was deleted or expired), watchdog.ErrExpired
	// (renewals failed until the TTL ran out), watchdog.ErrMaxHold,
	// zklock.ErrSessionExpired (the ZooKeeper session ended or may have).
	Err() error
	// Until returns the time until which the lease is known to be held:
	// the send time of its last successful renewal (or acquisition) plus
	// its TTL on a Redis lock, the end of the session's window on
	// ZooKeeper; the zero Time once it is lost. Work that must finish
	// while the lock is held checks time.Until(l.Until()) against its
	// own duration, as with redsync's Until or Redisson's
	// remainTimeToLive. Clocks drift: fencing tokens, not this, are what
	// makes a late write safe.
	Until() time.Time
}

// LostCause returns why l was lost (LeaseStatus.Err), or nil while it is
// held; for a lease that does not implement LeaseStatus, ErrLockLost once
// Lost is closed.
func LostCause(l Lease) error {
	if s, ok := l.(LeaseStatus); ok {
		return s.Err()
	}
	select {
	case <-l.Lost():
		return ErrLockLost
	default:
		return nil
	}
}

// Option configures one Obtain or TryObtain call.
type Option func(*obtainOptions)

// obtainOptions is the resolved form of a call's Options, shared with the
// module's other Lockers through internal/lockopt (lockopt.Apply).
type obtainOptions = lockopt.Obtain

// WithTTL sets the lease's time to live. Default: the Locker's default TTL
// (30 s for the Redis lock, as Redisson's watchdog timeout). d must be
// positive: WithTTL(d ≤ 0) records a negative TTL, which Lockers refuse.
// For a re-entry (a nested Obtain of a held key) a level never shortens the
// hold: a longer d lengthens the whole hold's TTL until it ends, a shorter
// one changes nothing, and a re-entry without WithTTL joins the hold as it
// is (Client, redlock; each level of the RW lock is a lease of its own,
// renewed for its own TTL, the default if it names none).
func WithTTL(d time.Duration) Option {
	if d <= 0 {
		d = -1
	}
	return func(o *obtainOptions) { o.TTL = d }
}

// WithMaxHold stops the watchdog renewing the lease after d, so a stuck
// holder cannot keep the lock forever. Default: 0, renew until released.
func WithMaxHold(d time.Duration) Option { return func(o *obtainOptions) { o.MaxHold = d } }

// WithRetry waits retry(attempt) between attempts instead of waiting for the
// holder's release notification. Default: nil, wait for notification (with
// the holder's remaining TTL as the bound of each wait).
func WithRetry(retry func(attempt int) time.Duration) Option {
	return func(o *obtainOptions) { o.Retry = retry }
}
