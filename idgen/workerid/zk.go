package workerid

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/observe"
	"github.com/coordkit/coordkit/watchdog"
	"github.com/coordkit/coordkit/zklock"
)

// ZKLeaser leases worker IDs through ZooKeeper: under a zklock lock on the
// service, the lowest free ID gets an ephemeral node that lives as long as
// the session. It is safe for concurrent use.
//
// # Liveness and safety
//
// The ID is held as long as its node exists: until Release or the end of
// the session, which the server (on an ensemble, the leader) expires the
// session timeout T after it last heard of the client; another process can
// then lease the ID. A lease is kept by heartbeats sent at most T/6 apart,
// answered or not: a sync, which a follower forwards to the leader and
// answers only with its reply, then an exists of the node (gone, or owned
// by another session: lost at once).
// Each heartbeat that succeeds extends the lease to its send time s plus
// T/2 if heartbeats had by then been sent at most T/6 apart for 5T/12, plus
// T/3 otherwise (the create counts as the first, so a lease starts with
// T/3); the lease is lost, and its generators stop, when that time has
// passed. An exists alone would not do: a follower cut off from its leader
// answers reads from its own copy, for as long as its syncLimit, while the
// leader expires the session.
//
// The server hears of the client no earlier than s, so on a standalone
// server or the leader the session lives until s + T: the loss comes T/2
// (T/3) before the ID can be leased again. Through a follower, the leader
// learns of the client's packets from the follower's answers to its pings,
// two per tick, so it knows of those up to half a tick before s; they come
// at most T/6 apart on a chain of heartbeats and T/3 apart otherwise
// (go-zookeeper's pings), so the session lives until s + T - T/6 - tick/2
// (s + T - T/3 - tick/2) at least. ZooKeeper's shortest session is 2 ticks
// (tick <= T/2; the default WithSessionTimeout of 4 s is exactly that with
// the default tickTime), so the loss comes T/3 - tick/2 before the expiry:
// T/12 at worst, over T/4 with T of 10 ticks or more. Two processes can
// issue IDs on one worker ID only if the clocks of the holder and the
// leader run at rates that differ enough to eat that margin, a message
// between follower and leader is delayed by more, WithSessionTimeout is
// given more than the negotiated timeout, the holder is paused (GC,
// SIGSTOP) across the loss, or an operator deletes the node; the high-water
// marks then limit the damage to IDs issued since the last checkpoint. An
// outage of about T/3 (T/6 in the first 5T/12 of a lease) loses the lease;
// go-zookeeper waits a second before dialling a standalone server again.
//
// If the reply to the ID node's create is lost with the connection, the
// leaser looks for the node once the connection is back: a node owned by
// the current session is adopted (the lease goes on with it), one owned by
// another session is another process's (the next ID is tried), and a
// missing one is created again. If ctx ends meanwhile, the leaser goes on
// looking in the background (until Close) and deletes the node it finds
// owned by its session, so the ID does not stay taken for the life of the
// session.
type ZKLeaser struct {
	conn           *zk.Conn
	obs            *observe.IDs
	locks          *zklock.Client
	sessionTimeout time.Duration
	opts           options

	stop chan struct{}  // closed by Close
	wg   sync.WaitGroup // background deletions of nodes whose create's reply was lost

	mu     sync.Mutex // protects closed
	closed bool
}

// WithSessionTimeout tells a ZKLeaser the session timeout T its connection
// was made with (the value passed to zk.Connect). Leases are confirmed
// every T/6 (a sync, then an exists), and a lease that could not be
// confirmed for T/2 (T/3 in its first 5T/12) is declared lost, before the
// server can expire the session and give the ID to another process (see
// ZKLeaser). It must not
// exceed the negotiated timeout: the server lowers a request above its
// maxSessionTimeout (default 20 ticks, 40 s). Default:
// zklock.DefaultSessionTimeout (4 s), as zklock.WithSessionTimeout: the lowest
// timeout a server with the default tickTime of 2 s negotiates. Unlike
// zklock's, 0 is refused (ErrInvalid): a leaser always needs the bound.
func WithSessionTimeout(d time.Duration) Option {
	return func(o *options) { o.sessionTimeout = d }
}

// NewZK returns a leaser over conn. It returns an error wrapping ErrInvalid
// for a nil conn or bad options.
func NewZK(conn *zk.Conn, opts ...Option) (*ZKLeaser, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: nil ZooKeeper connection", ErrInvalid)
	}
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.sessionTimeout < 100*time.Millisecond {
		return nil, fmt.Errorf("%w: session timeout %v below 100ms", ErrInvalid, o.sessionTimeout)
	}
	// The lock is held only while an ID is picked, so it keeps zklock's
	// unknown-session mode (its loss is seen when go-zookeeper reports the
	// connection down), as before zklock's default became 4 s; each
	// lease's own keeper bounds the loss of the ID.
	locks, err := zklock.New(conn, zklock.WithACL(o.acl), zklock.WithLogger(o.logger), zklock.WithSessionTimeout(0))
	if err != nil {
		return nil, err
	}
	return &ZKLeaser{conn: conn, locks: locks, sessionTimeout: o.sessionTimeout, opts: o,
		obs:  observe.NewIDs("coordkit/workerid", o.logger, o.metrics),
		stop: make(chan struct{})}, nil
}

// Close stops the leaser's background work (deleting nodes whose create's
// reply was lost while Lease gave up) and waits for it; such a node left
// then goes with its session. Leases already made are not affected: release
// them. Close does not close the connection. It is idempotent, and returns
// nil (the error is there for the same shape on every coordkit client).
func (z *ZKLeaser) Close() error {
	z.mu.Lock()
	if !z.closed {
		z.closed = true
		close(z.stop)
	}
	z.mu.Unlock()
	z.wg.Wait()
	return z.locks.Close()
}

func (z *ZKLeaser) idsPath(service string) string { return z.opts.root + "/" + service + "/ids" }
func (z *ZKLeaser) hwPath(service string, id int64) string {
	return z.opts.root + "/" + service + "/hw/" + strconv.FormatInt(id, 10)
}

// Lease takes the lowest free worker ID in [0, max] for service: under the
// zklock lock "workerid-<service>" it lists the IDs taken and creates an
// ephemeral node <root>/<service>/ids/<id> holding the host, PID and start
// time. The lease is lost when the node is gone (session expired, node
// deleted) or cannot be confirmed for half the session timeout (a third in
// the lease's first 5/12 of it). It returns *ExhaustedError when every ID
// is taken. If the create's reply is lost, the node is adopted or deleted
// (see ZKLeaser).
func (z *ZKLeaser) Lease(ctx context.Context, service string) (*Lease, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	lk, err := z.locks.Obtain(ctx, "workerid-"+service)
	if err != nil {
		return nil, fmt.Errorf("workerid: lock service %q: %w", service, err)
	}
	defer func() {
		// Bounded: past it, zklock goes on deleting the lock node in the
		// background, and Lease returns.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), z.sessionTimeout)
		defer cancel()
		lk.Release(rctx)
	}()

	dir := z.idsPath(service)
	if err := z.ensure(dir); err != nil {
		return nil, err
	}
	children, _, err := z.conn.Children(dir)
	if err != nil {
		return nil, fmt.Errorf("workerid: list %s: %w", dir, err)
	}
	taken := make(map[int64]bool, len(children))
	for _, c := range children {
		if id, err := strconv.ParseInt(c, 10, 64); err == nil {
			taken[id] = true
		}
	}
	rec, _ := json.Marshal(Holder{Host: z.opts.host, PID: os.Getpid(), Since: z.opts.now().UTC()})
	for id := int64(0); id <= z.opts.max; id++ {
		if taken[id] {
			continue
		}
		p := dir + "/" + strconv.FormatInt(id, 10)
		for {
			sent := time.Now()
			_, err := z.conn.Create(p, rec, zk.FlagEphemeral, z.opts.acl)
			if errors.Is(err, zk.ErrConnectionClosed) {
				// The reply was lost: the node may exist, owned by this
				// session. Adopt it, or try again if it does not exist.
				var found, ours bool
				found, ours, sent, err = z.settle(ctx, p)
				if err != nil {
					z.reap(p)
					return nil, fmt.Errorf("workerid: create %s: reply lost, then: %w", p, err)
				}
				if !found {
					continue
				}
				if !ours {
					break // another process's
				}
			}
			if errors.Is(err, zk.ErrNodeExists) {
				break // taken by a leaser that does not use the lock
			}
			if err != nil {
				return nil, fmt.Errorf("workerid: create %s: %w", p, err)
			}
			return z.keep(service, id, p, sent)
		}
	}
	return nil, &ExhaustedError{Service: service, Max: z.opts.max}
}

// settle looks for p, whose create's reply was lost, once the connection is
// back: found reports whether it exists, ours whether the connection's
// current session owns it (judged when asked, never by a session captured
// before the create: go-zookeeper may run a request queued without a
// session in the next one). It syncs first, so that a follower's copy is
// up to date and the answer comes by way of the leader; sent is the sync's
// send time. A session that ended took its node with it: not found.
func (z *ZKLeaser) settle(ctx context.Context, p string) (found, ours bool, sent time.Time, err error) {
	delay := 5 * time.Millisecond
	for {
		sent = time.Now()
		var st *zk.Stat
		found, st, err = callZK(ctx, func() (bool, *zk.Stat, error) {
			if _, err := z.conn.Sync(p); err != nil {
				return false, nil, err
			}
			return z.conn.Exists(p)
		})
		switch {
		case err == nil:
			if !found {
				return false, false, sent, nil
			}
			sid := z.conn.SessionID()
			if sid == 0 {
				break // between sessions: ask again in the next one
			}
			return true, st.EphemeralOwner == sid, sent, nil
		case errors.Is(err, zk.ErrSessionExpired):
			return false, false, sent, nil
		case !errors.Is(err, zk.ErrConnectionClosed) && !errors.Is(err, zk.ErrNoServer):
			return false, false, sent, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, false, sent, ctx.Err()
		case <-z.stop:
			t.Stop()
			return false, false, sent, errors.New("workerid: leaser closed")
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// reap deletes p in the background if it turns out to be owned by the
// connection's current session (see settle), until Close.
func (z *ZKLeaser) reap(p string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.closed {
		return
	}
	z.wg.Add(1)
	go func() { // owned by z: Close stops and waits for it
		defer z.wg.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-z.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		for {
			found, ours, _, err := z.settle(ctx, p)
			if err != nil || !found || !ours {
				return
			}
			if err := z.conn.Delete(p, -1); err == nil || errors.Is(err, zk.ErrNoNode) ||
				(!errors.Is(err, zk.ErrConnectionClosed) && !errors.Is(err, zk.ErrNoServer)) {
				return
			}
		}
	}()
}

// keep starts the heartbeat of a freshly created (or adopted) node, whose
// create (or sync) was sent at sent.
func (z *ZKLeaser) keep(service string, id int64, p string, sent time.Time) (*Lease, error) {
	k := startKeeper(z.conn, p, z.conn.SessionID(), z.sessionTimeout, sent, &leaseEvents{obs: z.obs, service: service, id: id})
	session := k.session
	return &Lease{
		service:    service,
		id:         id,
		max:        z.opts.max,
		lost:       k.lost,
		held:       k.Held,
		cause:      k.Err,
		hw:         &zkHighWater{z: z, path: z.hwPath(service, id)},
		checkpoint: z.opts.checkpoint,
		free: func(ctx context.Context) error {
			k.Lose(ErrReleased)
			_, st, err := z.conn.Exists(p)
			if err != nil {
				return fmt.Errorf("workerid: release %s: %w", p, err)
			}
			if st == nil || st.EphemeralOwner != session {
				return nil // gone with the session already
			}
			if err := z.conn.Delete(p, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return fmt.Errorf("workerid: release %s: %w", p, err)
			}
			return nil
		},
	}, nil
}

// maxBeats bounds a keeper's heartbeats in flight: more would all wait on
// the same dead connection (by then the lease is lost anyway).
const maxBeats = 3

// zkKeeper keeps one worker-ID node (see ZKLeaser for the windows and their
// derivation): it sends a heartbeat (a sync, then an exists of the node)
// once T/6 less two ticks has passed since the last one was sent (it looks
// every tick, so they go out at most T/6 apart), whether or not earlier
// ones were answered, and reports the lease lost when the node is gone or
// owned by another session, or when the window of the last
// heartbeat that succeeded has passed: its send time plus T/2 if heartbeats
// had by then been sent at most T/6 apart for 5T/12, plus T/3 otherwise.
// It is safe for concurrent use.
type zkKeeper struct {
	conn    *zk.Conn
	path    string
	session int64         // the node's ephemeralOwner
	timeout time.Duration // T
	tick    time.Duration // how often the loop looks at the window
	ev      watchdog.Observer
	lost    chan struct{}
	stop    chan struct{} // closed by Lose
	done    chan struct{} // closed when the loop has returned

	base    time.Time    // a clock reading at the start (monotonic origin of untilNs)
	untilNs atomic.Int64 // until, in ns after base (Held)

	mu         sync.Mutex // protects the fields below
	err        error
	until      time.Time // the lease is lost then, unless a later heartbeat succeeds
	lastSent   time.Time // when the last heartbeat (or the create) was sent
	chainStart time.Time // since when they were sent at most T/6 apart
	stopping   bool
}

// startKeeper keeps path, created (or found) by a request sent at sent in
// session, with the session timeout T.
func startKeeper(conn *zk.Conn, path string, session int64, T time.Duration, sent time.Time, ev watchdog.Observer) *zkKeeper {
	k := &zkKeeper{
		conn: conn, path: path, session: session, timeout: T, ev: ev,
		tick: min(max(T/30, 5*time.Millisecond), 100*time.Millisecond),
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
		base: time.Now(),
	}
	k.noteSent(sent)
	k.noteAlive(sent)
	go k.run() // owned by k: Lose stops it and waits
	return k
}

// Err returns why the lease was lost, nil while it is held.
func (k *zkKeeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// Lose reports the lease lost with cause (unless it already was), stops the
// heartbeats and waits for the loop. It is idempotent.
func (k *zkKeeper) Lose(cause error) {
	k.lose(cause)
	k.mu.Lock()
	if !k.stopping {
		k.stopping = true
		close(k.stop)
	}
	k.mu.Unlock()
	<-k.done
}

func (k *zkKeeper) lose(cause error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err == nil {
		k.err = cause
		if k.ev != nil {
			k.ev.Lost(cause)
		}
		close(k.lost)
	}
}

// noteSent records that a heartbeat (or the create) was sent at t.
func (k *zkKeeper) noteSent(t time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lastSent.IsZero() || t.Sub(k.lastSent) > k.timeout/6 {
		k.chainStart = t
	}
	if t.After(k.lastSent) {
		k.lastSent = t
	}
}

// noteAlive extends the lease by the window of a request sent at sent that
// succeeded.
func (k *zkKeeper) noteAlive(sent time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	window := k.timeout / 3
	if !k.chainStart.After(sent.Add(-k.timeout * 5 / 12)) {
		window = k.timeout / 2
	}
	if until := sent.Add(window - k.tick); until.After(k.until) {
		k.until = until
		k.untilNs.Store(int64(until.Sub(k.base)))
	}
}

// Held reports whether the lease's window is still ahead and it has not been
// reported lost, without waiting for the keeper's loop to run (see
// watchdog.Watchdog.Held).
func (k *zkKeeper) Held() bool {
	select {
	case <-k.lost:
		return false
	default:
	}
	return int64(time.Since(k.base)) < k.untilNs.Load()
}

func (k *zkKeeper) run() {
	defer close(k.done)
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		sent time.Time
		err  error
	}
	res := make(chan result, maxBeats)
	inflight := 0
	defer func() {
		cancel() // a heartbeat in flight returns once its ctx ends (callZK)
		for ; inflight > 0; inflight-- {
			<-res
		}
	}()
	beat := max(k.timeout/6-2*k.tick, time.Millisecond) // sent a tick late at most: T/6 apart with a tick to spare
	t := time.NewTicker(k.tick)
	defer t.Stop()
	var lastErr error
	for {
		select {
		case <-k.stop:
			return
		case r := <-res:
			inflight--
			if k.ev != nil {
				k.ev.Renewed(r.err)
			}
			switch {
			case r.err == nil:
				k.noteAlive(r.sent)
			case errors.Is(r.err, watchdog.ErrNotHeld):
				k.lose(r.err)
				return
			default:
				lastErr = r.err
			}
		case <-t.C:
		}
		now := time.Now()
		k.mu.Lock()
		until, last := k.until, k.lastSent
		k.mu.Unlock()
		if !now.Before(until) {
			if lastErr != nil {
				k.lose(fmt.Errorf("workerid: %s not confirmed in time: %w: %w", k.path, watchdog.ErrExpired, lastErr))
			} else {
				k.lose(fmt.Errorf("workerid: %s not confirmed in time: %w", k.path, watchdog.ErrExpired))
			}
			return
		}
		if inflight < maxBeats && now.Sub(last) >= beat {
			k.noteSent(now)
			inflight++
			go func(sent time.Time) { // owned by run: it waits for res before returning
				res <- result{sent, k.heartbeat(ctx)}
			}(now)
		}
	}
}

// heartbeat syncs (so that a follower's answer comes by way of the leader)
// and confirms that the node still belongs to the session. It returns an
// error matching watchdog.ErrNotHeld when the node is gone or another
// session's.
func (k *zkKeeper) heartbeat(ctx context.Context) error {
	ok, st, err := callZK(ctx, func() (bool, *zk.Stat, error) {
		if _, err := k.conn.Sync(k.path); err != nil {
			return false, nil, err
		}
		return k.conn.Exists(k.path)
	})
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("workerid: %s is gone: %w", k.path, watchdog.ErrNotHeld)
	case st.EphemeralOwner != k.session:
		return fmt.Errorf("workerid: %s belongs to another session: %w", k.path, watchdog.ErrNotHeld)
	case k.conn.SessionID() != k.session:
		return errors.New("workerid: answered in another session") // proves nothing about ours
	}
	return nil
}

// callZK runs a go-zookeeper call, which takes no ctx, and gives up when ctx
// ends. The call itself then finishes in the background once the
// connection answers, reconnects or is closed.
func callZK(ctx context.Context, f func() (bool, *zk.Stat, error)) (bool, *zk.Stat, error) {
	type result struct {
		ok  bool
		st  *zk.Stat
		err error
	}
	ch := make(chan result, 1)
	go func() {
		ok, st, err := f()
		ch <- result{ok, st, err}
	}()
	select {
	case r := <-ch:
		return r.ok, r.st, r.err
	case <-ctx.Done():
		return false, nil, ctx.Err()
	}
}

// ensure creates p and its parents as persistent nodes.
func (z *ZKLeaser) ensure(p string) error {
	if ok, _, err := z.conn.Exists(p); err == nil && ok {
		return nil
	}
	cur := ""
	for _, part := range splitPath(p) {
		cur += "/" + part
		_, err := z.conn.Create(cur, nil, 0, z.opts.acl)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("workerid: create %s: %w", cur, err)
		}
	}
	return nil
}

func splitPath(p string) []string {
	var parts []string
	for p != "/" && p != "." && p != "" {
		parts = append(parts, path.Base(p))
		p = path.Dir(p)
	}
	slices.Reverse(parts)
	return parts
}

// List returns the current holders of service's worker IDs, lowest ID first.
func (z *ZKLeaser) List(ctx context.Context, service string) ([]Holder, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	dir := z.idsPath(service)
	children, _, err := z.conn.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workerid: list %s: %w", dir, err)
	}
	var out []Holder
	for _, c := range children {
		id, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			continue
		}
		data, _, err := z.conn.Get(dir + "/" + c)
		if errors.Is(err, zk.ErrNoNode) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("workerid: read %s/%s: %w", dir, c, err)
		}
		h := Holder{}
		json.Unmarshal(data, &h)
		h.ID = id
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b Holder) int { return int(a.ID - b.ID) })
	return out, nil
}

// HighWater returns the high-water store of one worker ID of service.
func (z *ZKLeaser) HighWater(service string, id int64) (idgen.HighWaterStore, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	if id < 0 || id > z.opts.max {
		return nil, fmt.Errorf("%w: worker ID %d outside [0, %d]", ErrInvalid, id, z.opts.max)
	}
	return &zkHighWater{z: z, path: z.hwPath(service, id)}, nil
}

// zkHighWater keeps a mark as decimal Unix milliseconds in a persistent
// znode, raised with a versioned Set so a stale writer cannot lower it.
type zkHighWater struct {
	z    *ZKLeaser
	path string
}

func (h *zkHighWater) Load(ctx context.Context) (time.Time, error) {
	data, _, err := h.z.conn.Get(h.path)
	if errors.Is(err, zk.ErrNoNode) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("workerid: load %s: %w", h.path, err)
	}
	ms, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("workerid: high-water mark at %s is not a number: %q", h.path, data)
	}
	return time.UnixMilli(ms), nil
}

func (h *zkHighWater) Store(ctx context.Context, mark time.Time) error {
	if mark.IsZero() {
		return nil
	}
	want := ceilMilli(mark)
	for ctx.Err() == nil {
		data, st, err := h.z.conn.Get(h.path)
		if errors.Is(err, zk.ErrNoNode) {
			if err := h.z.ensure(path.Dir(h.path)); err != nil {
				return err
			}
			_, err = h.z.conn.Create(h.path, []byte(strconv.FormatInt(want, 10)), 0, h.z.opts.acl)
			if errors.Is(err, zk.ErrNodeExists) {
				continue // raced with another writer: compare again
			}
			return err
		}
		if err != nil {
			return fmt.Errorf("workerid: store %s: %w", h.path, err)
		}
		cur, err := strconv.ParseInt(string(data), 10, 64)
		if err != nil {
			return fmt.Errorf("workerid: high-water mark at %s is not a number: %q", h.path, data)
		}
		if cur >= want {
			return nil
		}
		_, err = h.z.conn.Set(h.path, []byte(strconv.FormatInt(want, 10)), st.Version)
		if errors.Is(err, zk.ErrBadVersion) {
			continue
		}
		if err != nil {
			return fmt.Errorf("workerid: store %s: %w", h.path, err)
		}
		return nil
	}
	return ctx.Err()
}
