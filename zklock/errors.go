package zklock

import (
	"errors"
	"fmt"

	"github.com/coordkit/coordkit/lock"
)

var (
	// The errors for invalid arguments match lock.ErrInvalid.

	// ErrNilConn is returned by New when conn is nil.
	ErrNilConn = fmt.Errorf("zklock: nil *zk.Conn: %w", lock.ErrInvalid)
	// ErrInvalidKey is returned by Obtain and TryObtain for an empty key or
	// one longer than MaxKeyLen bytes. Any other key is valid: it is
	// path-escaped into one znode name (see the package documentation).
	ErrInvalidKey = fmt.Errorf("zklock: invalid key (empty or longer than 1024 bytes): %w", lock.ErrInvalid)
	// ErrInvalidRoot is returned by New when WithRoot's path is not an
	// absolute ZooKeeper path without a trailing slash, such as
	// "/coordkit/locks".
	ErrInvalidRoot = fmt.Errorf("zklock: invalid root path (want an absolute path such as /coordkit/locks): %w", lock.ErrInvalid)
	// ErrUpgrade is returned by the write side of a read-write lock when ctx's
	// owner already holds the read side of the key on this Client: waiting
	// for the write lock behind its own read lock would deadlock.
	ErrUpgrade = fmt.Errorf("zklock: write lock requested by an owner that holds the read lock (upgrade would deadlock): %w", lock.ErrUpgrade)
	// ErrInvalidSessionTimeout is returned by New for a negative
	// WithSessionTimeout.
	ErrInvalidSessionTimeout = fmt.Errorf("zklock: negative session timeout: %w", lock.ErrInvalid)
	// ErrClosed is returned by Obtain and TryObtain once the Client (or its
	// zk.Conn) is closed, and is the reason of the loss of the leases Close
	// ends (Lease.Err). It matches lock.ErrClosed.
	ErrClosed = fmt.Errorf("zklock: client closed: %w", lock.ErrClosed)
	// ErrSessionExpired is the reason of a lease's loss (Lease.Err) when its
	// session ended (go-zookeeper moved to a new one) or may have: no
	// heartbeat was answered within the lease's window (WithSessionTimeout),
	// or, without a session timeout, the connection went down.
	ErrSessionExpired = errors.New("zklock: session expired or may have")
)
