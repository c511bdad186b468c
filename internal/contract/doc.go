// Package contract runs the same checks of the lock.Locker contract
// (errors, loss reasons, Close, validity, re-entry, bad input, Holder)
// against every backend, on real servers: Run runs them against one
// Backend, and RunRW runs the read-write lock's (lock.RWLocker) against one
// RWBackend. Its own tests run them against lock.Client, lock.Simple,
// redlock.Client, zklock.Client and sqllock's lockers (RunRW: lock.RW and
// zklock.Client); the etcd module's etcdlock tests run both against
// etcdlock.Client (internal/ is importable from the modules under
// github.com/coordkit/coordkit/).
package contract
