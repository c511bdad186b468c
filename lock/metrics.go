package lock

import "time"

// Metrics receives a lock client's measurements. lock.Client, lock.Simple,
// redlock.Client and zklock.Client take the same hooks (their WithMetrics
// options), so one adapter serves every backend; the Prometheus adapter is
// the module github.com/coordkit/coordkit/contrib/coordprom.
//
// Implementations embed NopMetrics, so that hooks added in later versions
// do nothing until they are implemented (the interface cannot be satisfied
// otherwise). They must be safe for concurrent use and must not block.
//
// The key argument is "" unless the client was built with WithMetricsKey:
// lock names are unbounded (a lock per order ID), and a metrics label per
// key would grow without end. WithMetricsKey's function maps a key to the
// label to report, such as its part before the first ':'.
type Metrics interface {
	// Waited reports one Obtain or TryObtain call: how long it took and its
	// error (nil if the lease was obtained).
	Waited(key string, wait time.Duration, err error)
	// Held reports how long a hold lasted, from its first level's Obtain to
	// its outermost Release.
	Held(key string, held time.Duration)
	// Renewed reports one renewal by the watchdog and its error.
	Renewed(key string, err error)
	// Lost reports the loss of a lease and its cause (see LostCause).
	Lost(key string, cause error)
	// Released reports one Release call and its error (ErrNotHeld if the
	// lock was no longer held, or a server error).
	Released(key string, err error)

	nop()
}

// A hold whose acquisition was answered after its TTL had run out is never
// handed to the caller (Obtain releases it and tries again): its end calls
// no hook; only the Obtain call's Waited does, once.

// NopMetrics implements Metrics and does nothing. Embed it in an
// implementation of Metrics and override the hooks it needs.
type NopMetrics struct{}

func (NopMetrics) Waited(string, time.Duration, error) {}
func (NopMetrics) Held(string, time.Duration)          {}
func (NopMetrics) Renewed(string, error)               {}
func (NopMetrics) Lost(string, error)                  {}
func (NopMetrics) Released(string, error)              {}
func (NopMetrics) nop()                                {}
