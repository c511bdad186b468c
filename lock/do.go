package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// releaseTimeout bounds Do's release, which runs even when ctx has ended.
const releaseTimeout = 5 * time.Second

// Do obtains key with l, runs fn, and releases the lease.
//
// fn's ctx carries the owner (a new random one unless ctx already has one),
// so Do or Obtain on the same key with that ctx re-enters instead of
// deadlocking. If the lease is lost while fn runs, fn's ctx is cancelled
// with a cause (see context.Cause) that matches ErrLockLost and the reason
// (LostCause: ErrClosed, ErrNotHeld, watchdog.ErrExpired, …), and Do
// returns that cause (joined with fn's error, if fn returned one other
// than the cancellation). Otherwise Do returns fn's error joined with the
// release's error; the release runs on a ctx detached from ctx's
// cancellation, bounded by a few seconds, so a cancelled ctx does not leave
// the lock held until its TTL. Obtain's errors are returned as they are.
func Do(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, opts ...Option) error {
	if l == nil {
		return fmt.Errorf("%w: Do: nil Locker", ErrInvalid)
	}
	if fn == nil {
		return fmt.Errorf("%w: Do: nil function", ErrInvalid)
	}
	ctx = ensureOwner(ctx)
	lease, err := l.Obtain(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned by Do: it ends when fn returns or the lease is lost
		defer wg.Done()
		select {
		case <-lease.Lost():
			cause := LostCause(lease)
			if !errors.Is(cause, ErrLockLost) {
				cause = ErrLockLost // a Lease of another module without a reason
			}
			cancel(cause)
		case <-done:
		}
	}()
	ferr := fn(fctx)
	close(done)
	wg.Wait()
	cause := context.Cause(fctx)
	lost := errors.Is(cause, ErrLockLost)
	cancel(nil)

	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	rerr := lease.Release(rctx)
	rcancel()
	if lost {
		if ferr != nil && !errors.Is(ferr, context.Canceled) && !errors.Is(ferr, ErrLockLost) {
			return errors.Join(cause, ferr)
		}
		return cause
	}
	return errors.Join(ferr, rerr)
}
