package contract

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/lock"
)

// Closer is what every coordkit client offers besides Locker.
type Closer interface {
	lock.Locker
	Close() error
}

// Backend is one Locker implementation under the checks.
type Backend struct {
	Name string
	// Open returns a new client, closed when the test ends (Close may be
	// called before).
	Open func(t *testing.T) Closer
	// Reentrant: an owner that holds a key takes it again at once.
	Reentrant bool
	// TTL: the call's TTL options apply (and bad ones are refused).
	TTL bool
	// Lose takes key's hold away behind its holder's back; Reason is what
	// the lease's loss then matches.
	Lose   func(t *testing.T, c Closer, key string)
	Reason error
}

var keySeq atomic.Int64

// NewKey returns a key of the test's own, new at every call.
func NewKey(t *testing.T) string {
	return fmt.Sprintf("contract:%s:%d", strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()), keySeq.Add(1))
}

// CtxFor returns a ctx that ends after d, or when the test ends.
func CtxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Run runs every check of the contract against b, each as a subtest of t.
func Run(t *testing.T, b Backend) {
	t.Helper()
	checks := []struct {
		name string
		run  func(t *testing.T, b Backend)
	}{
		{"bad input", checkBadInput},
		{"held elsewhere", checkHeldElsewhere},
		{"release twice", checkReleaseTwice},
		{"re-entry", checkReentry},
		{"status while held", checkStatus},
		{"loss reason", checkLossReason},
		{"close", checkClose},
		{"holder", checkHolder},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.run(t, b) })
	}
}

func checkBadInput(t *testing.T, b Backend) {
	ctx := CtxFor(t, 10*time.Second)
	c := b.Open(t)
	for _, try := range []bool{false, true} {
		var err error
		if try {
			_, err = c.TryObtain(ctx, "")
		} else {
			_, err = c.Obtain(ctx, "")
		}
		if !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("empty key (try=%v): %v, want lock.ErrInvalid", try, err)
		}
	}
	if b.TTL {
		for _, d := range []time.Duration{0, -time.Second} {
			_, err := c.TryObtain(ctx, NewKey(t), lock.WithTTL(d))
			if !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("WithTTL(%v): %v, want lock.ErrInvalid", d, err)
			}
		}
	}
	if err := lock.Do(ctx, c, NewKey(t), nil); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Do with a nil function: %v, want lock.ErrInvalid", err)
	}
}

func checkHeldElsewhere(t *testing.T, b Backend) {
	ctx := CtxFor(t, 10*time.Second)
	key := NewKey(t)
	a, other := b.Open(t), b.Open(t)
	// A long lease where the backend takes one per lock: this checks
	// exclusion, not renewals on a starved host (a 900 ms lease-table row
	// expired under make test-stress, and other's Obtain rightly held).
	var opts []lock.Option
	if b.TTL {
		opts = append(opts, lock.WithTTL(10*time.Second))
	}
	l, err := a.Obtain(lock.WithOwner(ctx, "owner-a"), key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, err := other.TryObtain(lock.WithOwner(ctx, "owner-b"), key); !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("TryObtain of a key held by another owner: %v, want lock.ErrNotObtained", err)
	}
	wctx, cancel := context.WithTimeout(lock.WithOwner(ctx, "owner-b"), 200*time.Millisecond)
	defer cancel()
	if _, err := other.Obtain(wctx, key); !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Obtain until ctx's deadline: %v, want lock.ErrNotObtained and context.DeadlineExceeded", err)
	}
}

func checkReleaseTwice(t *testing.T, b Backend) {
	ctx := CtxFor(t, 10*time.Second)
	c := b.Open(t)
	l, err := c.Obtain(ctx, NewKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second Release: %v, want lock.ErrNotHeld", err)
	}
}

func checkReentry(t *testing.T, b Backend) {
	ctx := CtxFor(t, 10*time.Second)
	c := b.Open(t)
	key := NewKey(t)
	err := lock.Do(ctx, c, key, func(ctx context.Context) error {
		if !b.Reentrant {
			// Documented as not reentrant: the same owner is refused.
			if _, err := c.TryObtain(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
				return fmt.Errorf("TryObtain by the holder of a non-reentrant lock: %v, want lock.ErrNotObtained", err)
			}
			return nil
		}
		var outer int64
		return lock.Do(ctx, c, key, func(ctx context.Context) error {
			inner, err := c.TryObtain(ctx, key)
			if err != nil {
				return fmt.Errorf("re-entry by the holder: %w", err)
			}
			defer inner.Release(ctx)
			if outer = inner.Token(); outer == 0 {
				return errors.New("re-entry: zero token")
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func checkStatus(t *testing.T, b Backend) {
	ctx := CtxFor(t, 10*time.Second)
	c := b.Open(t)
	l, err := c.Obtain(ctx, NewKey(t))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	s, ok := l.(lock.LeaseStatus)
	if !ok {
		t.Fatalf("%T does not implement lock.LeaseStatus", l)
	}
	if err := s.Err(); err != nil || lock.LostCause(l) != nil {
		t.Errorf("Err of a held lease: %v", err)
	}
	if u := s.Until(); !u.After(time.Now()) {
		t.Errorf("Until of a held lease: %v, not in the future", u)
	}
}

func checkLossReason(t *testing.T, b Backend) {
	ctx := CtxFor(t, 20*time.Second)
	c := b.Open(t)
	key := NewKey(t)
	var cause error
	err := lock.Do(ctx, c, key, func(ctx context.Context) error {
		b.Lose(t, c, key)
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return ctx.Err()
		case <-time.After(15 * time.Second):
			return errors.New("the loss was not reported within 15 s")
		}
	})
	if !errors.Is(cause, lock.ErrLockLost) || !errors.Is(cause, b.Reason) {
		t.Errorf("cause of Do's ctx: %v, want lock.ErrLockLost and %v", cause, b.Reason)
	}
	if !errors.Is(err, lock.ErrLockLost) || !errors.Is(err, b.Reason) {
		t.Errorf("Do: %v, want lock.ErrLockLost and %v", err, b.Reason)
	}
}

func checkClose(t *testing.T, b Backend) {
	ctx := CtxFor(t, 10*time.Second)
	c := b.Open(t)
	key := NewKey(t)
	var cause error
	var held lock.Lease
	err := lock.Do(ctx, c, key, func(ctx context.Context) error {
		var err error
		if held, err = c.TryObtain(ctx, key+":2"); err != nil {
			return err
		}
		if err := c.Close(); err != nil {
			return fmt.Errorf("close: %w", err)
		}
		<-ctx.Done()
		cause = context.Cause(ctx)
		return nil
	})
	if !errors.Is(cause, lock.ErrLockLost) || !errors.Is(cause, lock.ErrClosed) {
		t.Errorf("cause of Do's ctx at Close: %v, want lock.ErrLockLost and lock.ErrClosed", cause)
	}
	if !errors.Is(err, lock.ErrLockLost) || !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Do at Close: %v, want lock.ErrLockLost and lock.ErrClosed", err)
	}
	if held != nil {
		if err := lock.LostCause(held); !errors.Is(err, lock.ErrClosed) {
			t.Errorf("LostCause of another lease at Close: %v, want lock.ErrClosed", err)
		}
		if u := held.(lock.LeaseStatus).Until(); !u.IsZero() {
			t.Errorf("Until of a lost lease: %v, want the zero Time", u)
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for _, try := range []bool{false, true} {
		var err error
		if try {
			_, err = c.TryObtain(ctx, NewKey(t))
		} else {
			_, err = c.Obtain(ctx, NewKey(t))
		}
		if !errors.Is(err, lock.ErrClosed) {
			t.Errorf("after Close (try=%v): %v, want lock.ErrClosed", try, err)
		}
	}
}

// holderOf is the Holder method of lock.Client, redlock.Client and
// zklock.Client (not lock.Simple, whose key holds a random value).
type holderOf interface {
	Holder(ctx context.Context, key string) (owner string, token int64, err error)
}

func checkHolder(t *testing.T, b Backend) {
	ctx := CtxFor(t, 10*time.Second)
	c := b.Open(t)
	h, ok := c.(holderOf)
	if !ok {
		if b.Name != "lock.Simple" {
			t.Fatalf("%s has no Holder method", b.Name)
		}
		return
	}
	key := NewKey(t)
	if owner, token, err := h.Holder(ctx, key); err != nil || owner != "" || token != 0 {
		t.Fatalf("Holder of a free key = %q, %d, %v", owner, token, err)
	}
	l, err := b.Open(t).Obtain(lock.WithOwner(ctx, "alice"), key)
	if err != nil {
		t.Fatal(err)
	}
	owner, token, err := h.Holder(ctx, key)
	if err != nil || owner != "alice" || token != l.Token() {
		t.Fatalf("Holder while alice holds = %q, %d, %v; want alice, %d", owner, token, err, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if owner, _, err := h.Holder(ctx, key); err != nil || owner != "" {
		t.Fatalf("Holder after the release = %q, %v", owner, err)
	}
	if _, _, err := h.Holder(ctx, ""); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("Holder of an empty key: %v, want lock.ErrInvalid", err)
	}
}
