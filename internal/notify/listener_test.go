package notify_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/notify"
	"github.com/coordkit/coordkit/internal/testserver"
)

// TestListenerOnCluster: Listen subscribes the channel on the master of
// the key's slot, once per master; a message published there arrives; a
// failed subscription is tried again; Close ends every connection, and
// Listen then fails.
func TestListenerOnCluster(t *testing.T) {
	cl := testserver.StartRedisCluster(t)
	rdb := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan string, 16)
	const ch = "notify-test"
	l := notify.NewListener(rdb, func(c, m string) {
		if c == ch {
			got <- m
		}
	})
	byNode := map[string]string{} // a key on each master
	for i := 0; len(byNode) < len(cl.Nodes()); i++ {
		k := "k" + strconv.Itoa(i)
		n, err := cl.NodeFor(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := byNode[n.Addr()]; !ok {
			byNode[n.Addr()] = k
		}
	}
	for _, n := range cl.Nodes() {
		k := byNode[n.Addr()]
		if l.Subscribed(ctx, k, ch) {
			t.Fatalf("subscribed on %s before Listen", n.Addr())
		}
		for range 2 { // the second is a no-op
			if err := l.Listen(ctx, k, ch); err != nil {
				t.Fatal(err)
			}
		}
		if !l.Subscribed(ctx, k, ch) {
			t.Fatalf("not subscribed on %s after Listen", n.Addr())
		}
		subs, err := n.Client(t).PubSubNumSub(ctx, ch).Result()
		if err != nil || subs[ch] != 1 {
			t.Fatalf("%s: %d subscriptions (%v), want 1", n.Addr(), subs[ch], err)
		}
	}
	// Every message published on any master reaches each of the three
	// subscriptions: the one on the publishing master directly, the others
	// over the cluster bus.
	n := cl.Nodes()[0]
	if err := n.Client(t).Publish(ctx, ch, "hello").Err(); err != nil {
		t.Fatal(err)
	}
	for range len(cl.Nodes()) {
		select {
		case m := <-got:
			if m != "hello" {
				t.Fatalf("got %q", m)
			}
		case <-ctx.Done():
			t.Fatal("a copy of the message did not arrive")
		}
	}
	l.Close()
	l.Close()
	if err := l.Listen(ctx, byNode[n.Addr()], ch); err != notify.ErrClosed {
		t.Fatalf("Listen after Close: %v", err)
	}
	for _, n := range cl.Nodes() {
		subs, err := n.Client(t).PubSubNumSub(ctx, ch).Result()
		if err != nil || subs[ch] != 0 {
			t.Fatalf("%s after Close: %d subscriptions (%v)", n.Addr(), subs[ch], err)
		}
	}
}

// TestListenerRetries: a subscription that failed (the server down) is
// forgotten, and the next Listen subscribes.
func TestListenerRetries(t *testing.T) {
	s := testserver.StartRedis(t)
	rdb := s.Client(t)
	l := notify.NewListener(rdb, func(string, string) {})
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.Kill()
	if err := l.Listen(ctx, "k", "c"); err == nil {
		t.Fatal("Listen with the server down succeeded")
	}
	if l.Subscribed(ctx, "k", "c") {
		t.Fatal("subscribed with the server down")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(ctx, "k", "c"); err != nil {
		t.Fatalf("Listen after the server came back: %v", err)
	}
	if !l.Subscribed(ctx, "k", "c") {
		t.Fatal("not subscribed after Listen returned nil")
	}
}

// TestListenerCounts: a channel stays subscribed while a Listen is not
// matched by an Unlisten; a Listen whose ctx ended leaves nothing behind;
// after Listen and Unlisten racing on one channel, a last Listen still
// hears the messages published after it returns.
func TestListenerCounts(t *testing.T) {
	s := testserver.StartRedis(t)
	rdb := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan string, 64)
	l := notify.NewListener(rdb, func(c, m string) { got <- c + "=" + m })
	defer l.Close()
	numsub := func(ch string, want int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			subs, err := rdb.PubSubNumSub(ctx, ch).Result()
			if err != nil {
				t.Fatal(err)
			}
			if subs[ch] == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d subscriptions, want %d", ch, subs[ch], want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for range 2 {
		if err := l.Listen(ctx, "k", "a"); err != nil {
			t.Fatal(err)
		}
	}
	numsub("a", 1)
	l.Unlisten("k", "a")
	numsub("a", 1)
	if !l.Subscribed(ctx, "k", "a") {
		t.Fatal("a: not subscribed with one Listen left")
	}
	l.Unlisten("k", "a")
	numsub("a", 0)
	if l.Subscribed(ctx, "k", "a") {
		t.Fatal("a: subscribed after the last Unlisten")
	}
	l.Unlisten("k", "a") // one too many: no-op

	ended, stop := context.WithCancel(ctx)
	stop()
	if err := l.Listen(ended, "k", "b"); err == nil {
		t.Fatal("Listen with an ended ctx succeeded")
	}
	numsub("b", 0)

	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if err := l.Listen(ctx, "k", "c"); err != nil {
					t.Error(err)
					return
				}
				l.Unlisten("k", "c")
			}
		}()
	}
	wg.Wait()
	numsub("c", 0)
	if err := l.Listen(ctx, "k", "c"); err != nil {
		t.Fatal(err)
	}
	numsub("c", 1)
	for len(got) > 0 {
		<-got
	}
	if err := rdb.Publish(ctx, "c", "hello").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "c=hello" {
			t.Fatalf("got %q", m)
		}
	case <-ctx.Done():
		t.Fatal("the message did not arrive")
	}
}
