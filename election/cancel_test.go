package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/election"
	"github.com/coordkit/coordkit/lock"
)

// cancelOnWin is a Locker whose Obtain cancels the caller's ctx the moment
// the inner Obtain returns: a SIGTERM handler that cancels as the lock is
// handed over.
type cancelOnWin struct {
	lock.Locker
	cancel context.CancelFunc
}

func (c cancelOnWin) Obtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	l, err := c.Locker.Obtain(ctx, key, opts...)
	c.cancel()
	return l, err
}

// leadsPromptly fails the test unless b leads key within 3 s (a term left
// behind would keep it waiting for the lock's TTL, 30 s, or for ever on
// zklock, whose node lives as long as the session), and unless Leader
// never names "a" once a is gone.
func leadsPromptly(t *testing.T, open func(t *testing.T) client, key string) {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	b := newElection(t, open(t), key, "b")
	if id, _, err := b.Leader(ctx); err != nil || id == "a" {
		t.Errorf("Leader after a's Run/Campaign returned = %q, %v; want anyone but a", id, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	tb, err := b.Campaign(cctx)
	if err != nil {
		t.Fatalf("b does not lead within 3 s of a's departure: %v", err)
	}
	if id, _, err := b.Leader(ctx); err != nil || id != "b" {
		t.Errorf("Leader = %q, %v; want b", id, err)
	}
	tb.Resign(ctx)
}

// TestRunCancelledAsWon: Run's ctx ends just after its campaign won (the
// locker's Obtain returned a lease, and ctx was cancelled as it did). Run
// returns nil, and the term it won is resigned: another instance leads at
// once, and Leader no longer names the departed one.
func TestRunCancelledAsWon(t *testing.T) {
	for _, b := range backends() {
		if b.name != "lock" && b.name != "zklock" {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			key := newKey(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			a := newElection(t, cancelOnWin{b.open(t), cancel}, key, "a")
			done := make(chan error, 1)
			go func() {
				done <- a.Run(ctx, func(context.Context, *election.Term) error { return nil })
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run = %v, want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return within 10 s of its ctx's end")
			}
			leadsPromptly(t, b.open, key)
		})
	}
}

// TestCampaignCancelledAsWon: Campaign's ctx ends as the locker hands it
// the lock. Campaign reports the ctx's end (lock.ErrNotObtained and
// context.Canceled), as its doc says, and releases the lease it got rather
// than leave it to nobody: another instance leads at once.
func TestCampaignCancelledAsWon(t *testing.T) {
	for _, b := range backends() {
		if b.name != "lock" && b.name != "zklock" {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			key := newKey(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			a := newElection(t, cancelOnWin{b.open(t), cancel}, key, "a")
			term, err := a.Campaign(ctx)
			if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
				t.Errorf("Campaign with ctx cancelled as it won = term %v, %v; want lock.ErrNotObtained and context.Canceled", term != nil, err)
			}
			leadsPromptly(t, b.open, key)
		})
	}
}
