package workerid

import (
	"errors"
	"fmt"
)

var (
	// ErrExhausted is returned (wrapped in *ExhaustedError) when every
	// worker ID of a service is leased.
	ErrExhausted = errors.New("workerid: no free worker ID")
	// ErrInvalid is returned for bad input: empty service, bad option values.
	ErrInvalid = errors.New("workerid: invalid argument")
	// ErrReleased is returned by a Lease's methods after Release.
	ErrReleased = errors.New("workerid: lease released")
	// ErrGeneratorExists is returned by Lease.NewSnowflake when the lease
	// already has a generator: two generators on one worker ID would issue
	// the same IDs in the same tick. Share the first; it is safe for
	// concurrent use.
	ErrGeneratorExists = errors.New("workerid: the lease already has a generator")
	// ErrSchema is returned by a SQLLeaser when its table, or a column of
	// it, does not exist; the error says how to create it
	// (SQLLeaser.CreateSchema).
	ErrSchema = errors.New("workerid: worker table missing or not coordkit's schema")
)

// ExhaustedError names the service whose worker IDs are all taken.
type ExhaustedError struct {
	Service string
	Max     int64 // the highest worker ID that may be leased
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("workerid: all %d worker IDs of service %q are leased", e.Max+1, e.Service)
}

// Unwrap returns ErrExhausted.
func (e *ExhaustedError) Unwrap() error { return ErrExhausted }
