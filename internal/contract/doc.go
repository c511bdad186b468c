// Package contract holds no code: its tests run the same checks of the
// lock.Locker contract (errors, loss reasons, Close, validity, re-entry,
// bad input) against every backend: lock.Client, lock.Simple,
// redlock.Client and zklock.Client, on real servers.
package contract
