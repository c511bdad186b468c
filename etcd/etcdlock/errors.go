package etcdlock

import (
	"errors"
	"fmt"

	"github.com/coordkit/coordkit/lock"
)

var (
	// The errors for invalid arguments match lock.ErrInvalid.

	// ErrNilClient is returned by New when its *clientv3.Client is nil.
	ErrNilClient = fmt.Errorf("etcdlock: nil *clientv3.Client: %w", lock.ErrInvalid)
	// ErrInvalidKey is returned by Obtain, TryObtain, Holder, Inspect and
	// ForceRelease for an empty key, a key that holds the separator '/',
	// or one longer than MaxKeyLen bytes.
	ErrInvalidKey = fmt.Errorf("etcdlock: invalid key (empty, holding '/', or longer than 1024 bytes): %w", lock.ErrInvalid)
	// ErrInvalidPrefix is returned by New when WithPrefix's prefix is empty
	// or ends with '/'.
	ErrInvalidPrefix = fmt.Errorf("etcdlock: invalid prefix (empty, or ending with '/'): %w", lock.ErrInvalid)
	// ErrInvalidTTL is returned by New for a WithTTL under MinTTL, and by
	// Obtain and TryObtain for lock.WithTTL(d ≤ 0).
	ErrInvalidTTL = fmt.Errorf("etcdlock: invalid TTL (a lease lasts 1 s at least; lock.WithTTL needs d > 0): %w", lock.ErrInvalid)
	// ErrClosed is returned by Obtain and TryObtain once the Client is
	// closed, and is the reason of the loss of the leases Close ends
	// (Lease.Err). It matches lock.ErrClosed.
	ErrClosed = fmt.Errorf("etcdlock: client closed: %w", lock.ErrClosed)
	// ErrUpgrade is returned by the write side of the read-write lock
	// (Client.Write) when ctx's owner holds the key's read side on this
	// Client: two readers doing so would wait for each other for ever.
	// It matches lock.ErrUpgrade.
	ErrUpgrade = fmt.Errorf("etcdlock: write lock requested by an owner that holds the read lock (upgrade would deadlock): %w", lock.ErrUpgrade)
	// ErrLeaseLost is the reason of a lease's loss (Lease.Err) when the
	// Client's etcd lease ended or may have: the server refused a
	// keep-alive (the lease was revoked or expired), or no keep-alive was
	// answered in time to be sure the server still keeps it.
	ErrLeaseLost = errors.New("etcdlock: etcd lease expired, revoked, or may have expired")
)
