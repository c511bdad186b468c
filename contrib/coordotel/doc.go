// Package coordotel traces coordkit's locks with OpenTelemetry: Locker
// wraps any lock.Locker (lock.Client, lock.Simple, redlock.Client,
// zklock.Client, semaphore.Client, ...) so that every Obtain and TryObtain
// is a span ("coordkit.lock.obtain", its outcome and the fencing token),
// and every hold is a span ("coordkit.lock.hold") from the obtain to the
// Release, marked as an error with the loss's cause when the lease was
// lost before it was released. lock.Do with the wrapped Locker traces the
// whole critical section under the caller's span.
//
// It is a module of its own, so that OpenTelemetry stays out of the module
// graph of users who import only coordkit's library packages (as the
// Prometheus adapter, contrib/coordprom, does for client_golang).
//
// Attributes: coordkit.lock.key (the key: traces, unlike metrics, carry
// unbounded values well; WithoutKey leaves it out), coordkit.lock.backend
// (WithBackend), coordkit.lock.token, coordkit.lock.result (ok,
// not_obtained, canceled, error) and, on a hold, coordkit.lock.lost.
package coordotel
