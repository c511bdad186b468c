package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
)

// TestHolderMeta: WithHolderMeta's metadata is stored with the hold on
// every master that took it, and goes when the hold is released; a client
// without it stores none; too large metadata is refused.
func TestHolderMeta(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c := newClient(t, nil, redlock.WithHolderMeta("service=pay host=h pid=7"))
	key := uniqueKey(t)
	hash := redlock.DefaultPrefix + "{" + key + "}"
	l := mustObtain(t, ctx, c, key)
	for i, s := range shared {
		// A quorum grants at once; a master that answers later takes the
		// hold, metadata included, then.
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			m, err := s.Client(t).HGet(ctx, hash, "\x00m").Result()
			if err == nil && m == "service=pay host=h pid=7" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("master %d: metadata %q, %v", i, m, err)
			}
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	plain := newClient(t, nil)
	l = mustObtain(t, ctx, plain, key)
	defer l.Release(ctx)
	for i, s := range shared {
		if n, err := s.Client(t).HExists(ctx, hash, "\x00m").Result(); err != nil || n {
			t.Fatalf("master %d: a client without metadata stored some (%v, %v)", i, n, err)
		}
	}

	_, err := redlock.New(dial(t, addrsOf(shared)...), redlock.WithHolderMeta(strings.Repeat("x", lock.MaxHolderMeta+1)))
	if !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("New with oversized metadata = %v", err)
	}
}
