package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/lockopt"
	"github.com/coordkit/coordkit/internal/observe"
	"github.com/coordkit/coordkit/internal/redisfn"
	"github.com/coordkit/coordkit/internal/redisver"
	"github.com/coordkit/coordkit/watchdog"
)

var _ Locker = (*Simple)(nil)

// Simple is the classic single-key Redis lock: SET key value NX PX to take
// it, compare-and-delete to release it, compare-and-PEXPIRE (by the
// watchdog) to keep it. Each acquisition has a random value, so no one else
// can release it, and a fencing token from a counter beside the key.
//
// Simple is not reentrant: a second Obtain of a key its caller holds waits
// until ctx ends (and a nested Do deadlocks until then). Waiting polls the
// key (WithRetry, or by default every few milliseconds, never longer than
// the holder's remaining TTL); use Client for notified waiting, reentrancy
// and fairness. It is safe for concurrent use.
type Simple struct {
	ver redisver.Gate // the server's version, checked at the first obtain
	rdb redis.UniversalClient
	run *redisfn.Runner // FCALL or EVALSHA, chosen at the first call
	o   clientOptions
	obs observe.Lock
	err error

	mu     sync.Mutex // protects leases and closed
	leases map[*simpleLease]struct{}
	closed bool
}

// NewSimple returns a Simple lock on rdb, which it does not close. Options
// that apply: WithPrefix, WithDefaultTTL, WithReleaseWindow (how long a
// release's answer is kept for a resend), WithMetrics, WithMetricsKey,
// WithLogger, WithClock. Like New it returns a Simple even for invalid
// arguments: Err reports them at once, and every call returns that error
// (wrapping ErrInvalid).
func NewSimple(rdb redis.UniversalClient, opts ...ClientOption) *Simple {
	o := defaultClientOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	s := &Simple{rdb: rdb, run: redisfn.NewRunner(rdb, o.logger), o: o, leases: map[*simpleLease]struct{}{}}
	s.obs = observe.NewLock("coordkit/lock.Simple", o.logger, o.metrics, o.metricsKey, ErrClosed)
	s.err = checkClient(rdb, &o)
	if s.err == nil && o.meta != "" {
		s.err = fmt.Errorf("%w: WithHolderMeta: a Simple lock stores no holder metadata (its value is the holder's random token)", ErrInvalid)
	}
	return s
}

// Err returns the error NewSimple found in its arguments (wrapping
// ErrInvalid), or nil: check it after NewSimple to fail at start-up.
func (s *Simple) Err() error {
	if s == nil {
		return fmt.Errorf("%w: nil *lock.Simple", ErrInvalid)
	}
	return s.err
}

// simpleDelay is the default polling delay of attempt n.
func simpleDelay(n int) time.Duration {
	return min(time.Duration(n)*2*time.Millisecond, 50*time.Millisecond)
}

// Obtain takes key, polling while it is held, until ctx ends. Errors are
// Client.Obtain's.
func (s *Simple) Obtain(ctx context.Context, key string, opts ...Option) (Lease, error) {
	return s.obtain(ctx, key, true, opts)
}

// TryObtain makes one attempt and returns ErrNotObtained if key is held.
func (s *Simple) TryObtain(ctx context.Context, key string, opts ...Option) (Lease, error) {
	return s.obtain(ctx, key, false, opts)
}

func (s *Simple) obtain(ctx context.Context, key string, wait bool, opts []Option) (Lease, error) {
	o := lockopt.Apply(opts)
	if s == nil {
		return nil, fmt.Errorf("%w: nil *lock.Simple", ErrInvalid)
	}
	if s.err != nil {
		return nil, s.err
	}
	if err := checkObtain(key, &o, s.o.ttl); err != nil {
		return nil, err
	}
	if err := checkServer(ctx, &s.ver, s.rdb); err != nil {
		return nil, err
	}
	begin := s.o.now()
	l, err := s.obtainLoop(ctx, key, wait, o)
	s.obs.Waited(key, s.o.now().Sub(begin), err)
	if err != nil {
		return nil, serverErr(err)
	}
	return l, nil
}

func (s *Simple) obtainLoop(ctx context.Context, key string, wait bool, o obtainOptions) (*simpleLease, error) {
	k := s.o.prefix + "simple:{" + key + "}"
	keys := []string{k, k + ":fence"}
	value := NewOwner()
	retry := o.Retry
	if retry == nil {
		retry = simpleDelay
	}
	var timer *time.Timer
	late := 0 // answers in this call that came after the TTL (Client.obtainHeld)
	for attempt := 1; ; attempt++ {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		sent := s.o.now()
		res, err := s.run.Run(ctx, s.rdb, redisfn.SimpleObtain, keys, value, o.TTL.Milliseconds()).Int64Slice()
		if err != nil {
			if ctx.Err() != nil {
				return nil, errors.Join(ErrNotObtained, ctx.Err())
			}
			return nil, fmt.Errorf("lock: simple obtain %q: %w", key, err)
		}
		if len(res) == 2 && res[0] == 1 {
			l := s.newLease(key, k, value, res[1], o, sent)
			if l.wd.Held() {
				return l, nil
			}
			// The answer came after the lease's deadline (Client.obtainHeld):
			// give it back and try again as a new holder.
			_ = l.release(ctx) // not the caller's: no Released hook
			value = NewOwner()
			if late++; !wait || late == maxLate {
				return nil, fmt.Errorf("%w: %q: %d answers in a row came after the TTL %v had run out", ErrNotObtained, key, late, o.TTL)
			}
			continue
		}
		if !wait {
			return nil, ErrNotObtained
		}
		d := retry(attempt)
		if len(res) == 2 && res[1] > 0 {
			d = min(d, time.Duration(res[1])*time.Millisecond)
		}
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return nil, errors.Join(ErrNotObtained, ctx.Err())
		}
	}
}

type simpleLease struct {
	s        *Simple
	key      string
	rkey     string
	value    string
	token    int64
	since    time.Time
	wd       *watchdog.Watchdog
	released bool // protected by s.mu
	// late and confirmed: as hold's.
	late      bool
	confirmed atomic.Bool
}

func (s *Simple) newLease(key, rkey, value string, token int64, o obtainOptions, at time.Time) *simpleLease {
	l := &simpleLease{s: s, key: key, rkey: rkey, value: value, token: token, since: at}
	l.late = !s.o.now().Before(at.Add(o.TTL)) // see hold.late
	ttl := o.TTL.Milliseconds()
	wd, err := watchdog.Start(watchdog.Config{
		TTL:         o.TTL,
		MaxHold:     o.MaxHold,
		LastRenewed: at,
		Now:         s.o.now,
		Renew: func(ctx context.Context) error {
			n, err := s.run.Run(ctx, s.rdb, redisfn.SimpleRenew, []string{rkey}, value, ttl).Int64()
			switch {
			case err != nil:
				return fmt.Errorf("lock: simple renew %q: %w", key, err)
			case n == 0:
				return fmt.Errorf("%w: %w", ErrNotHeld, watchdog.ErrNotHeld)
			}
			l.confirmed.Store(true) // before the watchdog moves the deadline
			return nil
		},
		Observer: simpleEvents{l},
	})
	if err != nil { // o was validated against MinTTL: this is a bug
		panic(err)
	}
	l.wd = wd
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.leases[l] = struct{}{}
	}
	s.mu.Unlock()
	if closed {
		wd.Lose(ErrClosed)
	}
	return l
}

func (l *simpleLease) Key() string           { return l.key }
func (l *simpleLease) Token() int64          { return l.token }
func (l *simpleLease) Lost() <-chan struct{} { return l.wd.Lost() }

// Err returns nil while the lease is not known to be lost, then an error
// matching ErrLockLost that wraps the cause (see LeaseStatus).
func (l *simpleLease) Err() error { return lostErr(l.wd.Err()) }

// Until returns the time until which the lease is known to be held (see
// LeaseStatus), or the zero Time once it is lost.
func (l *simpleLease) Until() time.Time { return l.wd.Until() }

// simpleEvents logs and reports a lease's watchdog events (watchdog.Observer;
// one pointer, so it costs no allocation).
type simpleEvents struct{ l *simpleLease }

func (e simpleEvents) Renewed(err error) { e.l.s.obs.Renewed(e.l.key, e.l.value, e.l.token, err) }
func (e simpleEvents) Lost(cause error) {
	if e.l.late && !e.l.confirmed.Load() { // never handed out (see hold.late)
		e.l.s.obs.Discarded(e.l.key, e.l.value, e.l.token, cause)
		return
	}
	e.l.s.obs.Lost(e.l.key, e.l.value, e.l.token, lostErr(cause))
}

// Release deletes the key if it still holds this lease's value; otherwise
// (expired, taken over, released before) it returns ErrNotHeld. A release
// that Redis does not answer after the lease's deadline had passed reports
// the lease lost (see Client's Release).
func (l *simpleLease) Release(ctx context.Context) error {
	err := l.release(ctx)
	l.s.obs.Released(l.key, err)
	return err
}

func (l *simpleLease) release(ctx context.Context) error {
	s := l.s
	s.mu.Lock()
	done := l.released
	s.mu.Unlock()
	if done {
		return ErrNotHeld
	}
	expired := l.wd.Overdue()
	n, err := s.run.Run(ctx, s.rdb, redisfn.SimpleRelease, []string{l.rkey, l.rkey + ":r:" + l.value}, l.value, s.o.releaseWindow.Milliseconds()).Int64()
	if err != nil {
		return unanswered(l.wd, expired, l.key, fmt.Errorf("lock: simple release %q: %w", l.key, err))
	}
	s.mu.Lock()
	done = l.released
	l.released = true
	delete(s.leases, l)
	s.mu.Unlock()
	if done {
		return ErrNotHeld
	}
	if n == 0 { // lost before this release: Lost closes, as a renewal would have reported
		l.wd.Lose(errReleasedLost)
	}
	l.wd.Stop()
	if !l.late || l.confirmed.Load() { // a discarded lease was nobody's
		s.obs.Held(l.key, s.o.now().Sub(l.since))
	}
	if n == 0 {
		return ErrNotHeld
	}
	return nil
}

// Close stops renewing every lease (their Lost channels close with cause
// ErrClosed) and makes later calls fail with ErrClosed. It does not close
// the Redis client. It is idempotent.
func (s *Simple) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	s.closed = true
	leases := make([]*simpleLease, 0, len(s.leases))
	for l := range s.leases {
		leases = append(leases, l)
	}
	s.mu.Unlock()
	for _, l := range leases {
		l.wd.Lose(ErrClosed)
	}
	return nil
}
