//go:build !linux

package idgen

import (
	"runtime"
	"time"
)

// nap sleeps d. Go's timers may round a short sleep up to the system timer's
// resolution, so sleeps shorter than 2 ms yield instead.
func nap(d time.Duration) {
	if d >= 2*time.Millisecond {
		time.Sleep(d - time.Millisecond)
		return
	}
	runtime.Gosched()
}

func yield() { runtime.Gosched() }
