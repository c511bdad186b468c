package sqllock

import (
	"errors"
	"fmt"

	"github.com/coordkit/coordkit/lock"
)

var (
	// ErrInvalid is wrapped by every error for an invalid argument: a nil
	// *sql.DB, an unknown Dialect, an empty key or one longer than
	// MaxKeyLen, an owner longer than MaxOwnerLen, a TTL below MinTTL, a bad
	// table name or prefix, a non-positive amount, a MySQL pool whose
	// sessions have autocommit off (the first Obtain). It matches
	// lock.ErrInvalid.
	ErrInvalid = fmt.Errorf("sqllock: invalid argument: %w", lock.ErrInvalid)
	// ErrClosed is returned by Obtain and TryObtain after Close, and is the
	// reason of the loss of the leases Close ended. It matches
	// lock.ErrClosed.
	ErrClosed = fmt.Errorf("sqllock: client closed: %w", lock.ErrClosed)
	// ErrSchema is returned when the Client's table is missing or does not
	// have the columns and primary key of the package documentation's
	// schema. Client.CreateTable creates it.
	ErrSchema = errors.New("sqllock: table missing or not coordkit's schema")
	// ErrSessionLost is the reason of the loss of a session lock (Lease.Err)
	// whose pinned connection broke: the server was killed or restarted,
	// the connection was cut or killed (KILL, pg_terminate_backend,
	// wait_timeout), or it no longer holds the lock.
	ErrSessionLost = errors.New("sqllock: the lock's database session ended")
	// ErrConflict is returned by Versioned.Update when every attempt found
	// the row's version changed by another writer.
	ErrConflict = errors.New("sqllock: version kept changing (optimistic update conflicted on every attempt)")
	// ErrInsufficient is returned by Stock.Take when the row's count is
	// below the amount asked for.
	ErrInsufficient = errors.New("sqllock: not enough left")
	// ErrNoRow is returned by Stock.Take when no row has the key.
	ErrNoRow = errors.New("sqllock: no such row")
)

// invalid returns an error wrapping ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// notObtained is the error of an Obtain whose ctx ended.
func notObtainedCtx(err error) error { return errors.Join(lock.ErrNotObtained, err) }
