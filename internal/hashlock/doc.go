// Package hashlock is the engine of the reentrant Redis hash lock that
// package lock's Client and package redlock both run: its Lua scripts (in
// lua/, one file each, composed with fence.lua and queue.lua), its key
// schema (LockKeys, WakePrefix, CheckKey), and Node, the protocol on one
// server without a client around it (acquire, release, hand-off, renew,
// leave), which redlock runs on every master.
//
// The data structure, the algorithm and their guarantees are specified in
// package lock's documentation (Redis key schema, Algorithm, Safety and
// liveness); this package is how they are carried out, and users never see
// it. lock.Client runs the scripts directly, with arguments it boxes once
// per client, and pipelines them; redlock runs them through Node.
//
// It imports nothing of coordkit's public packages, so lock can import it
// without a cycle: its defaults (DefaultPrefix, DefaultWaiterTimeout,
// DefaultReleaseWindow) restate lock's constants of the same names, and
// ErrInvalid is the value of lock.ErrInvalid.
package hashlock
