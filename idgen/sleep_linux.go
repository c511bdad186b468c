//go:build linux

package idgen

import (
	"runtime"
	"syscall"
	"time"
)

// nap sleeps d with nanosleep(2), which wakes within about 100 µs, where Go's
// timers round a sub-millisecond sleep up to about 1 ms. The goroutine's
// thread blocks in the system call; the runtime hands its P to other
// goroutines meanwhile.
func nap(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil) // EINTR: waking early only means one more loop
}

func yield() { runtime.Gosched() }
