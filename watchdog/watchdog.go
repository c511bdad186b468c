package watchdog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrNotHeld is what a Renew function returns (or wraps) when the server
	// answers that the lease is no longer held; the lease is lost at once.
	ErrNotHeld = errors.New("watchdog: lease not held")
	// ErrExpired is the cause of a loss after renewals kept failing for a
	// whole TTL.
	ErrExpired = errors.New("watchdog: lease expired while renewals failed")
	// ErrMaxHold is the cause of a loss after MaxHold, when renewals stopped.
	ErrMaxHold = errors.New("watchdog: maximum hold time reached")
)

// errNoAnswer is the failure of a renewal that had not answered when the
// lease's deadline came.
var errNoAnswer = errors.New("watchdog: renewal not answered before the deadline")

// MinTTL is the smallest TTL Start accepts: shorter leases cannot be renewed
// reliably over a network.
const MinTTL = 10 * time.Millisecond

// Config describes one lease to keep alive.
type Config struct {
	// TTL is the time to live each successful renewal gives the lease
	// (Raise may lengthen it later). Required, at least MinTTL.
	TTL time.Duration
	// Interval is the time between renewals. Default: TTL/3.
	Interval time.Duration
	// Renew extends the lease by TTL. It returns nil on success and an error
	// matching ErrNotHeld when the lease is no longer held; any other error
	// is a failure that is retried. Required.
	Renew func(ctx context.Context) error
	// MaxHold stops renewals once it has passed since Start. Default: 0,
	// renew until Stop.
	MaxHold time.Duration
	// OnRenew, if set, is called after each renewal with its result (for
	// metrics). It must not block.
	OnRenew func(err error)
	// OnLost, if set, is called once with the cause when the lease is lost
	// (for metrics), before Lost closes. It must not block, nor call the
	// Watchdog's methods.
	OnLost func(cause error)
	// Observer, if set, is told of each renewal and of the loss, after
	// OnRenew and OnLost and under the same rules. A lease's own struct can
	// implement it, so that observing costs no closure per lease.
	Observer Observer
	// LastRenewed is when the lease was last extended before Start (e.g.
	// the start of the acquisition request). Default: Now() at Start.
	LastRenewed time.Time
	// FirstTTL, if positive and below TTL, is the time to live the lease had
	// at LastRenewed (a lease granted for less than it renews to): until
	// the first successful renewal the lease expires FirstTTL after
	// LastRenewed, and that renewal is due after Interval or FirstTTL/3,
	// whichever comes first. Default: TTL.
	FirstTTL time.Duration
	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

// Observer receives a watchdog's events (see Config.Observer).
type Observer interface {
	Renewed(err error)
	Lost(cause error)
}

// Watchdog renews one lease. Its methods are safe for concurrent use.
//
// No goroutine runs until the first renewal is due: a lease released within
// its first interval (most are) costs one timer, not a goroutine.
type Watchdog struct {
	cfg   Config
	start time.Time
	lost  chan struct{}
	// until is the lease's deadline (the last successful renewal's send
	// time, or LastRenewed, plus its TTL) in ns after start; Held reads it.
	until atomic.Int64
	// ttl is the TTL renewals give, in ns: Config.TTL, raised by Raise,
	// never lowered.
	ttl  atomic.Int64
	stop chan struct{} // made when the loop starts (under mu); closed to end it
	done chan struct{} // made when the loop starts (under mu); closed when it ends

	mu       sync.Mutex // protects err, timer, started, stopping
	err      error
	timer    *time.Timer // starts the loop when the first renewal is due
	started  bool
	stopping bool
}

// Start validates cfg and arms the renewal loop. The caller must end it
// with Stop or Lose.
func Start(cfg Config) (*Watchdog, error) {
	if cfg.Renew == nil {
		return nil, errors.New("watchdog: nil Renew function")
	}
	if cfg.TTL < MinTTL {
		return nil, fmt.Errorf("watchdog: TTL %v below the minimum %v", cfg.TTL, MinTTL)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = cfg.TTL / 3
	}
	if cfg.Interval >= cfg.TTL {
		return nil, fmt.Errorf("watchdog: interval %v not below the TTL %v", cfg.Interval, cfg.TTL)
	}
	if cfg.MaxHold < 0 {
		return nil, fmt.Errorf("watchdog: negative MaxHold %v", cfg.MaxHold)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.FirstTTL < 0 {
		return nil, fmt.Errorf("watchdog: negative FirstTTL %v", cfg.FirstTTL)
	}
	if cfg.FirstTTL == 0 || cfg.FirstTTL > cfg.TTL {
		cfg.FirstTTL = cfg.TTL
	}
	now := cfg.Now()
	if cfg.LastRenewed.IsZero() {
		cfg.LastRenewed = now
	}
	w := &Watchdog{cfg: cfg, start: now, lost: make(chan struct{})}
	w.until.Store(int64(cfg.LastRenewed.Add(cfg.FirstTTL).Sub(now)))
	w.ttl.Store(int64(cfg.TTL))
	w.mu.Lock()
	defer w.mu.Unlock()
	// The timer's goroutine runs the loop and is owned by w: Stop and Lose
	// either cancel the timer or wait for the loop.
	w.timer = time.AfterFunc(max(cfg.LastRenewed.Add(cfg.firstInterval()).Sub(now), 0), w.run)
	return w, nil
}

// firstInterval is when the first renewal is due after LastRenewed.
func (cfg *Config) firstInterval() time.Duration { return min(cfg.Interval, cfg.FirstTTL/3) }

func (w *Watchdog) run() {
	w.mu.Lock()
	if w.stopping {
		w.mu.Unlock()
		return
	}
	w.started = true
	// Made here, not in Start: most leases end before their first renewal.
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.loop(ctx, cancel)
}

// Held reports whether the lease's deadline (the send time of the last
// successful renewal, or LastRenewed, plus its TTL) is still ahead by
// Config.Now, and it has not been reported lost. Unlike Lost, it needs no
// goroutine of the watchdog to have run: a process that was stopped (SIGSTOP,
// a long GC pause) past the deadline sees false at once on resumption, while
// Lost closes only when the watchdog's goroutine gets to run. It is cheap
// (a clock reading and an atomic load) and safe for concurrent use.
func (w *Watchdog) Held() bool {
	select {
	case <-w.lost:
		return false
	default:
	}
	return int64(w.cfg.Now().Sub(w.start)) < w.until.Load()
}

// Overdue reports whether the lease's deadline (as Held judges it) has
// passed while the loss is not reported yet: the process was stopped or
// starved past it and the watchdog's goroutine has not run since. A
// release that begins overdue and gets no answer must report the lease
// lost (Lose), since another holder may have it by then. As cheap as Held.
func (w *Watchdog) Overdue() bool {
	select {
	case <-w.lost:
		return false
	default:
	}
	return int64(w.cfg.Now().Sub(w.start)) >= w.until.Load()
}

// Until returns the lease's deadline as Held judges it (the send time of
// the last successful renewal, or LastRenewed, plus its TTL, on
// Config.Now's clock), or the zero Time once the lease was reported lost.
func (w *Watchdog) Until() time.Time {
	select {
	case <-w.lost:
		return time.Time{}
	default:
	}
	return w.start.Add(time.Duration(w.until.Load()))
}

// TTL returns the TTL renewals give the lease: Config.TTL, or the longest
// TTL Raise was given since.
func (w *Watchdog) TTL() time.Duration { return time.Duration(w.ttl.Load()) }

// Raise makes ttl the TTL of the renewals that follow if it is longer than
// TTL (a TTL is never lowered: a lease whose parts ask for different TTLs,
// such as the levels of a reentrant hold, is renewed for the longest). If
// at is not zero, the lease was also extended by ttl at at (a request sent
// then, such as a re-entry, left the server's expiry no earlier than at +
// ttl): the deadline moves there if that is later. The Renew function must
// extend the lease by at least TTL as read when it runs (it may read it
// later than the loop, never earlier: TTL only grows). A lease reported
// lost stays lost. Safe for concurrent use.
func (w *Watchdog) Raise(ttl time.Duration, at time.Time) {
	for {
		cur := w.ttl.Load()
		if int64(ttl) <= cur || w.ttl.CompareAndSwap(cur, int64(ttl)) {
			break
		}
	}
	if !at.IsZero() {
		w.extend(int64(at.Add(ttl).Sub(w.start)))
	}
}

// extend moves until to u (ns after start) if that is later.
func (w *Watchdog) extend(u int64) {
	for {
		cur := w.until.Load()
		if u <= cur || w.until.CompareAndSwap(cur, u) {
			return
		}
	}
}

// Lost returns a channel that is closed when the lease is lost. Stop does
// not close it.
func (w *Watchdog) Lost() <-chan struct{} { return w.lost }

// Err returns the cause of the loss, or nil while the lease is not lost.
func (w *Watchdog) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Stop ends renewals without reporting loss and waits until the loop (and
// any renewal in flight) has returned. It is idempotent.
func (w *Watchdog) Stop() { w.end(nil) }

// Lose reports the lease lost with cause (unless it already was), ends
// renewals and waits like Stop.
func (w *Watchdog) Lose(cause error) {
	if cause == nil {
		cause = errors.New("watchdog: lease abandoned")
	}
	w.end(cause)
}

func (w *Watchdog) end(cause error) {
	w.mu.Lock()
	if cause != nil {
		w.loseLocked(cause)
	}
	if !w.stopping {
		w.stopping = true
		if w.started {
			close(w.stop)
		}
		w.timer.Stop()
	}
	started := w.started
	w.mu.Unlock()
	if started {
		<-w.done
	}
}

// lose records cause and closes lost, once.
func (w *Watchdog) lose(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.loseLocked(cause)
}

func (w *Watchdog) loseLocked(cause error) {
	if w.err == nil {
		w.err = cause
		if w.cfg.OnLost != nil { // first: whoever Lost wakes sees its effects
			w.cfg.OnLost(cause)
		}
		if w.cfg.Observer != nil {
			w.cfg.Observer.Lost(cause)
		}
		close(w.lost)
	}
}

func (w *Watchdog) loop(ctx context.Context, cancel context.CancelFunc) {
	defer close(w.done)

	cfg := w.cfg
	start := w.start
	interval := cfg.firstInterval()
	var lastErr error
	next := cfg.LastRenewed.Add(interval)

	type result struct {
		at  time.Time
		ttl time.Duration // the TTL the renewal gave (at least)
		err error
	}
	res := make(chan result, 1) // at most one renewal in flight
	inflight := false
	defer func() {
		if inflight { // the renewal in flight ends once its ctx is cancelled
			cancel()
			<-res
		}
	}()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := cfg.Now()
		// The deadline: the last successful renewal's send time plus its
		// TTL, or later if Raise extended the lease.
		deadline := start.Add(time.Duration(w.until.Load()))
		maxed := cfg.MaxHold > 0 && !now.Before(start.Add(cfg.MaxHold))
		if !now.Before(deadline) {
			if inflight && !maxed {
				// The renewal in flight did not answer by the deadline: a
				// failed renewal, reported as one (its answer, if it comes,
				// is dropped).
				lastErr = errNoAnswer
				if cfg.OnRenew != nil {
					cfg.OnRenew(lastErr)
				}
				if cfg.Observer != nil {
					cfg.Observer.Renewed(lastErr)
				}
			}
			switch {
			case maxed:
				w.lose(ErrMaxHold)
			case lastErr != nil:
				w.lose(fmt.Errorf("%w: %w", ErrExpired, lastErr))
			default:
				w.lose(ErrExpired)
			}
			return
		}
		if !inflight && !maxed && !now.Before(next) {
			inflight = true
			at, ttl := now, w.TTL() // read before Renew reads it: Renew gives at least ttl
			rctx, rcancel := context.WithTimeout(ctx, deadline.Sub(now))
			go func() { // owned by loop: it waits for res before returning
				defer rcancel()
				res <- result{at, ttl, cfg.Renew(rctx)}
			}()
		}
		wake := deadline
		if !inflight && !maxed && next.Before(wake) {
			wake = next
		}
		timer.Reset(max(wake.Sub(now), 0))
		select {
		case <-w.stop:
			return
		case r := <-res:
			inflight = false
			if cfg.OnRenew != nil {
				cfg.OnRenew(r.err)
			}
			if cfg.Observer != nil {
				cfg.Observer.Renewed(r.err)
			}
			switch {
			case r.err == nil:
				lastErr, interval = nil, cfg.Interval
				w.extend(int64(r.at.Add(r.ttl).Sub(start)))
				next = r.at.Add(interval)
			case errors.Is(r.err, ErrNotHeld):
				w.lose(r.err)
				return
			default:
				lastErr = r.err
				next = cfg.Now().Add(max(interval/3, time.Millisecond))
			}
		case <-timer.C:
		}
	}
}
