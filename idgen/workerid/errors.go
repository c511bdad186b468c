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
