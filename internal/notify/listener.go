package notify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrClosed is returned by Listen after Close.
var ErrClosed = errors.New("notify: listener closed")

// subscribeTimeout bounds the wait for a subscription's confirmation, its
// write included, and each command's write (a variable for the tests).
var subscribeTimeout = 10 * time.Second

// Listener receives wake-up channels on the servers that publish to them.
// A script publishes a wake-up on the server that holds its key, so a
// channel is subscribed there: on a Redis Cluster, on the master of the
// key's slot (a PUBLISH reaches subscribers on other masters only over the
// cluster bus, whose outgoing connections lack TCP_NODELAY, which delays
// the message by up to 40 ms now and then: redis/redis#11869); on a Ring,
// on the key's shard (a Ring's shards forward no message at all). A client
// of one server subscribes there. The Listener keeps one Pub/Sub connection
// per server it was asked for, opened by that server's first Listen, until
// Close, or until it is dropped: a SUBSCRIBE that cannot be written, or
// that a Listen waited 10 s for in vain (a half-open connection, a server
// that stopped answering; go-redis's health check often repairs the
// connection first), or go-redis closing the server's client (a node that
// left the Cluster). Its channels then hear nothing until a Listen for a key
// there opens a new one; Subscribed reports false for them, and the
// callers listen again before their next wait.
//
// On a Cluster a message reaches every subscription of its channel (the
// bus forwards a PUBLISH to every node), so a channel subscribed on several
// masters may deliver one message more than once, the copies from other
// masters late: the callers tell their waiters apart by call id or key, and
// a late copy is handled like any late message. A key that moves to another
// server after its waiter listened is heard there only after a Listen for
// it on the new server (on a Cluster, still over the bus meanwhile).
//
// A subscription counts as confirmed when go-redis reads the server's
// confirmation. Two moments when it counts so although the server does not
// have it: after go-redis reconnected (the connection was killed, or
// half-open until a health check failed), until its own SUBSCRIBE on the
// new connection is read; and the mix-up that confirmed describes. A
// message published in such a moment is missed, as with any message lost
// with a connection, and the waiters call in on their timers.
type Listener struct {
	rdb     redis.UniversalClient
	deliver func(channel, payload string)

	wg      sync.WaitGroup // the dispatching goroutines, dropped servers' too
	mu      sync.Mutex
	servers map[string]*server // by address ("" for a client of one server)
	closed  bool
}

// server is the Pub/Sub connection to one server.
type server struct {
	addr string
	ps   *redis.PubSub
	done chan struct{} // closed when the dispatching goroutine ends
	ops  chan struct{} // wakes the writer (buffer of one)
	// ctx is the writer's, cancelled when the server is dropped, so that a
	// write under way (a dial to a dead server) lets go of the PubSub.
	ctx    context.Context
	cancel context.CancelFunc

	// mu protects the fields below. It is never held across a network
	// call: the writer goroutine writes the queued SUBSCRIBEs and
	// UNSUBSCRIBEs, in the order the counts changed.
	mu      sync.Mutex
	gone    bool                  // dropped: no Listen uses it any more
	chans   map[string]*chanState // the channels subscribed or being subscribed
	queue   []op                  // commands for the writer, in order
	changed chan struct{}         // closed and replaced when a subscription is confirmed or the server dropped
}

// op is a SUBSCRIBE (sub) or UNSUBSCRIBE of one channel.
type op struct {
	sub  bool
	name string
}

// push queues o for the writer. s.mu is held.
func (s *server) push(o op) {
	s.queue = append(s.queue, o)
	select {
	case s.ops <- struct{}{}:
	default:
	}
}

// signal wakes every Listen waiting on s. s.mu is held.
func (s *server) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// chanState counts one channel's listeners on a server.
type chanState struct {
	n  int  // Listen calls not yet matched by Unlisten
	ok bool // the SUBSCRIBE confirmed
}

// Sub is one Listen: Unlisten takes it back.
type Sub struct {
	s    *server
	c    *chanState
	name string
	done bool // Unlisten ran (under s.mu)
}

// errGone is a server dropped while Listen used it (its connection ended,
// a SUBSCRIBE failed to be written, or one was not confirmed in time):
// Listen tries once more on a new connection.
var errGone = errors.New("notify: the server's connection ended")

// NewListener returns a Listener on rdb's servers; deliver gets every
// message, from one goroutine per server.
func NewListener(rdb redis.UniversalClient, deliver func(channel, payload string)) *Listener {
	return &Listener{rdb: rdb, deliver: deliver, servers: map[string]*server{}}
}

// client returns the client of the server that holds key, and that
// server's address.
func (l *Listener) client(ctx context.Context, key string) (redis.UniversalClient, string, error) {
	switch c := l.rdb.(type) {
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, "", err
		}
		return n, n.Options().Addr, nil
	case *redis.Ring:
		n, err := c.GetShardClientForKey(key)
		if err != nil {
			return nil, "", err
		}
		return n, n.Options().Addr, nil
	}
	return l.rdb, "", nil
}

// server returns the server that holds key, opening its connection the
// first time (go-redis's receiving goroutine connects at once, and
// subscribes again to every channel after a reconnection), or nil if it is
// not open and open is false.
func (l *Listener) server(ctx context.Context, key string, open bool) (*server, error) {
	c, addr, err := l.client(ctx, key)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	s := l.servers[addr]
	if s != nil && s.isGone() { // dropped a moment ago: its drop is removing it
		delete(l.servers, addr)
		s = nil
	}
	if s != nil || !open {
		return s, nil
	}
	s = &server{addr: addr, ps: c.Subscribe(context.Background()), done: make(chan struct{}), ops: make(chan struct{}, 1),
		chans: map[string]*chanState{}, changed: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	l.servers[addr] = s
	msgs := s.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	l.wg.Add(2)
	go l.write(s)
	go func() { // owned by the Listener: Close closes ps, which ends msgs
		defer l.wg.Done()
		defer close(s.done)
		for m := range msgs {
			switch m := m.(type) {
			case *redis.Message:
				l.deliver(m.Channel, m.Payload)
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					s.confirmed(m.Channel)
				}
			}
		}
		// Closed by Close or drop, or by go-redis closing the server's
		// client.
		l.drop(s)
	}()
	return s, nil
}

// drop forgets s and closes its connection: the next Listen for a key
// there opens a new one.
func (l *Listener) drop(s *server) {
	s.mu.Lock()
	first := !s.gone
	if first {
		s.gone = true
		s.signal()
	}
	s.mu.Unlock()
	l.mu.Lock()
	if l.servers[s.addr] == s {
		delete(l.servers, s.addr)
	}
	l.mu.Unlock()
	if !first {
		return
	}
	s.cancel()
	// PubSub.Close waits for go-redis's own lock, which a reconnection
	// holds for seconds on a dead server: not on the caller's goroutine.
	// (The dispatcher is still counted in l.wg: it runs drop only after
	// its stream ended, and no one else has closed ps before the first
	// drop.)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		s.ps.Close()
	}()
}

// isGone reports whether s was dropped.
func (s *server) isGone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// write writes s's queued commands until s is dropped. A SUBSCRIBE that
// cannot be written drops s: its connection is broken, and the next Listen
// opens a new one. (An UNSUBSCRIBE that fails needs nothing: go-redis
// subscribes again, on a new connection, only to the channels it still
// has.)
func (l *Listener) write(s *server) {
	defer l.wg.Done()
	for {
		select {
		case <-s.ops:
		case <-s.done:
			return
		}
		for {
			s.mu.Lock()
			if s.gone || len(s.queue) == 0 {
				s.mu.Unlock()
				break
			}
			o := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			ctx, cancel := context.WithTimeout(s.ctx, subscribeTimeout)
			var err error
			if o.sub {
				err = s.ps.Subscribe(ctx, o.name)
			} else {
				err = s.ps.Unsubscribe(ctx, o.name)
			}
			cancel()
			if err != nil && o.sub {
				l.drop(s)
			}
		}
	}
}

// confirmed marks a channel's subscription confirmed (go-redis's own
// SUBSCRIBE after a reconnection counts too). One case takes a
// confirmation for a later SUBSCRIBE's: a Listen that gave up (its ctx
// ended) before its confirmation, then the UNSUBSCRIBE of its Unlisten and
// a new Listen's SUBSCRIBE, all before the first confirmation was read.
// The new Listen then returns a moment before its subscription holds, and
// a message published in that moment is missed: the waiters call in on
// their timers, as after any lost message. (Every caller's Listen that
// gave up unlistens; package lock's RW also unlistens after each wait.)
// Another: a channel's last Unlisten queues its UNSUBSCRIBE, go-redis
// reconnects before the writer sends it and subscribes to the channel
// again on its own, and a new Listen's entry takes that confirmation; the
// UNSUBSCRIBE and the new SUBSCRIBE follow, in that order, so the gap
// closes with them.
func (s *server) confirmed(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.chans[name]; c != nil && !c.ok {
		c.ok = true
		s.signal()
	}
}

// Subscribed reports whether channel is subscribed, and confirmed, on the
// server that holds key. It makes no network call unless a Cluster client
// has not yet loaded the cluster's slots.
func (l *Listener) Subscribed(ctx context.Context, key, channel string) bool {
	s, err := l.server(ctx, key, false)
	if err != nil || s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chans[channel]
	return !s.gone && c != nil && c.ok
}

// Listen subscribes channel on the server that holds key, if it is not
// yet, and returns once the server confirmed it: a message published there
// after Listen returns is heard (see Listener for the two exceptions). The
// channel stays subscribed on that server until every Sub that Listen
// returned for it there is unlistened, or the server is dropped. ctx bounds
// the wait (no network call is made on the caller's goroutine but the
// Cluster's slot lookup), and so does subscribeTimeout, after which the
// server is dropped and Listen fails (the next one opens a new
// connection). Listen tries once more, on a new connection, when the
// server was dropped for another reason while it waited.
func (l *Listener) Listen(ctx context.Context, key, channel string) (*Sub, error) {
	sub, err := l.listen(ctx, key, channel)
	if errors.Is(err, errGone) && ctx.Err() == nil {
		sub, err = l.listen(ctx, key, channel) // on a new connection
	}
	if err != nil {
		l.mu.Lock()
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
	}
	return sub, err
}

func (l *Listener) listen(ctx context.Context, key, name string) (*Sub, error) {
	s, err := l.server(ctx, key, true)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return nil, errGone
	}
	c := s.chans[name]
	if c == nil {
		c = &chanState{}
		s.chans[name] = c
		s.push(op{sub: true, name: name})
	}
	c.n++
	sub := &Sub{s: s, c: c, name: name}
	var timeout <-chan time.Time
	for !c.ok {
		if s.gone {
			s.mu.Unlock()
			sub.Unlisten()
			return nil, errGone
		}
		if timeout == nil {
			t := time.NewTimer(subscribeTimeout)
			defer t.Stop()
			timeout = t.C
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			sub.Unlisten()
			return nil, ctx.Err()
		case <-timeout:
			s.mu.Lock()
			ok, gone := c.ok && !s.gone, s.gone
			s.mu.Unlock()
			if ok {
				return sub, nil
			}
			if gone {
				sub.Unlisten()
				return nil, errGone
			}
			// Written and not confirmed in that time: a half-open
			// connection, or a server that stopped answering. Its other
			// channels hear nothing either; a new connection next time.
			l.drop(s)
			sub.Unlisten()
			return nil, fmt.Errorf("notify: subscription to %q not confirmed within %v", name, subscribeTimeout)
		}
		s.mu.Lock()
	}
	s.mu.Unlock()
	return sub, nil
}

// Relisten is Listen for a waiter already queued, before its next wait of
// at most d: if channel is not subscribed on key's server (its connection
// was dropped, or the key moved), it listens there, spending at most d,
// and returns the new Sub (nil if none was needed or it failed) and what
// is left of d, so that the waiter's call-in comes no later. A failure
// leaves the waiter to its call-in.
func (l *Listener) Relisten(ctx context.Context, key, channel string, d time.Duration) (*Sub, time.Duration) {
	if l.Subscribed(ctx, key, channel) {
		return nil, d
	}
	began := time.Now()
	lctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	sub, err := l.Listen(lctx, key, channel)
	if err != nil {
		sub = nil
	}
	return sub, max(0, d-time.Since(began))
}

// Unlisten takes back the Listen that returned sub; the last one of its
// channel on its server unsubscribes it. A second call does nothing.
func (sub *Sub) Unlisten() {
	s := sub.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub.done {
		return
	}
	sub.done = true
	c := sub.c
	if s.chans[sub.name] != c {
		return
	}
	if c.n--; c.n > 0 {
		return
	}
	delete(s.chans, sub.name)
	if !s.gone {
		s.push(op{name: sub.name})
	}
}

// Close closes every connection and waits for the dispatching goroutines.
// It is idempotent; Listen then returns ErrClosed.
func (l *Listener) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	servers := make([]*server, 0, len(l.servers))
	for _, s := range l.servers {
		servers = append(servers, s)
	}
	l.mu.Unlock()
	for _, s := range servers {
		l.drop(s)
	}
	l.wg.Wait()
}
