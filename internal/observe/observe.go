// Package observe is what coordkit's clients report to: a logger and
// metrics hooks, shared so that every backend logs and counts the same
// events the same way. The public hook interfaces are lock.Metrics and
// idgen.Metrics; this package only calls them.
//
// What is logged: background failures and losses, never the hot path.
package observe

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/coordkit/coordkit/watchdog"
)

// LockMetrics is the method set of lock.Metrics that this package calls.
type LockMetrics interface {
	Waited(key string, wait time.Duration, err error)
	Held(key string, held time.Duration)
	Renewed(key string, err error)
	Lost(key string, cause error)
	Released(key string, err error)
}

// Lock reports a lock client's events. The zero Lock reports nothing.
type Lock struct {
	Log     *slog.Logger            // nil: log nothing
	Metrics LockMetrics             // nil: no hooks
	KeyFn   func(key string) string // the metrics label of a key; nil: ""
	Quiet   error                   // a loss cause logged at Info, not Warn (the client's ErrClosed)
}

// NewLock returns the Lock of a client's options: logger nil means
// slog.Default() (a logger with slog.DiscardHandler logs nothing); m nil
// means no hooks.
// Every record carries component (e.g. "coordkit/lock").
func NewLock(component string, logger *slog.Logger, m LockMetrics, keyFn func(string) string, quiet error) Lock {
	return Lock{Log: newLogger(component, logger), Metrics: m, KeyFn: keyFn, Quiet: quiet}
}

func newLogger(component string, l *slog.Logger) *slog.Logger {
	if l == nil {
		l = slog.Default()
	}
	return l.With("component", component)
}

// Key is the label the metrics hooks get for key: "" without a key function.
func (o *Lock) Key(key string) string {
	if o.KeyFn == nil {
		return ""
	}
	return o.KeyFn(key)
}

// Renewed logs a renewal that failed (the lease is not lost yet: the
// watchdog retries; a renewal that found the lease not held is logged as
// the loss it is) and reports every renewal to the metrics.
func (o *Lock) Renewed(key, owner string, token int64, err error) {
	if err != nil && o.Log != nil && !errors.Is(err, watchdog.ErrNotHeld) {
		o.Log.Warn("renewal failed", "key", key, "owner", owner, "token", token, "err", err)
	}
	if o.Metrics != nil {
		o.Metrics.Renewed(o.Key(key), err)
	}
}

// Lost logs and reports the loss of a lease: at Warn, or at Info when the
// cause is the client's Close.
func (o *Lock) Lost(key, owner string, token int64, cause error) {
	if o.Log != nil {
		level := slog.LevelWarn
		if o.Quiet != nil && errors.Is(cause, o.Quiet) {
			level = slog.LevelInfo
		}
		o.Log.Log(context.Background(), level, "lease lost", "key", key, "owner", owner, "token", token, "cause", cause)
	}
	if o.Metrics != nil {
		o.Metrics.Lost(o.Key(key), cause)
	}
}

// Discarded logs, at Debug, a hold that was never handed to a caller and
// ended: its acquisition's answer came after its TTL had run out, so the
// client released it and tried again. It is not a lease lost: no log at
// Warn, no Lost hook.
func (o *Lock) Discarded(key, owner string, token int64, cause error) {
	if o.Log != nil {
		o.Log.Debug("late grant discarded", "key", key, "owner", owner, "token", token, "cause", cause)
	}
}

// Waited reports one Obtain or TryObtain call.
func (o *Lock) Waited(key string, wait time.Duration, err error) {
	if o.Metrics != nil {
		o.Metrics.Waited(o.Key(key), wait, err)
	}
}

// Held reports how long a hold lasted.
func (o *Lock) Held(key string, held time.Duration) {
	if o.Metrics != nil {
		o.Metrics.Held(o.Key(key), held)
	}
}

// Released reports one Release call.
func (o *Lock) Released(key string, err error) {
	if o.Metrics != nil {
		o.Metrics.Released(o.Key(key), err)
	}
}

// Debug logs a background failure that the client survives (a clean-up
// that a TTL completes anyway).
func (o *Lock) Debug(msg string, args ...any) {
	if o.Log != nil {
		o.Log.Debug(msg, args...)
	}
}

// Info logs an event worth an operator's attention that is not a failure
// (a reconnection).
func (o *Lock) Info(msg string, args ...any) {
	if o.Log != nil {
		o.Log.Info(msg, args...)
	}
}

// Warn logs a background failure.
func (o *Lock) Warn(msg string, args ...any) {
	if o.Log != nil {
		o.Log.Warn(msg, args...)
	}
}

// IDMetrics is the method set of idgen.Metrics that this package calls.
type IDMetrics interface {
	Issued(tag string, n int)
	ClockBackwards(behind time.Duration, err error)
	SegmentFetched(tag string, size int64, took time.Duration, err error)
	SegmentWaited(tag string, wait time.Duration)
	LeaseLost(service string, worker int64, cause error)
}

// IDs reports an ID generator's or worker leaser's events. The zero IDs
// reports nothing.
type IDs struct {
	Log     *slog.Logger // nil: log nothing
	Metrics IDMetrics    // nil: no hooks

	lastWarn atomic.Int64 // Unix ns of the last rate-limited Warn
}

// NewIDs returns the IDs of a generator's options: logger nil means
// slog.Default(); every record carries component.
func NewIDs(component string, logger *slog.Logger, m IDMetrics) *IDs {
	return &IDs{Log: newLogger(component, logger), Metrics: m}
}

// WarnEvery logs at Warn, at most once per second: for failures that
// callers also see as errors, so that a burst of them costs one line.
func (o *IDs) WarnEvery(msg string, args ...any) {
	if o == nil || o.Log == nil {
		return
	}
	now := time.Now().UnixNano()
	last := o.lastWarn.Load()
	if now-last < int64(time.Second) || !o.lastWarn.CompareAndSwap(last, now) {
		return
	}
	o.Log.Warn(msg, args...)
}

// Warn logs a background failure.
func (o *IDs) Warn(msg string, args ...any) {
	if o != nil && o.Log != nil {
		o.Log.Warn(msg, args...)
	}
}

// Error logs a failure that stops a generator (a worker lease lost).
func (o *IDs) Error(msg string, args ...any) {
	if o != nil && o.Log != nil {
		o.Log.Error(msg, args...)
	}
}
