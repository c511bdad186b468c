//go:build linux

package idgen

import (
	"runtime"
	"syscall"
	"time"
)

// nap sleeps about d. The last stretch (or all of a sleep under 2 ms) is a
// nanosleep(2), which wakes within about 0.1 ms where Go's timers round a
// sub-millisecond sleep up to about 1 ms. The goroutine's thread blocks in the
// system call; the runtime hands its P to other runnable goroutines meanwhile.
func nap(d time.Duration) {
	if d > 2*time.Millisecond {
		time.Sleep(d - time.Millisecond)
		return // the caller re-reads the clock and naps the rest
	}
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil) // EINTR: waking early only means one more loop
}

func yield() { runtime.Gosched() }
