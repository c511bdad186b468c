package lock

import "errors"

var (
	// ErrNotObtained is returned when the lock could not be obtained: held
	// by another owner (TryObtain), or ctx ended while waiting (then joined
	// with ctx.Err()).
	ErrNotObtained = errors.New("lock: not obtained")
	// ErrNotHeld is returned by Release when the lock was no longer held by
	// the lease's owner.
	ErrNotHeld = errors.New("lock: not held")
	// ErrLockLost is the cause with which Do cancels its function's ctx when
	// the lease is lost, and the error Do returns then.
	ErrLockLost = errors.New("lock: lease lost")
)
