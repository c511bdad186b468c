package redlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/observe"
	"github.com/coordkit/coordkit/internal/pipe"
	"github.com/coordkit/coordkit/internal/redisfn"
	"github.com/coordkit/coordkit/internal/redisver"
	"github.com/coordkit/coordkit/lock"
)

var _ lock.Locker = (*Client)(nil)

const lockMinTTL = lock.MinTTL

// subscribeWait bounds how long the first wait of a Client waits for its
// subscriptions to be confirmed; a master that has not confirmed by then
// is still subscribed in the background (go-redis reconnects), and its
// wake-ups may be missed until it is.
const subscribeWait = 250 * time.Millisecond

// Client is a Redlock over N independent Redis masters (see the package
// documentation). It is safe for concurrent use. The zero value is not
// usable: call New.
type Client struct {
	vers        []redisver.Gate // per master: its version, checked at the first obtain
	versChecked atomic.Bool     // every master's version checked and passed
	masters     []redis.UniversalClient
	pipes       []*pipe.Pipeliner // per master: acquisitions and releases, pipelined under load
	runs        []*redisfn.Runner // per master: FCALL or EVALSHA, chosen at its first call
	addrs       []string
	quorum      int
	node        hashlock.Node
	o           options
	obs         observe.Lock // logger and metrics hooks
	id          string       // this client's id: its waiters are "<id>:<n>"
	quit        chan struct{}
	stopSub     context.CancelFunc // cancels the subscriptions' set-up
	subCtx      context.Context    // the lifetime ctx of the subscriptions (background work)

	lines lines // local lines per key

	bg sync.WaitGroup // round trips still running after their round was decided; Add under mu while not closed

	mu      sync.Mutex // protects the fields below, every hold's levels and every lease's released
	seq     uint64
	holds   map[holdKey]*hold
	waiters map[string]chan struct{}
	subs    []*subscription // nil until the first wait; one per master
	closed  bool
}

// subscription is the Client's Pub/Sub connection to one master, subscribed
// to the Client's wake-up channel there.
type subscription struct {
	ready chan struct{} // closed once confirmed or failed (err)
	err   error         // written before ready is closed
	ps    *redis.PubSub // set before ready is closed, nil if closed meanwhile
	done  chan struct{} // closed when the forwarding goroutine ends
}

// New returns a Client that locks keys on a quorum of masters, which it
// does not close. Every master must be an independent Redis server (not a
// replica of another, not the same server twice).
//
// The masters' clients are the ones users build anyway (redis.NewClient
// with an address; Masters turns a []*redis.Client into the slice New
// takes). Every round enforces the per-node timeout itself: it stops
// waiting for a master when the timeout passes, counts it as failed, and
// gives back what that master took if its answer comes after a round that
// failed. ContextTimeoutEnabled in a master's options is recommended, not
// required: with it go-redis also abandons the silent master's socket read
// at the timeout, which frees the connection (and lets Close return)
// sooner; without it that call ends at the client's read timeout (3 s by
// default), and Close waits for it.
//
// Errors match ErrInvalid (and lock.ErrInvalid): no masters, a nil master,
// the same master twice (same client or same address), an even number of
// masters without WithEvenMasters, an invalid option.
func New(masters []redis.UniversalClient, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	node, err := hashlock.NewNode(o.prefix)
	if err != nil {
		return nil, invalid("key prefix %q contains a brace", o.prefix)
	}
	n := len(masters)
	switch {
	case n == 0:
		return nil, invalid("no masters")
	case n%2 == 0 && !o.evenMasters:
		return nil, invalid("%d masters: an even number needs WithEvenMasters", n)
	}
	addrs := make([]string, n)
	seen := map[string]int{}
	for i, m := range masters {
		if m == nil || reflect.ValueOf(m).Kind() == reflect.Pointer && reflect.ValueOf(m).IsNil() {
			return nil, invalid("master %d is nil", i)
		}
		for j := range i {
			if masters[j] == m {
				return nil, invalid("master %d is master %d again", i, j)
			}
		}
		addr, ok := describe(m)
		if !ok { // another UniversalClient: its address cannot be compared
			addrs[i] = fmt.Sprintf("%T", m)
			continue
		}
		if j, dup := seen[addr]; dup {
			return nil, invalid("master %d (%s) has the address of master %d", i, addr, j)
		}
		seen[addr] = i
		addrs[i] = addr
	}
	subCtx, stop := context.WithCancel(context.Background())
	pipes := make([]*pipe.Pipeliner, n)
	runs := make([]*redisfn.Runner, n)
	for i, m := range masters {
		pipes[i] = pipe.New(m, o.inFlight)
		runs[i] = redisfn.NewRunner(m, o.logger)
	}
	return &Client{
		vers:    make([]redisver.Gate, len(masters)),
		masters: slices.Clone(masters),
		pipes:   pipes,
		runs:    runs,
		addrs:   addrs,
		quorum:  n/2 + 1,
		node:    node,
		o:       o,
		obs:     observe.NewLock("coordkit/redlock", o.logger, o.metrics, o.metricsKey, lock.ErrClosed),
		id:      strings.ReplaceAll(uuid.NewString(), "-", ""),
		quit:    make(chan struct{}),
		stopSub: stop,
		subCtx:  subCtx,
		holds:   map[holdKey]*hold{},
		waiters: map[string]chan struct{}{},
	}, nil
}

// describe returns a master's address (sorted and joined for several); ok
// is false for a type it cannot inspect.
func describe(m redis.UniversalClient) (addr string, ok bool) {
	switch c := m.(type) {
	case *redis.Client:
		return c.Options().Addr, true
	case *redis.ClusterClient:
		a := slices.Sorted(slices.Values(c.Options().Addrs))
		return "cluster " + strings.Join(a, ","), true
	case *redis.Ring:
		var a []string
		for _, v := range c.Options().Addrs {
			a = append(a, v)
		}
		slices.Sort(a)
		return "ring " + strings.Join(a, ","), true
	}
	return "", false
}

// Masters returns clients as the slice New takes, for a slice of a
// concrete client type:
//
//	clients := []*redis.Client{redis.NewClient(&redis.Options{Addr: "10.0.0.1:6379"}), ...}
//	c, err := redlock.New(redlock.Masters(clients...))
func Masters[C redis.UniversalClient](clients ...C) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(clients))
	for i, m := range clients {
		out[i] = m
	}
	return out
}

// N returns the number of masters.
func (c *Client) N() int { return len(c.masters) }

// Quorum returns the number of masters an acquisition or renewal needs:
// N/2+1.
func (c *Client) Quorum() int { return c.quorum }

// Close stops the client: it closes the Pub/Sub connections and waits for
// their goroutines and for the round trips still running, wakes every waiting Obtain (which returns
// lock.ErrClosed), and stops renewing held leases, whose Lost channels close
// with cause lock.ErrClosed; the locks expire after their TTL unless
// released. Close does not close the masters' clients. It is idempotent.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.quit)
	subs := c.subs
	holds := make([]*hold, 0, len(c.holds))
	for _, h := range c.holds {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	c.stopSub()
	for _, s := range subs {
		<-s.ready
		if s.ps != nil {
			s.ps.Close()
		}
		<-s.done
	}
	for _, h := range holds {
		h.wd.Lose(lock.ErrClosed)
	}
	c.bg.Wait()
	for _, p := range c.pipes {
		p.Close() // their answers' callbacks, which may hand a call to its Runner
	}
	for _, r := range c.runs {
		r.Close() // a load, or such a call, in the background
	}
	return nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *Client) nextSeq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return c.seq
}

func (c *Client) addWaiter() (string, chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", nil, lock.ErrClosed
	}
	c.seq++
	id := c.node.WaiterID(c.id, c.seq)
	ch := make(chan struct{}, 1)
	c.waiters[id] = ch
	return id, ch, nil
}

func (c *Client) removeWaiter(id string) {
	c.mu.Lock()
	delete(c.waiters, id)
	c.mu.Unlock()
}

// wake delivers a wake-up to the local waiter it names, if it still waits.
func (c *Client) wake(id string) {
	c.mu.Lock()
	ch := c.waiters[id]
	c.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default: // already woken
		}
	}
}

// subscribe makes sure the client has one Pub/Sub connection per master,
// subscribed to its wake-up channel, before any of its waiters is queued.
// It waits until every master confirmed or failed, at most subscribeWait
// (or ctx); a master that failed is subscribed again in the background by
// go-redis, and until then its wake-ups are missed (each wait is bounded).
func (c *Client) subscribe(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return lock.ErrClosed
	}
	subs := c.subs
	if subs == nil {
		subs = make([]*subscription, len(c.masters))
		for i := range subs {
			subs[i] = &subscription{ready: make(chan struct{}), done: make(chan struct{})}
		}
		c.subs = subs
		for i, s := range subs {
			go c.runSubscription(i, s) // owned by c: Close ends it and waits for done
		}
	}
	c.mu.Unlock()
	timer := time.NewTimer(subscribeWait)
	defer timer.Stop()
	for _, s := range subs {
		select {
		case <-s.ready:
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return errors.Join(lock.ErrNotObtained, ctx.Err())
		}
	}
	return nil
}

// runSubscription subscribes to the client's channel on master i, waits for
// the confirmation (or its failure), then forwards wake-ups until Close
// closes the connection. go-redis re-subscribes after a reconnection.
func (c *Client) runSubscription(i int, s *subscription) {
	defer close(s.done)
	ctx, cancel := context.WithTimeout(c.subCtx, subscribeWait)
	ps := c.masters[i].Subscribe(ctx, c.node.WakeChannel(c.id))
	_, err := ps.Receive(ctx) // the subscription's confirmation
	cancel()
	c.mu.Lock()
	closed := c.closed
	if !closed {
		s.ps = ps
	}
	c.mu.Unlock()
	if closed {
		ps.Close()
		s.err = lock.ErrClosed
		close(s.ready)
		return
	}
	if err != nil {
		s.err = &NodeError{Node: i, Addr: c.addrs[i], Op: "subscribe", Err: err}
	}
	ch := ps.Channel(redis.WithChannelSize(1024))
	close(s.ready)
	for m := range ch {
		c.wake(m.Payload)
	}
}

// reply is one master's answer in a round.
type reply[T any] struct {
	i    int
	v    T
	err  error
	done bool // answered (v or err) before fanOut returned
}

// fanOut starts f on every master i with ok(i) (all if ok is nil), on one
// ctx for the round, bounded by timeout, and returns the answers (index i;
// a master without an answer has the zero reply, done false). f passes its
// answer to done, once, without blocking on other masters: a call through
// the master's pipeliner (hashlock.Node's ...Go methods) costs no goroutine
// while it queues; a blocking call is wrapped by blocking.
//
// fanOut returns when every master answered, or earlier: when enough (if
// not nil) says the answers so far decide the round, or when the timeout
// passes or ctx ends. It stops waiting then whether or not the masters'
// clients enforce ctx deadlines (go-redis does only with
// ContextTimeoutEnabled; otherwise a call to a silent master ends at the
// client's read timeout): the masters that have not answered are not done,
// and the caller treats them as failed or as unknown. An answer that comes
// after that is passed to late (if not nil) on a goroutine of its own,
// which can undo what the master did. The results channel is buffered to
// N, so an answer no longer awaited never blocks the goroutine that
// delivers it. Calls still running are owned by the Client, whose Close
// waits for them. The round's ctx is cancelled by the last answer. Once
// the Client is closed, fanOut waits for every answer.
func fanOut[T any](c *Client, ctx context.Context, timeout time.Duration, ok func(i int) bool,
	enough func(out []reply[T]) bool, late func(i int, v T, err error),
	f func(ctx context.Context, i int, done func(T, error))) []reply[T] {
	n := len(c.masters)
	out := make([]reply[T], n)
	for i := range out {
		out[i].i = i
	}
	sent := 0
	for i := range n {
		if ok == nil || ok(i) {
			sent++
		}
	}
	c.mu.Lock()
	detach := !c.closed
	if detach {
		c.bg.Add(sent) // before Close's Wait: closed is set under mu
	}
	c.mu.Unlock()
	if sent == 0 {
		return out
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	var running atomic.Int32
	running.Store(int32(sent))
	end := func() { // the last answer cancels the round's ctx
		if running.Add(-1) == 0 {
			cancel()
		}
	}
	ch := make(chan reply[T], n)
	var mu sync.Mutex // protects decided; held while an answer is sent, so none is missed
	decided := false
	for i := range c.masters {
		if ok != nil && !ok(i) {
			continue
		}
		f(rctx, i, func(v T, err error) { // owned by fanOut while it waits, then by the Client (bg)
			if err != nil {
				err = &NodeError{Node: i, Addr: c.addrs[i], Err: err}
			}
			mu.Lock()
			awaited := !decided
			if awaited {
				ch <- reply[T]{i: i, v: v, err: err}
			}
			mu.Unlock()
			// After the send: the loop below never sees the cancel that
			// the last answer makes before that answer.
			end()
			switch {
			case !awaited && late != nil:
				go func() { // still counted in bg (decided implies detach)
					defer c.bg.Done()
					late(i, v, err)
				}()
			case detach:
				c.bg.Done()
			}
		})
	}
	stop := rctx.Done()
	if !detach {
		stop = nil // closed: no Client to own the calls, wait for every answer
	}
wait:
	for range sent {
		select {
		case r := <-ch:
			r.done = true
			out[r.i] = r
			if detach && enough != nil && enough(out) {
				break wait
			}
		case <-stop:
			break wait
		}
	}
	mu.Lock()
	decided = true
	for len(ch) > 0 { // sent before the decision: still this round's
		r := <-ch
		r.done = true
		out[r.i] = r
	}
	mu.Unlock()
	return out
}

// blocking adapts a blocking call on master i (its client rdb) to fanOut:
// it runs on a goroutine of its own.
func blocking[T any](c *Client, f func(ctx context.Context, i int, rdb redis.UniversalClient) (T, error)) func(context.Context, int, func(T, error)) {
	return func(ctx context.Context, i int, done func(T, error)) {
		go func() { done(f(ctx, i, c.masters[i])) }() // owned by the round: done is counted in bg
	}
}

// nodeErr sets the operation of a fanOut error.
func nodeErr(err error, op string) error {
	var ne *NodeError
	if errors.As(err, &ne) && ne.Op == "" {
		ne.Op = op
	}
	return err
}

func (c *Client) String() string {
	return fmt.Sprintf("redlock.Client(%d masters, quorum %d)", len(c.masters), c.quorum)
}

// server is master i as hashlock.Node runs its scripts there: through its
// pipeliner, FCALL or EVALSHA as its Runner chose.
func (c *Client) server(i int) hashlock.Server {
	return hashlock.Server{Run: c.runs[i], C: c.pipes[i]}
}

// async is server for the Node's methods that do not wait.
func (c *Client) async(i int) hashlock.AsyncServer {
	return hashlock.AsyncServer{Run: c.runs[i], C: c.pipes[i]}
}
