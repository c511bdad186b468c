package redlock

import (
	"sync/atomic"
	"testing"
)

// TestOutcome: an undo registered by a late answer runs exactly when the
// round failed, whether the answer came before or after the result was
// known.
func TestOutcome(t *testing.T) {
	for _, failed := range []bool{false, true} {
		c := &Client{quit: make(chan struct{})}
		var ran atomic.Int32
		o := new(outcome)
		o.ifFailed(func() { ran.Add(1) }) // before the result
		o.set(c, failed)
		o.ifFailed(func() { ran.Add(1) }) // after it
		c.bg.Wait()
		want := int32(0)
		if failed {
			want = 2
		}
		if got := ran.Load(); got != want {
			t.Errorf("failed=%v: %d undos ran, want %d", failed, got, want)
		}
	}
}
