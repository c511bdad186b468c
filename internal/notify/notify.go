// Package notify receives the wake-up messages of Pub/Sub channels on the
// servers that publish them (Listener: on the server that holds each key)
// and delivers them to local waiters in the one format package lock and
// package semaphore share. A message names one waiter: "<id>" wakes it (try
// again), "<id>|<token>" tells it a release granted it the lock or a
// permit, with that fencing token.
package notify

import (
	"strconv"
	"strings"
	"sync"
)

// Deliver passes msg to the waiter it names, if find returns its channel
// (nil: it no longer waits): a wake-up as 0, a grant as its token. The
// channel has a buffer of one; a grant replaces a wake-up or an older
// grant waiting there, and a message that is not well formed is dropped
// (the waiter's next attempt finds out what it missed). find runs, and the
// channel is filled, under mu: on a Cluster the copies of one message
// arrive from several servers' goroutines at once, and two deliveries that
// interleaved could leave the older grant in the buffer.
func Deliver(msg string, mu sync.Locker, find func(id string) chan int64) {
	id, tok, granted := strings.Cut(msg, "|")
	var token int64
	if granted {
		t, err := strconv.ParseInt(tok, 10, 64)
		if err != nil || t <= 0 {
			return
		}
		token = t
	}
	mu.Lock()
	defer mu.Unlock()
	ch := find(id)
	if ch == nil {
		return
	}
	select {
	case ch <- token:
	default: // woken already; a grant replaces a plain wake-up or an older grant
		if token > 0 {
			select {
			case old := <-ch:
				// A late copy of an older grant (another master's, over
				// a Cluster's bus) must not push out a newer one.
				token = max(token, old)
			default:
			}
			select {
			case ch <- token:
			default:
			}
		}
	}
}
