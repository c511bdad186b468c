package notify_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/notify"
	"github.com/coordkit/coordkit/internal/testserver"
)

// TestListenerOnCluster: Listen subscribes the channel on the master of
// the key's slot, once per master; a message published on one master
// reaches every subscription (the bus forwards it); Close ends every
// connection, and Listen then fails.
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
		for range 2 { // the second only counts
			if _, err := l.Listen(ctx, k, ch); err != nil {
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
	publishHeard(t, ctx, n.Client(t), got, ch, "hello", "hello", len(cl.Nodes()))
	l.Close()
	l.Close()
	if _, err := l.Listen(ctx, byNode[n.Addr()], ch); err != notify.ErrClosed {
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
	if _, err := l.Listen(ctx, "k", "c"); err == nil {
		t.Fatal("Listen with the server down succeeded")
	}
	if l.Subscribed(ctx, "k", "c") {
		t.Fatal("subscribed with the server down")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Listen(ctx, "k", "c"); err != nil {
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
	var subs []*notify.Sub
	for range 2 {
		sub, err := l.Listen(ctx, "k", "a")
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	numsub("a", 1)
	subs[0].Unlisten()
	subs[0].Unlisten() // a second time: nothing
	numsub("a", 1)
	if !l.Subscribed(ctx, "k", "a") {
		t.Fatal("a: not subscribed with one Listen left")
	}
	subs[1].Unlisten()
	numsub("a", 0)
	if l.Subscribed(ctx, "k", "a") {
		t.Fatal("a: subscribed after the last Unlisten")
	}

	ended, stop := context.WithCancel(ctx)
	stop()
	if _, err := l.Listen(ended, "k", "b"); err == nil {
		t.Fatal("Listen with an ended ctx succeeded")
	}
	numsub("b", 0)

	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				sub, err := l.Listen(ctx, "k", "c")
				if err != nil {
					t.Error(err)
					return
				}
				sub.Unlisten()
			}
		}()
	}
	wg.Wait()
	numsub("c", 0)
	if _, err := l.Listen(ctx, "k", "c"); err != nil {
		t.Fatal(err)
	}
	numsub("c", 1)
	for len(got) > 0 {
		<-got
	}
	publishHeard(t, ctx, rdb, got, "c", "hello", "c=hello", 1)
}

// publishHeard publishes msg on ch and checks that got then receives want
// copies times.
func publishHeard(t *testing.T, ctx context.Context, rdb redis.UniversalClient, got chan string, ch, msg, want string, copies int) {
	t.Helper()
	if err := rdb.Publish(ctx, ch, msg).Err(); err != nil {
		t.Fatal(err)
	}
	for range copies {
		select {
		case m := <-got:
			if m != want {
				t.Fatalf("got %q, want %q", m, want)
			}
		case <-ctx.Done():
			t.Fatalf("%s: a copy of the message did not arrive", ch)
		}
	}
}

// TestListenerUnconfirmed: a server that takes a SUBSCRIBE but never
// confirms it (paused: its connection open, nothing answered) makes Listen
// fail after the subscribe timeout, not wait for ctx; the connection is
// dropped, and once the server answers again a Listen subscribes on a new
// one. The channel subscribed before the pause is heard again too.
func TestListenerUnconfirmed(t *testing.T) {
	defer notify.SetSubscribeTimeout(300 * time.Millisecond)()
	s := testserver.StartRedis(t)
	rdb := s.Client(t)
	got := make(chan string, 16)
	l := notify.NewListener(rdb, func(c, m string) { got <- c + "=" + m })
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := l.Listen(ctx, "k", "x"); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err := l.Listen(ctx, "k", "y")
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err == nil {
		t.Fatal("Listen on a paused server succeeded")
	}
	if ctx.Err() != nil {
		t.Fatalf("Listen waited for ctx: %v after %v", err, time.Since(began))
	}
	t.Logf("Listen on the paused server: %v after %v", err, time.Since(began).Round(time.Millisecond))
	if l.Subscribed(ctx, "k", "x") {
		t.Fatal("x still counted as subscribed on the dropped connection")
	}
	for _, ch := range []string{"x", "y"} {
		if _, err := l.Listen(ctx, "k", ch); err != nil {
			t.Fatalf("Listen(%s) after the server came back: %v", ch, err)
		}
		publishHeard(t, ctx, rdb, got, ch, "hello", ch+"=hello", 1)
	}
}
