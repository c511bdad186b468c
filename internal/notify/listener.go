package notify

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrClosed is returned by Listen after Close.
var ErrClosed = errors.New("notify: listener closed")

// unsubscribeTimeout bounds an UNSUBSCRIBE's write.
const unsubscribeTimeout = time.Second

// Listener receives wake-up channels on the servers that publish to them.
// A script publishes a wake-up on the server that holds its key, so a
// channel is subscribed there: on a Redis Cluster, on the master of the
// key's slot (a PUBLISH reaches subscribers on other masters only over the
// cluster bus, whose outgoing connections lack TCP_NODELAY, which delays
// the message by up to 40 ms now and then: redis/redis#11869); on a Ring,
// on the key's shard (a Ring's shards forward no message at all). A client
// of one server subscribes there. The Listener keeps one Pub/Sub connection
// per server it was asked for, opened by that server's first Listen and
// kept until Close.
//
// On a Cluster a message reaches every subscription of its channel (the
// bus forwards a PUBLISH to every node), so a channel subscribed on several
// masters may deliver one message more than once, the copies from other
// masters late: the callers tell their waiters apart by call id or key, and
// a late copy is handled like any late message. A key that moves to another
// master after its waiter listened is still heard, over the bus, until the
// next Listen for it subscribes on its new master.
type Listener struct {
	rdb     redis.UniversalClient
	deliver func(channel, payload string)

	mu      sync.Mutex
	servers map[string]*server // by address ("" for a client of one server)
	closed  bool
}

// server is the Pub/Sub connection to one server.
type server struct {
	ps   *redis.PubSub
	done chan struct{} // closed when the dispatching goroutine ends

	mu      sync.Mutex            // protects the fields below; held while writing to ps
	chans   map[string]*chanState // the channels subscribed or being subscribed
	changed chan struct{}         // closed and replaced when a subscription is confirmed
}

// chanState counts one channel's listeners on a server.
type chanState struct {
	n  int  // Listen calls not yet matched by Unlisten
	ok bool // the SUBSCRIBE confirmed
}

// ErrEnded is returned by Listen when go-redis closed the server's client
// (a node that left a Cluster): the next Listen opens a new connection.
var ErrEnded = errors.New("notify: the server's connection ended")

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

// server returns the server that holds key, opening its connection's
// dispatcher the first time (the connection itself is made by the first
// SUBSCRIBE), or nil if it was never opened and open is false.
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
	if s != nil || !open {
		return s, nil
	}
	// Without channels the PubSub makes no connection until the first
	// SUBSCRIBE, which go-redis sends again after every reconnection.
	s = &server{ps: c.Subscribe(context.Background()), done: make(chan struct{}),
		chans: map[string]*chanState{}, changed: make(chan struct{})}
	l.servers[addr] = s
	msgs := s.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	go func() { // owned by the Listener: Close closes ps, which ends msgs
		defer close(s.done)
		defer func() { // and so does go-redis closing the server's client
			l.mu.Lock()
			if l.servers[addr] == s {
				delete(l.servers, addr)
			}
			l.mu.Unlock()
			s.ps.Close()
		}()
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
	}()
	return s, nil
}

// confirmed marks a channel's subscription confirmed. go-redis subscribes
// again to every channel on a new connection, and that confirmation counts
// too. One case takes a confirmation for a later SUBSCRIBE's: a Listen
// that gave up (its ctx ended) before its confirmation, then the
// UNSUBSCRIBE of its Unlisten and a new Listen's SUBSCRIBE, all before the
// first confirmation was read. The new Listen then returns a moment before
// its subscription holds, and a message published in that moment is missed:
// the waiters call in on their timers, as after any lost message. (Only
// package lock's RW unlistens; the other callers keep their channel.)
func (s *server) confirmed(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.chans[name]; c != nil && !c.ok {
		c.ok = true
		close(s.changed)
		s.changed = make(chan struct{})
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
	return c != nil && c.ok
}

// Listen subscribes channel on the server that holds key, if it is not
// yet, and returns once the server confirmed it: no message published
// there after Listen returns is missed. A channel stays subscribed on that
// server until Unlisten was called as often as Listen returned nil. ctx
// bounds the wait.
func (l *Listener) Listen(ctx context.Context, key, channel string) error {
	s, err := l.server(ctx, key, true)
	if err != nil {
		return err
	}
	s.mu.Lock()
	c := s.chans[channel]
	if c == nil {
		c = &chanState{}
		s.chans[channel] = c
		if err := s.ps.Subscribe(ctx, channel); err != nil {
			delete(s.chans, channel)
			// go-redis would subscribe it again on its next connection.
			uctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
			_ = s.ps.Unsubscribe(uctx, channel)
			cancel()
			s.mu.Unlock()
			return err
		}
	}
	c.n++
	for !c.ok {
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-s.done:
			l.unlisten(s, channel)
			l.mu.Lock()
			closed := l.closed
			l.mu.Unlock()
			if closed {
				return ErrClosed
			}
			return ErrEnded
		case <-ctx.Done():
			l.unlisten(s, channel)
			return ctx.Err()
		}
		s.mu.Lock()
	}
	s.mu.Unlock()
	return nil
}

// Unlisten takes back one Listen of channel for key; the last one
// unsubscribes it.
func (l *Listener) Unlisten(key, channel string) {
	s, err := l.server(context.Background(), key, false)
	if err != nil || s == nil {
		return
	}
	l.unlisten(s, channel)
}

func (l *Listener) unlisten(s *server, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chans[name]
	if c == nil {
		return
	}
	if c.n--; c.n > 0 {
		return
	}
	delete(s.chans, name)
	ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
	defer cancel()
	// Best effort: a channel left subscribed only delivers messages that
	// no waiter takes.
	_ = s.ps.Unsubscribe(ctx, name)
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
		s.ps.Close()
		<-s.done
	}
}
