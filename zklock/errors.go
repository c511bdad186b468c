package zklock

import "errors"

var (
	// ErrNilConn is returned by New when conn is nil.
	ErrNilConn = errors.New("zklock: nil *zk.Conn")
	// ErrInvalidKey is returned by Obtain and TryObtain for an empty key or
	// one longer than MaxKeyLen bytes. Any other key is valid: it is
	// path-escaped into one znode name (see the package documentation).
	ErrInvalidKey = errors.New("zklock: invalid key (empty or longer than 1024 bytes)")
	// ErrInvalidRoot is returned by New when WithRoot's path is not an
	// absolute ZooKeeper path without a trailing slash, such as
	// "/coordkit/locks".
	ErrInvalidRoot = errors.New("zklock: invalid root path (want an absolute path such as /coordkit/locks)")
	// ErrUpgrade is returned by the write side of a read-write lock when ctx's
	// owner already holds the read side of the key on this Client: waiting
	// for the write lock behind its own read lock would deadlock.
	ErrUpgrade = errors.New("zklock: write lock requested by an owner that holds the read lock (upgrade would deadlock)")
	// ErrInvalidSessionTimeout is returned by New for a negative
	// WithSessionTimeout.
	ErrInvalidSessionTimeout = errors.New("zklock: negative session timeout")
	// ErrClosed is returned by Obtain and TryObtain once the Client (or its
	// zk.Conn) is closed.
	ErrClosed = errors.New("zklock: client closed")
)
