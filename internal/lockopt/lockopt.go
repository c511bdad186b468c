// Package lockopt holds the resolved form of lock.Option, so that the
// packages of this module that take lock.Options (lock, redlock,
// semaphore) read a call's options without package lock exporting the
// struct the options write to.
//
// lock.Option is declared as func(*obtainOptions), where obtainOptions is an
// unexported alias of Obtain: a lock.Option is a func(*Obtain), and Apply
// resolves a slice of them. Package lockopt imports nothing of coordkit, so
// lock can import it without a cycle.
package lockopt

import "time"

// Obtain is the resolved form of one Obtain or TryObtain call's options.
type Obtain struct {
	// TTL is the lease's time to live between renewals; 0 means the
	// implementation's default, negative an invalid TTL (lock.WithTTL(d ≤
	// 0)). Ignored by locks that do not expire (zklock, whose holder lives
	// as long as its session).
	TTL time.Duration
	// DefaultTTL is set by the implementation when the call gave no TTL and
	// TTL holds its default: a re-entry then joins the hold as it is,
	// without raising the hold's TTL (only a TTL the caller chose does).
	DefaultTTL bool
	// MaxHold bounds how long the watchdog keeps renewing the lease; 0 means
	// for as long as it is held. After MaxHold the lease expires TTL later
	// unless released, and Lost() closes.
	MaxHold time.Duration
	// Retry, if not nil, replaces notification-driven waiting by fixed
	// delays: attempt n (from 1) waits Retry(n) before trying again.
	Retry func(attempt int) time.Duration
}

// Apply resolves opts, in order, into an Obtain; nil options are skipped.
// O is lock.Option.
func Apply[O ~func(*Obtain)](opts []O) Obtain {
	var o Obtain
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}
