package coordprom

import "errors"

var (
	// ErrInvalid is wrapped by the errors NewLockMetrics and NewIDMetrics
	// return for invalid arguments: a nil Registerer, histogram buckets that
	// are not strictly increasing.
	ErrInvalid = errors.New("coordprom: invalid argument")
)
