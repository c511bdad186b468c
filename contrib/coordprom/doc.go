// Package coordprom records coordkit's metrics hooks in Prometheus metrics.
//
// It exports two adapters:
//
//   - LockMetrics (NewLockMetrics) implements lock.Metrics, for
//     lock.WithMetrics (lock.New, lock.NewSimple), redlock.WithMetrics,
//     zklock.WithMetrics and semaphore.WithMetrics (semaphore.New);
//   - IDMetrics (NewIDMetrics) implements idgen.Metrics, for
//     idgen.WithMetrics (Snowflake), redisid.WithMetrics (Segments) and
//     workerid.WithMetrics (NewRedis, NewZK).
//
// Each constructor registers its metrics on the prometheus.Registerer it is
// given and returns the registration's error (it never panics); serve them
// with promhttp.HandlerFor.
//
// # Lock metrics
//
// Every lock metric has the constant label backend, set by WithBackend, so
// that one process registers one LockMetrics per lock client ("redis",
// "redlock", "zookeeper", "semaphore", ...) on the same registry;
// registering a second LockMetrics with the same backend returns a
// prometheus.AlreadyRegisteredError.
//
//	coordkit_lock_obtain_seconds  histogram {backend, key, result}  Obtain and TryObtain calls
//	coordkit_lock_held_seconds    histogram {backend, key}          holds, first Obtain to last Release
//	coordkit_lock_renewals_total  counter   {backend, key, result}  watchdog renewals
//	coordkit_lock_lost_total      counter   {backend, key, reason}  leases lost
//	coordkit_lock_releases_total  counter   {backend, key, result}  Release calls
//
// The result of an Obtain is ok, not_obtained (held by another owner:
// lock.ErrNotObtained), canceled (ctx ended: context.Canceled or
// DeadlineExceeded, which a wait joins to ErrNotObtained) or error; of a
// renewal ok or error; of a Release ok, not_held (lock.ErrNotHeld) or error.
// The reason of a loss is the first its cause matches (errors.Is) of
// expired (watchdog.ErrExpired: renewals failed until the TTL ran out),
// max_hold (watchdog.ErrMaxHold), session_expired (zklock.ErrSessionExpired),
// not_held (lock.ErrNotHeld or watchdog.ErrNotHeld: the server no longer
// had it), closed (lock.ErrClosed: the client's Close), else other.
//
// The key label is "" unless the client was built with its WithMetricsKey
// option: lock names are unbounded (a lock per order), and a series per key
// would grow without end. Map keys to a bounded set of labels, such as their
// part before the first ':'.
//
// # ID metrics
//
//	coordkit_ids_issued_total            counter   {tag}          IDs handed out
//	coordkit_ids_clock_backwards_total   counter   {}             requests refused: clock behind
//	coordkit_ids_clock_backwards_seconds histogram {}             how far behind it was
//	coordkit_ids_segment_fetches_total   counter   {tag, result}  segments fetched (ok, error)
//	coordkit_ids_segment_fetch_seconds   histogram {tag}          their round trips, failed ones too
//	coordkit_ids_segment_reserved_total  counter   {tag}          IDs in the segments reserved
//	coordkit_ids_segment_waits_total     counter   {tag}          calls that waited for a segment
//	coordkit_ids_segment_wait_seconds    histogram {tag}          how long they waited
//	coordkit_worker_leases_lost_total    counter   {service}      worker-ID leases lost, not released
//
// A Snowflake's tag is "". The clock metrics count the calls refused because
// the clock was behind the last ID by more than the generator tolerates (a
// smaller step is waited out and not counted).
// Tags and services are the user's own bounded names.
//
// # Cost
//
// A hook call reads a copy-on-write map of the series it has seen (no lock,
// no allocation) and does an atomic update: Issued, called once per ID, is a
// map read and an atomic add. A series is created, under a mutex, the first
// time its label values appear. Histogram buckets are DefaultWaitBuckets
// (100 µs to 60 s) and DefaultHeldBuckets (1 ms to an hour) unless set by
// WithWaitBuckets and WithHeldBuckets.
//
// # Why a module of its own
//
// coordkit's library packages import no metrics library: users who import
// only them must not find github.com/prometheus/client_golang (and its
// dependencies) in their module graph. This package is therefore the module
// github.com/coordkit/coordkit/contrib/coordprom, which only those who want
// Prometheus metrics require.
package coordprom
