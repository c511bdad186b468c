package coordprom

import (
	"fmt"
	"math"
)

// Option configures NewLockMetrics or NewIDMetrics. Each option names the
// constructor that reads it; the other ignores it.
type Option func(*options)

type options struct {
	backend     string
	waitBuckets []float64
	heldBuckets []float64
}

// Default histogram buckets, in seconds.
var (
	// DefaultWaitBuckets are the buckets of coordkit_lock_obtain_seconds and
	// coordkit_ids_segment_wait_seconds: 100 µs (an uncontended Obtain on a
	// local Redis) to 60 s (a waiter behind a long hold).
	DefaultWaitBuckets = []float64{
		.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05,
		.1, .25, .5, 1, 2.5, 5, 10, 30, 60,
	}
	// DefaultHeldBuckets are the buckets of coordkit_lock_held_seconds: 1 ms
	// to an hour.
	DefaultHeldBuckets = []float64{
		.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600,
	}
	// fetchBuckets are the buckets of coordkit_ids_segment_fetch_seconds:
	// one round trip to Redis, 100 µs to 5 s (a fetch timeout).
	fetchBuckets = []float64{
		.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05,
		.1, .25, .5, 1, 2.5, 5,
	}
	// behindBuckets are the buckets of coordkit_ids_clock_backwards_seconds:
	// 1 ms (past the default tolerance of 5 ms lies the second bucket) to
	// about 4 minutes (a clock stepped back by hand).
	behindBuckets = []float64{.001, .004, .016, .064, .256, 1.024, 4.096, 16.384, 65.536, 262.144}
)

func newOptions(opts []Option) (options, error) {
	o := options{waitBuckets: DefaultWaitBuckets, heldBuckets: DefaultHeldBuckets}
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkBuckets(o.waitBuckets); err != nil {
		return o, fmt.Errorf("%w: wait buckets: %w", ErrInvalid, err)
	}
	if err := checkBuckets(o.heldBuckets); err != nil {
		return o, fmt.Errorf("%w: held buckets: %w", ErrInvalid, err)
	}
	return o, nil
}

// checkBuckets refuses what would make client_golang panic when it creates
// a histogram: buckets that are not strictly increasing (or are NaN).
func checkBuckets(b []float64) error {
	if len(b) == 0 {
		return fmt.Errorf("none")
	}
	for i, v := range b {
		if math.IsNaN(v) {
			return fmt.Errorf("NaN at index %d", i)
		}
		if i > 0 && v <= b[i-1] {
			return fmt.Errorf("not strictly increasing at index %d (%v after %v)", i, v, b[i-1])
		}
	}
	return nil
}

// WithBackend sets the value of the constant label backend on every metric
// of a LockMetrics (NewLockMetrics only), such as "redis", "redlock" or
// "zookeeper". One process registers one LockMetrics per lock client on the
// same Registerer, each with its own backend; registering two with the same
// backend fails. Default: "" (Prometheus treats an empty label as absent).
func WithBackend(name string) Option { return func(o *options) { o.backend = name } }

// WithWaitBuckets sets the histogram buckets, in seconds, of
// coordkit_lock_obtain_seconds (NewLockMetrics) and
// coordkit_ids_segment_wait_seconds (NewIDMetrics). They must be strictly
// increasing. Default: DefaultWaitBuckets (100 µs to 60 s).
func WithWaitBuckets(b []float64) Option {
	return func(o *options) { o.waitBuckets = append([]float64(nil), b...) }
}

// WithHeldBuckets sets the histogram buckets, in seconds, of
// coordkit_lock_held_seconds (NewLockMetrics). They must be strictly
// increasing. Default: DefaultHeldBuckets (1 ms to an hour).
func WithHeldBuckets(b []float64) Option {
	return func(o *options) { o.heldBuckets = append([]float64(nil), b...) }
}
