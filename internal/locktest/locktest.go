// Package locktest holds test helpers that exercise any lock.Locker the
// same way, for the tests of every backend.
package locktest

import (
	"context"
	"testing"
	"time"

	"github.com/coordkit/coordkit/lock"
)

// Cycles obtains and releases key n times with l, failing the test unless
// every token is larger than the one before, and returns the last token.
func Cycles(t testing.TB, l lock.Locker, key string, n int) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last int64
	for range n {
		le, err := l.Obtain(ctx, key)
		if err != nil {
			t.Fatalf("Obtain(%q): %v", key, err)
		}
		if le.Token() <= last {
			t.Fatalf("token %d after %d: not increasing", le.Token(), last)
		}
		last = le.Token()
		if err := le.Release(ctx); err != nil {
			t.Fatalf("Release(%q): %v", key, err)
		}
	}
	return last
}
