package coordprom

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/watchdog"
	"github.com/coordkit/coordkit/zklock"
)

var _ lock.Metrics = (*LockMetrics)(nil)

// LockMetrics implements lock.Metrics: it records a lock client's hooks in
// Prometheus metrics (see the package documentation for their names and
// labels). Pass it to lock.WithMetrics, redlock.WithMetrics,
// zklock.WithMetrics or semaphore.WithMetrics. Create it with
// NewLockMetrics (the zero value is not usable); its methods are safe for
// concurrent use and do not allocate once a series exists.
type LockMetrics struct {
	lock.NopMetrics

	obtain   *series[prometheus.Observer] // {key, result}
	held     *series[prometheus.Observer] // {key}
	renewals *series[prometheus.Counter]  // {key, result}
	lost     *series[prometheus.Counter]  // {key, reason}
	releases *series[prometheus.Counter]  // {key, result}
}

// NewLockMetrics creates the lock metrics, with the constant label backend
// set by WithBackend, and registers them on reg. It returns an error
// wrapping ErrInvalid for a nil reg or invalid buckets, and the error of
// reg.Register otherwise (a prometheus.AlreadyRegisteredError, for
// instance, when reg already has the lock metrics of the same backend);
// then nothing stays registered.
func NewLockMetrics(reg prometheus.Registerer, opts ...Option) (*LockMetrics, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	cl := prometheus.Labels{"backend": o.backend}
	obtain := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        "coordkit_lock_obtain_seconds",
		Help:        "Time spent in Obtain and TryObtain calls, by result (ok, not_obtained, canceled, error).",
		ConstLabels: cl,
		Buckets:     o.waitBuckets,
	}, []string{"key", "result"})
	held := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        "coordkit_lock_held_seconds",
		Help:        "How long locks were held, from the first level's Obtain to the outermost Release.",
		ConstLabels: cl,
		Buckets:     o.heldBuckets,
	}, []string{"key"})
	renewals := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "coordkit_lock_renewals_total",
		Help:        "Lease renewals by the watchdog, by result (ok, error).",
		ConstLabels: cl,
	}, []string{"key", "result"})
	lost := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "coordkit_lock_lost_total",
		Help:        "Leases lost, by reason (expired, not_held, max_hold, closed, session_expired, other).",
		ConstLabels: cl,
	}, []string{"key", "reason"})
	releases := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "coordkit_lock_releases_total",
		Help:        "Release calls, by result (ok, not_held, error).",
		ConstLabels: cl,
	}, []string{"key", "result"})
	if err := register(reg, obtain, held, renewals, lost, releases); err != nil {
		return nil, err
	}
	return &LockMetrics{
		obtain:   observers(obtain, true),
		held:     observers(held, false),
		renewals: counters(renewals, true),
		lost:     counters(lost, true),
		releases: counters(releases, true),
	}, nil
}

// Waited observes coordkit_lock_obtain_seconds{key, result}.
func (m *LockMetrics) Waited(key string, wait time.Duration, err error) {
	m.obtain.with(labels{key, obtainResult(err)}).Observe(wait.Seconds())
}

// Held observes coordkit_lock_held_seconds{key}.
func (m *LockMetrics) Held(key string, held time.Duration) {
	m.held.with(labels{key, ""}).Observe(held.Seconds())
}

// Renewed counts coordkit_lock_renewals_total{key, result}.
func (m *LockMetrics) Renewed(key string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.renewals.with(labels{key, result}).Inc()
}

// Lost counts coordkit_lock_lost_total{key, reason}.
func (m *LockMetrics) Lost(key string, cause error) {
	m.lost.with(labels{key, lostReason(cause)}).Inc()
}

// Released counts coordkit_lock_releases_total{key, result}.
func (m *LockMetrics) Released(key string, err error) {
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, lock.ErrNotHeld):
		result = "not_held"
	default:
		result = "error"
	}
	m.releases.with(labels{key, result}).Inc()
}

// obtainResult classifies an Obtain or TryObtain error. A wait that ctx
// ended matches both ErrNotObtained and ctx's error: it counts as canceled.
func obtainResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, lock.ErrNotObtained):
		return "not_obtained"
	}
	return "error"
}

// lostReason classifies the cause of a loss. ErrExpired wraps the last
// renewal's error, whatever it was, so it is looked for first.
func lostReason(cause error) string {
	switch {
	case errors.Is(cause, watchdog.ErrExpired):
		return "expired"
	case errors.Is(cause, watchdog.ErrMaxHold):
		return "max_hold"
	case errors.Is(cause, zklock.ErrSessionExpired):
		return "session_expired"
	case errors.Is(cause, lock.ErrNotHeld), errors.Is(cause, watchdog.ErrNotHeld):
		return "not_held"
	case errors.Is(cause, lock.ErrClosed):
		return "closed"
	}
	return "other"
}
