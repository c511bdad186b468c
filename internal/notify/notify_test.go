package notify

import (
	"strconv"
	"sync"
	"testing"
)

func TestDeliver(t *testing.T) {
	var mu sync.Mutex
	ch := make(chan int64, 1)
	find := func(id string) chan int64 {
		if id == "c:1" {
			return ch
		}
		return nil
	}
	Deliver("c:1", &mu, find) // a wake-up
	if v := <-ch; v != 0 {
		t.Fatalf("wake-up delivered as %d", v)
	}
	Deliver("c:1", &mu, find)
	Deliver("c:1|42", &mu, find) // a grant replaces the wake-up waiting in the buffer
	if v := <-ch; v != 42 {
		t.Fatalf("grant after a wake-up delivered as %d", v)
	}
	Deliver("c:1|42", &mu, find)
	Deliver("c:1", &mu, find) // a wake-up does not replace a grant
	if v := <-ch; v != 42 {
		t.Fatalf("grant replaced by a wake-up: %d", v)
	}
	Deliver("c:1|42", &mu, find)
	Deliver("c:1|41", &mu, find) // a late copy of an older grant does not replace a newer one
	if v := <-ch; v != 42 {
		t.Fatalf("grant 42 replaced by an older one: %d", v)
	}
	Deliver("c:1|41", &mu, find)
	Deliver("c:1|42", &mu, find) // a newer grant replaces an older one
	if v := <-ch; v != 42 {
		t.Fatalf("grant 41 not replaced by 42: %d", v)
	}
	for _, bad := range []string{"c:1|", "c:1|x", "c:1|0", "c:1|-5"} {
		Deliver(bad, &mu, find)
		select {
		case v := <-ch:
			t.Fatalf("malformed %q delivered as %d", bad, v)
		default:
		}
	}
	Deliver("c:2|7", &mu, find) // no such waiter: dropped
	select {
	case v := <-ch:
		t.Fatalf("another waiter's message delivered as %d", v)
	default:
	}
}

// TestDeliverConcurrent: the copies of grants that arrive from several
// servers' goroutines at once leave the newest grant in the buffer.
func TestDeliverConcurrent(t *testing.T) {
	var mu sync.Mutex
	for range 300 {
		ch := make(chan int64, 1)
		find := func(string) chan int64 { return ch }
		var wg sync.WaitGroup
		for i := 1; i <= 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				Deliver("c:1", &mu, find) // a wake-up in between
				Deliver("c:1|"+strconv.Itoa(i), &mu, find)
			}()
		}
		wg.Wait()
		if v := <-ch; v != 8 {
			t.Fatalf("after grants 1..8 the buffer holds %d", v)
		}
	}
}
