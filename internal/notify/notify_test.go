package notify

import "testing"

func TestDeliver(t *testing.T) {
	ch := make(chan int64, 1)
	find := func(id string) chan int64 {
		if id == "c:1" {
			return ch
		}
		return nil
	}
	Deliver("c:1", find) // a wake-up
	if v := <-ch; v != 0 {
		t.Fatalf("wake-up delivered as %d", v)
	}
	Deliver("c:1", find)
	Deliver("c:1|42", find) // a grant replaces the wake-up waiting in the buffer
	if v := <-ch; v != 42 {
		t.Fatalf("grant after a wake-up delivered as %d", v)
	}
	Deliver("c:1|42", find)
	Deliver("c:1", find) // a wake-up does not replace a grant
	if v := <-ch; v != 42 {
		t.Fatalf("grant replaced by a wake-up: %d", v)
	}
	Deliver("c:1|42", find)
	Deliver("c:1|41", find) // a late copy of an older grant does not replace a newer one
	if v := <-ch; v != 42 {
		t.Fatalf("grant 42 replaced by an older one: %d", v)
	}
	Deliver("c:1|41", find)
	Deliver("c:1|42", find) // a newer grant replaces an older one
	if v := <-ch; v != 42 {
		t.Fatalf("grant 41 not replaced by 42: %d", v)
	}
	for _, bad := range []string{"c:1|", "c:1|x", "c:1|0", "c:1|-5"} {
		Deliver(bad, find)
		select {
		case v := <-ch:
			t.Fatalf("malformed %q delivered as %d", bad, v)
		default:
		}
	}
	Deliver("c:2|7", find) // no such waiter: dropped
	select {
	case v := <-ch:
		t.Fatalf("another waiter's message delivered as %d", v)
	default:
	}
}
