package txn

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalid is wrapped by every error for an invalid argument: a nil
	// *sql.DB or ID source, an unknown dialect, a bad table name, a
	// transaction type with no branches or a nil branch func, a
	// non-positive timeout, an unknown transaction name, a payload longer
	// than MaxPayload.
	ErrInvalid = errors.New("txn: invalid argument")
	// ErrAborted is wrapped by Run's error when a branch refused (its
	// forward func returned an error wrapping ErrAbort) and every branch
	// that had started was compensated or cancelled: the transaction's
	// effects are undone.
	ErrAborted = errors.New("txn: aborted and rolled back")
	// ErrAbort is what a forward branch func (a Saga action, a TCC Try)
	// wraps in its error to refuse for good (insufficient funds, a business
	// rule): the transaction is rolled back. Any other error is taken as
	// transient and the func is called again after a backoff. A
	// compensation, Confirm or Cancel has no way to refuse: every error it
	// returns is retried.
	ErrAbort = errors.New("txn: branch refused")
	// ErrStuck is wrapped by the error of Run or of a recovery when a
	// branch func still failed at the transaction's deadline: the log marks
	// the transaction stuck, with the reason, and Stuck lists it. It needs
	// a person.
	ErrStuck = errors.New("txn: deadline passed with a branch still failing; needs a person")
	// ErrDeposed is returned by a driver whose ownership of a transaction
	// passed to another driver (its lease expired and Recover took it
	// over): the log refused its write by token. The transaction goes on
	// under its new driver.
	ErrDeposed = errors.New("txn: driver deposed (the log refused its write by owner token)")
	// ErrSchema is returned when a table of the package is missing:
	// CreateTables (or the DDL in the package documentation) makes them.
	ErrSchema = errors.New("txn: table missing or not coordkit's schema")
)

// invalid returns an error wrapping ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
