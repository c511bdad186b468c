package election

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coordkit/coordkit/lock"
)

var (
	// ErrResigned is a term's Err after Resign.
	ErrResigned = errors.New("election: resigned")
	// ErrNotObservable is returned by Leader and Observe when the locker
	// cannot tell who holds a key (lock.Simple; a Locker of another module
	// without a Holder method).
	ErrNotObservable = errors.New("election: the locker cannot tell who holds a key")
)

// ownerSep separates the campaigner's identity from the campaign's random
// suffix in the lock's owner string.
const ownerSep = "#"

// Holder is what a locker offers for Leader and Observe: lock.Client,
// redlock.Client, zklock.Client and sqllock.Client have it.
type Holder interface {
	Holder(ctx context.Context, key string) (owner string, token int64, err error)
}

// Callbacks are told of leadership changes by Run (as Kubernetes'
// leaderelection's callbacks). Each may be nil; none may block for long.
type Callbacks struct {
	// OnStartedLeading is called when this instance's term begins, before
	// Run's function starts.
	OnStartedLeading func(t *Term)
	// OnStoppedLeading is called when the term has ended (t.Err says why)
	// and the function has returned.
	OnStoppedLeading func(t *Term)
	// OnNewLeader is called when Run sees the leader change (its own terms
	// included), with the leader's identity, or "" when nobody leads. It
	// needs a locker with a Holder method; Run polls it every observe
	// period (WithObservePeriod).
	OnNewLeader func(identity string)
}

type options struct {
	identity string
	lockOpts []lock.Option
	retry    time.Duration
	observe  time.Duration
	cb       Callbacks
}

// Option configures an Election.
type Option func(*options)

// WithIdentity sets who this instance says it is (Leader returns it to the
// other instances). Default: "<hostname>:<pid>". It must not be empty or
// contain '#'.
func WithIdentity(id string) Option { return func(o *options) { o.identity = id } }

// WithTTL sets the TTL of each term's lease (lock.WithTTL): how long a
// leader that stops without resigning (a crash, a pause) keeps the others
// waiting. Default: the locker's default TTL (zklock: the session; etcdlock:
// the Client's lease, whatever d is).
func WithTTL(d time.Duration) Option {
	return func(o *options) { o.lockOpts = append(o.lockOpts, lock.WithTTL(d)) }
}

// WithRetryPeriod sets how long Run waits, with up to 25 % jitter, before
// it campaigns again after a campaign failed (an error, not a wait) or a
// term ended. Default: one second.
func WithRetryPeriod(d time.Duration) Option { return func(o *options) { o.retry = d } }

// WithObservePeriod sets how often Run and Observe ask the locker who
// leads. Default: one second.
func WithObservePeriod(d time.Duration) Option { return func(o *options) { o.observe = d } }

// WithCallbacks sets the callbacks Run calls.
func WithCallbacks(cb Callbacks) Option { return func(o *options) { o.cb = cb } }

// Election is one instance's part in the election of key's leader among
// every instance that campaigns for key on the same lock backend. It is
// safe for concurrent use.
type Election struct {
	l   lock.Locker
	key string
	o   options
}

// New returns this instance's part in the election of key on l. It does
// no I/O. It returns an error matching lock.ErrInvalid for a nil locker,
// an empty key or a bad option.
func New(l lock.Locker, key string, opts ...Option) (*Election, error) {
	host, _ := os.Hostname()
	o := options{identity: fmt.Sprintf("%s:%d", host, os.Getpid()), retry: time.Second, observe: time.Second}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	switch {
	case l == nil:
		return nil, fmt.Errorf("%w: election: nil locker", lock.ErrInvalid)
	case key == "":
		return nil, fmt.Errorf("%w: election: empty key", lock.ErrInvalid)
	case o.identity == "" || strings.Contains(o.identity, ownerSep):
		return nil, fmt.Errorf("%w: election: identity %q (empty, or with %q)", lock.ErrInvalid, o.identity, ownerSep)
	case o.retry <= 0 || o.observe <= 0:
		return nil, fmt.Errorf("%w: election: retry and observe periods must be positive", lock.ErrInvalid)
	}
	return &Election{l: l, key: key, o: o}, nil
}

// Identity returns this instance's identity.
func (e *Election) Identity() string { return e.o.identity }

// Campaign blocks until this instance leads, and returns its term; or
// until ctx ends (an error matching lock.ErrNotObtained and ctx's error),
// or the locker fails. A lock granted just as ctx ended is released
// (within 5 s, with ctx's values but not its end) and Campaign reports
// ctx's end: a campaign whose caller has gone leaves no term behind. Each
// term holds key's lock with an owner of its own (the identity and a
// random suffix), so two campaigns of one instance never re-enter each
// other's term.
func (e *Election) Campaign(ctx context.Context) (*Term, error) {
	var b [8]byte
	crand.Read(b[:])
	owner := e.o.identity + ownerSep + hex.EncodeToString(b[:])
	lease, err := e.l.Obtain(lock.WithOwner(ctx, owner), e.key, e.o.lockOpts...)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		// The lock was granted as ctx ended: the caller, told that ctx
		// ended, will not resign, so the lease is released here rather
		// than held (renewed, or for the ZooKeeper session's life) by
		// nobody.
		rctx, cancel := detached(ctx)
		lease.Release(rctx)
		cancel()
		return nil, errors.Join(lock.ErrNotObtained, ctx.Err())
	}
	t := &Term{lease: lease, identity: e.o.identity, since: time.Now(),
		done: make(chan struct{}), resign: make(chan struct{})}
	go t.watch() // owned by t: it ends when the lease is lost or the term resigned
	return t, nil
}

// Leader returns who leads now: the identity its campaign set and its
// term's fencing token, or "" and 0 when nobody does. It returns
// ErrNotObservable if the locker cannot tell.
func (e *Election) Leader(ctx context.Context) (identity string, token int64, err error) {
	h, ok := e.l.(Holder)
	if !ok {
		return "", 0, ErrNotObservable
	}
	owner, token, err := h.Holder(ctx, e.key)
	if err != nil || owner == "" {
		return "", 0, err
	}
	if i := strings.LastIndex(owner, ownerSep); i >= 0 {
		owner = owner[:i]
	}
	return owner, token, nil
}

// Observe sends the leader's identity ("" when nobody leads) once, then on
// every change it sees, asking every observe period, until ctx ends; then
// it closes the channel. A slow reader misses intermediate leaders, never
// the latest. It returns ErrNotObservable if the locker cannot tell.
func (e *Election) Observe(ctx context.Context) (<-chan string, error) {
	if _, ok := e.l.(Holder); !ok {
		return nil, ErrNotObservable
	}
	ch := make(chan string, 1)
	go func() { // owned by ctx: it ends when ctx does
		defer close(ch)
		e.observe(ctx, func(id string) {
			select { // keep only the latest
			case <-ch:
			default:
			}
			ch <- id
		})
	}()
	return ch, nil
}

// observe calls changed with the leader's identity on every change, every
// observe period, until ctx ends. A failed look is skipped.
func (e *Election) observe(ctx context.Context, changed func(string)) {
	t := time.NewTicker(e.o.observe)
	defer t.Stop()
	last, first := "", true
	for {
		id, _, err := e.Leader(ctx)
		if err == nil && (first || id != last) {
			first, last = false, id
			changed(id)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Run runs fn whenever this instance leads, until ctx ends: it campaigns,
// runs fn with a ctx that is cancelled when the term ends (its cause is
// the term's Err: the loss, matching lock.ErrLockLost and the reason), then
// resigns and campaigns again after the retry period, so the job goes on
// on whichever instance leads. fn returning nil, or because its term was
// lost, ends the term only; fn returning another error stops Run with that
// error (after resigning), and so does a campaign that fails with
// lock.ErrClosed or lock.ErrInvalid; other campaign errors (the server
// down) are retried. Run returns nil once ctx ends, after resigning the
// term it holds, even one won just as ctx ended: every resign on the way
// out uses a ctx of its own (ctx's values, bounded by 5 s), so that the
// next campaigner leads at once.
func (e *Election) Run(ctx context.Context, fn func(ctx context.Context, t *Term) error) error {
	if fn == nil {
		return fmt.Errorf("%w: election: nil function", lock.ErrInvalid)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	octx, stop := context.WithCancel(ctx)
	defer stop()
	if e.o.cb.OnNewLeader != nil {
		if _, ok := e.l.(Holder); ok {
			wg.Add(1)
			go func() { // owned by Run: it ends with octx
				defer wg.Done()
				e.observe(octx, e.o.cb.OnNewLeader)
			}()
		}
	}
	for {
		t, err := e.Campaign(ctx)
		switch {
		case ctx.Err() != nil:
			if t != nil { // won as ctx ended: every term won is resigned
				rctx, cancel := detached(ctx)
				t.Resign(rctx)
				cancel()
			}
			return nil
		case errors.Is(err, lock.ErrClosed), errors.Is(err, lock.ErrInvalid):
			return err // campaigning again would fail the same way
		}
		if err == nil {
			if err := e.lead(ctx, t, fn); err != nil {
				return err
			}
		}
		d := e.o.retry + time.Duration(rand.Int64N(int64(e.o.retry)/4+1))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
	}
}

// resignTimeout bounds a release made on the way out of Campaign or Run,
// after their ctx ended.
const resignTimeout = 5 * time.Second

// detached returns a ctx for such a release: ctx's values without its end,
// bounded by resignTimeout.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), resignTimeout)
}

// lead runs one term: fn under a ctx bound to the term, then the resign.
// It returns fn's error unless it is the term's own end or ctx's.
func (e *Election) lead(ctx context.Context, t *Term, fn func(context.Context, *Term) error) error {
	if e.o.cb.OnStartedLeading != nil {
		e.o.cb.OnStartedLeading(t)
	}
	tctx, cancel := context.WithCancelCause(ctx)
	go func() { // owned by lead: it ends when the term does (lead resigns it)
		<-t.Done()
		cancel(t.Err())
	}()
	ferr := fn(tctx, t)
	rctx, rcancel := detached(ctx)
	t.Resign(rctx)
	rcancel()
	cancel(nil)
	if e.o.cb.OnStoppedLeading != nil {
		e.o.cb.OnStoppedLeading(t)
	}
	if ferr == nil || ctx.Err() != nil || errors.Is(ferr, context.Canceled) || errors.Is(ferr, lock.ErrLockLost) {
		return nil
	}
	return ferr
}

// Term is one instance's time as leader: from its Campaign's return until
// Resign or the loss of its lease.
type Term struct {
	lease    lock.Lease
	identity string
	since    time.Time
	done     chan struct{} // closed when the term ends
	resign   chan struct{} // closed by Resign

	mu       sync.Mutex
	err      error // why the term ended; set before done is closed
	resigned bool
}

// watch ends the term when its lease is lost or it resigns.
func (t *Term) watch() {
	var err error
	select {
	case <-t.lease.Lost():
		if err = lock.LostCause(t.lease); !errors.Is(err, lock.ErrLockLost) {
			err = lock.ErrLockLost
		}
	case <-t.resign:
		err = ErrResigned
	}
	t.mu.Lock()
	t.err = err
	t.mu.Unlock()
	close(t.done)
}

// Token returns the term's fencing token: strictly larger than every
// earlier term's. Pass it with the leader's writes so that a deposed
// leader's late writes can be refused.
func (t *Term) Token() int64 { return t.lease.Token() }

// Identity returns the identity of the instance that leads in this term.
func (t *Term) Identity() string { return t.identity }

// Since returns when the term began (when Campaign obtained the lock).
func (t *Term) Since() time.Time { return t.since }

// Done returns a channel that is closed when the term ends: its lease was
// lost (another instance may lead now) or it resigned.
func (t *Term) Done() <-chan struct{} { return t.done }

// Err returns nil while the term lasts, then ErrResigned, or an error
// matching lock.ErrLockLost and the reason of the loss.
func (t *Term) Err() error {
	select {
	case <-t.done:
	default:
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Resign ends the term and releases the lock, so that another instance can
// lead at once. It returns the release's error (lock.ErrNotHeld if the term
// had been lost already); a second Resign returns ErrResigned.
func (t *Term) Resign(ctx context.Context) error {
	t.mu.Lock()
	again := t.resigned
	t.resigned = true
	t.mu.Unlock()
	if again {
		return ErrResigned
	}
	close(t.resign)
	<-t.done
	return t.lease.Release(ctx)
}
