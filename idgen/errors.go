package idgen

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInvalid matches every invalid-argument error of this package
	// (ErrInvalidLayout, ErrInvalidWorker, ErrInvalidOption, ErrInvalidID), as
	// lock.ErrInvalid, redisid.ErrInvalid and workerid.ErrInvalid do in theirs:
	// errors.Is(err, idgen.ErrInvalid) tells bad input from a failure.
	ErrInvalid = errors.New("idgen: invalid argument")

	// ErrInvalidLayout is returned (wrapped, with the reason) by Layout.Validate,
	// NewSnowflake and Layout.Compose for a layout whose fields do not add up.
	ErrInvalidLayout error = &invalidError{"idgen: invalid layout"}

	// ErrInvalidWorker is returned (wrapped) when a worker, datacenter or machine
	// number does not fit the bits the layout gives it.
	ErrInvalidWorker error = &invalidError{"idgen: worker out of range"}

	// ErrEpochInFuture is returned (wrapped, together with ErrInvalidLayout) by
	// NewSnowflake when the layout's epoch is later than the generator's clock.
	ErrEpochInFuture = errors.New("idgen: epoch in the future")

	// ErrClockBackwards is wrapped by *ClockBackwardsError: the clock is behind
	// the time of the last ID issued by more than the generator tolerates.
	ErrClockBackwards = errors.New("idgen: clock moved backwards")

	// ErrTimeExhausted is returned when the clock has passed the last instant the
	// layout's time bits can hold; the generator cannot issue any more IDs.
	ErrTimeExhausted = errors.New("idgen: time bits exhausted")

	// ErrLeaseLost is returned by a generator built WithLease once the lease's
	// channel is closed: its worker number may now belong to someone else.
	ErrLeaseLost = errors.New("idgen: worker lease lost")

	// ErrRetired is returned by a generator after Retire (unless Retire was
	// given another cause).
	ErrRetired = errors.New("idgen: generator retired")

	// ErrInvalidOption is returned (wrapped) by constructors given an option
	// value outside its documented range.
	ErrInvalidOption error = &invalidError{"idgen: invalid option"}

	// ErrInvalidID is returned (wrapped, with the reason) by every parser and
	// decoder in this package for input that is not a valid ID.
	ErrInvalidID error = &invalidError{"idgen: invalid id"}
)

// invalidError is an invalid-argument error that also matches ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// ClockBackwardsError reports that the clock is Behind the time of the last ID
// issued (or the high-water mark) by more than the generator tolerates.
// errors.Is(err, ErrClockBackwards) holds for it.
type ClockBackwardsError struct {
	// Behind is how far the clock is behind the generator's last issued time.
	Behind time.Duration
	// Limit is what the generator tolerates (tolerance, borrow or logical lead).
	Limit time.Duration
}

func (e *ClockBackwardsError) Error() string {
	return fmt.Sprintf("idgen: clock moved backwards by %v (tolerated: %v)", e.Behind, e.Limit)
}

// Unwrap returns ErrClockBackwards.
func (e *ClockBackwardsError) Unwrap() error { return ErrClockBackwards }

func invalidID(kind, format string, args ...any) error {
	return fmt.Errorf("%w: %s: "+format, append([]any{ErrInvalidID, kind}, args...)...)
}
