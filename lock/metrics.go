package lock

import "time"

// Metrics receives the lock's measurements. Implementations must be safe for
// concurrent use and must not block; adapt it to Prometheus, OpenTelemetry
// or expvar in a few lines.
type Metrics interface {
	// Waited reports one Obtain or TryObtain call: how long it took and its
	// error (nil if the lease was obtained).
	Waited(key string, wait time.Duration, err error)
	// Held reports how long a hold lasted, from its first level's Obtain to
	// its outermost Release.
	Held(key string, held time.Duration)
	// Renewed reports one renewal by the watchdog and its error.
	Renewed(key string, err error)
	// Lost reports the loss of a lease and its cause.
	Lost(key string, cause error)
}

type noMetrics struct{}

func (noMetrics) Waited(string, time.Duration, error) {}
func (noMetrics) Held(string, time.Duration)          {}
func (noMetrics) Renewed(string, error)               {}
func (noMetrics) Lost(string, error)                  {}
