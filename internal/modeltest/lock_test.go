package modeltest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
)

// The model of the Redis hash lock (lock.New, reentrant) and of the simple
// lock (lock.NewSimple, not reentrant) on one key: at most one hold at a
// time, a hold being one owner's levels (leases) with one fencing token.
//
// What is allowed, step by step:
//   - TryObtain on a free key succeeds with a token larger than every
//     token before; by the holding owner (Client) it re-enters and answers
//     the hold's token; by anyone else (or by anyone on Simple) it fails
//     with ErrNotObtained;
//   - Release of a level of the live hold answers nil (also when its reply
//     was lost and the command resent); of a released lease, or of a lease
//     whose hold was deleted, ErrNotHeld;
//   - the key exists exactly while the model has a hold, with the owner's
//     count equal to its levels, and its PTTL never ends before the Until
//     of a lease that reports held;
//   - a lease of a deleted hold reports the loss (Lost, Err matching
//     ErrLockLost) by its next renewal (TTL/3) plus slack.
//
// Timing: a process starved past a short TTL can lose a hold, or have an
// acquisition refused because its answer came after the TTL; the model
// accepts that for holds whose TTL is under longTTL only, and then
// releases what is left and waits for the key to expire before it goes on.

const (
	nOwners  = 3
	nClients = 3
	// longTTL: a hold whose TTL is at least this must never be lost by
	// timing alone.
	longTTL = 2 * time.Second
	// lossSlack is added to TTL/3 for a deleted hold's loss report.
	lossSlack = time.Second
	// pttlSlack: the key's expiry may end this much before a lease's Until
	// (millisecond rounding).
	pttlSlack = 15 * time.Millisecond
)

type hstate int

const (
	live  hstate = iota // the model's hold: Redis must have it
	gone                // deleted (or lost for good): Redis does not have it
	ended               // every level released
)

type holdRec struct {
	owner  int
	token  int64
	levels map[int]*leaseRec // unreleased levels by lease id
	state  hstate
	goneAt time.Time
}

type leaseRec struct {
	id       int
	l        lock.Lease
	owner    int
	client   int
	ttl      time.Duration
	token    int64
	hold     *holdRec
	released bool
}

type lockModel struct {
	t        *testing.T
	simple   bool
	key      string
	hashKey  string
	fenceKey string
	admin    *redis.Client
	rdbs     []*redis.Client
	hooks    []*loser
	lockers  []lock.Locker
	closers  []func() error
	owners   []string
	leases   map[int]*leaseRec
	cur      *holdRec
	holds    []*holdRec
	maxToken int64
}

func newLockModel(t *testing.T, seed uint64, simple bool) model {
	name := "client"
	if simple {
		name = "simple"
	}
	m := &lockModel{t: t, simple: simple, key: uniqueKey(name, seed), leases: map[int]*leaseRec{}}
	addr := masters[0].Addr()
	m.admin = redis.NewClient(&redis.Options{Addr: addr})
	if simple {
		m.hashKey = lock.DefaultPrefix + "simple:{" + m.key + "}"
	} else {
		m.hashKey = lock.DefaultPrefix + "{" + m.key + "}"
	}
	m.fenceKey = m.hashKey + ":fence"
	for i := range nClients {
		rdb, h := newRedis(addr, false)
		m.rdbs, m.hooks = append(m.rdbs, rdb), append(m.hooks, h)
		if simple {
			s := lock.NewSimple(rdb, lock.WithLogger(quiet))
			m.lockers, m.closers = append(m.lockers, s), append(m.closers, s.Close)
		} else {
			c := lock.New(rdb, lock.WithLogger(quiet))
			m.lockers, m.closers = append(m.lockers, c), append(m.closers, c.Close)
		}
		_ = i
	}
	for i := range nOwners {
		m.owners = append(m.owners, fmt.Sprintf("o%d-%x", i, seed&0xffff))
	}
	return m
}

// liveLeases returns the ids of the unreleased leases, sorted.
func (m *lockModel) unreleased() []int {
	var ids []int
	for id, lr := range m.leases {
		if !lr.released {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func (m *lockModel) allLeases() []int {
	var ids []int
	for id := range m.leases {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (m *lockModel) gen(r *rand.Rand, id int) op {
	o := op{ID: id, Owner: r.IntN(nOwners), Client: r.IntN(nClients), TTL: randTTL(r)}
	un, all := m.unreleased(), m.allLeases()
	if fenceFirst(r, id) {
		o.Kind = opFence
		return o
	}
	w := r.IntN(100)
	switch {
	case w < 32:
		o.Kind = opObtain
		if m.cur != nil && r.IntN(2) == 0 && *flagReentry {
			o.Owner = m.cur.owner // nested obtain (re-entry), another TTL
			if r.IntN(2) == 0 {
				// usually through the holding client
				for _, lr := range m.cur.levels {
					o.Client = lr.client
					break
				}
			}
		}
	case w < 58 && len(all) > 0:
		o.Kind = opRelease
		o.Lease = pickLease(r, un, all)
	case w < 68:
		o.Kind = opWait
		o.Dur = randWait(r)
	case w < 81:
		o.Kind = opDelete
	case w < 87:
		o.Kind = opFence
	case w < 93 && *flagReentry:
		o.Kind = opPair
		o.TTL2 = randTTL(r)
	case m.cur != nil:
		o.Kind = opCancel
		o.TTL = time.Duration(2000+r.IntN(6000)) * time.Millisecond // a ghost grant would outlive the check
		o.Dur = time.Duration(r.IntN(3)) * time.Millisecond
		if !m.simple && o.Owner == m.cur.owner {
			o.Owner = (o.Owner + 1) % nOwners
		}
	default:
		o.Kind = opWait
		o.Dur = time.Duration(10+r.IntN(300)) * time.Millisecond
	}
	if o.Kind == opObtain && !*flagReentry && m.cur != nil && o.Owner == m.cur.owner && !m.simple {
		o.Owner = (o.Owner + 1) % nOwners
	}
	if (o.Kind == opObtain || o.Kind == opRelease) && r.IntN(5) == 0 {
		o.Lose = 1
	}
	return o
}

func (m *lockModel) acquireScripts() []string {
	if m.simple {
		return []string{"simple_obtain.lua"}
	}
	return []string{"acquire.lua"}
}

func (m *lockModel) releaseScripts() []string {
	if m.simple {
		return []string{"simple_release.lua"}
	}
	return []string{"release.lua", "handoff.lua"}
}

func (m *lockModel) step(ctx context.Context, o op) error {
	switch o.Kind {
	case opObtain:
		if o.Lose != 0 {
			m.hooks[o.Client].arm(m.acquireScripts()...)
		}
		t0 := time.Now()
		l, err := m.lockers[o.Client].TryObtain(lock.WithOwner(ctx, m.owners[o.Owner]), m.key, lock.WithTTL(o.TTL))
		el := time.Since(t0)
		m.hooks[o.Client].disarm()
		return m.obtained(ctx, o.ID, o.Owner, o.Client, o.TTL, l, err, el)
	case opPair:
		return m.pair(ctx, o)
	case opRelease:
		lr := m.leases[o.Lease]
		if lr == nil {
			return nil
		}
		if o.Lose != 0 {
			m.hooks[lr.client].arm(m.releaseScripts()...)
		}
		err := lr.l.Release(ctx)
		m.hooks[lr.client].disarm()
		return m.released(ctx, lr, err, o.Lose != 0)
	case opWait:
		time.Sleep(o.Dur)
	case opDelete:
		if err := m.admin.Del(ctx, m.hashKey).Err(); err != nil {
			return err
		}
		if m.cur != nil {
			m.cur.state, m.cur.goneAt = gone, time.Now()
			m.cur = nil
		}
	case opFence:
		return setFenceAhead(ctx, m.admin, m.fenceKey)
	case opCancel:
		return m.cancelAtGrant(ctx, o)
	}
	return nil
}

// setFenceAhead sets a fencing counter to the server's clock in µs + 10^9,
// as after a failover to a server whose clock lags.
func setFenceAhead(ctx context.Context, rdb *redis.Client, key string) error {
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return err
	}
	return rdb.Set(ctx, key, now.UnixMicro()+1e9, 0).Err()
}

// obtained checks the answer of a TryObtain (or Obtain) and records it.
func (m *lockModel) obtained(ctx context.Context, id, owner, client int, ttl time.Duration, l lock.Lease, err error, el time.Duration) error {
	cur := m.cur
	switch {
	case cur != nil && (m.simple || cur.owner != owner):
		if err == nil {
			m.record(id, owner, client, ttl, l, nil)
			return fail("exclusion", "o%d obtained the key on c%d (token %d) while the model has o%d holding it (token %d, levels %v)",
				owner, client, l.Token(), cur.owner, cur.token, levelIDs(cur))
		}
		if !errors.Is(err, lock.ErrNotObtained) {
			return fail("error", "TryObtain of a held key: %v, want ErrNotObtained", err)
		}
		return nil
	case cur != nil: // re-entry
		if err != nil {
			if errors.Is(err, lock.ErrNotObtained) && (el > ttl/4 || m.timingLoss(cur)) {
				return m.resync(ctx, cur)
			}
			return fail("reentry", "o%d re-entering its hold (token %d) on c%d: %v", owner, cur.token, client, err)
		}
		if l.Token() != cur.token {
			m.record(id, owner, client, ttl, l, nil)
			return fail("token", "re-entry by o%d answered token %d, the hold's is %d", owner, l.Token(), cur.token)
		}
		m.record(id, owner, client, ttl, l, cur)
		return nil
	}
	// Free.
	if err != nil {
		if errors.Is(err, lock.ErrNotObtained) && el > ttl/4 {
			// Its answer came too late (a starved process): refused, and undone.
			return m.waitFree(ctx, ttl+time.Second, "after an acquisition refused as late")
		}
		return fail("free", "o%d on c%d could not obtain a free key: %v (after %v)", owner, client, err, el)
	}
	if l.Token() <= m.maxToken {
		m.record(id, owner, client, ttl, l, nil)
		return fail("token", "fresh acquisition by o%d answered token %d, not above the largest before, %d", owner, l.Token(), m.maxToken)
	}
	h := &holdRec{owner: owner, token: l.Token(), levels: map[int]*leaseRec{}}
	m.holds = append(m.holds, h)
	m.cur = h
	m.record(id, owner, client, ttl, l, h)
	return nil
}

func levelIDs(h *holdRec) []int {
	var ids []int
	for id := range h.levels {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// record adds a lease; h nil means a lease the model did not allow (it is
// released at the end).
func (m *lockModel) record(id, owner, client int, ttl time.Duration, l lock.Lease, h *holdRec) {
	lr := &leaseRec{id: id, l: l, owner: owner, client: client, ttl: ttl, token: l.Token(), hold: h}
	if h == nil {
		lr.hold = &holdRec{owner: owner, token: l.Token(), levels: map[int]*leaseRec{}, state: gone, goneAt: time.Now()}
		lr.released = true // not tracked further
		m.leases[id] = lr
		return
	}
	if _, dup := m.leases[id]; dup {
		id = -id - 1000 // the second lease of a pair
		lr.id = id
	}
	h.levels[id] = lr
	m.leases[id] = lr
	m.maxToken = max(m.maxToken, l.Token())
}

// released checks the answer of a Release.
func (m *lockModel) released(ctx context.Context, lr *leaseRec, err error, resent bool) error {
	what := releasing(resent)
	was := lr.released
	lr.released = true
	h := lr.hold
	switch {
	case was:
		if !errors.Is(err, lock.ErrNotHeld) {
			return releasedTwice(what, lr.id, err)
		}
	case h.state == live:
		delete(h.levels, lr.id)
		if len(h.levels) == 0 {
			h.state = ended
			if m.cur == h {
				m.cur = nil
			}
		}
		if err != nil {
			if errors.Is(err, lock.ErrNotHeld) && m.timingLoss(h) {
				return m.resync(ctx, h)
			}
			return fail("release", "%s L%d, a level of the live hold of o%d (token %d): %v, want nil", what, lr.id, h.owner, h.token, err)
		}
	case h.state == gone:
		delete(h.levels, lr.id)
		if !errors.Is(err, lock.ErrNotHeld) {
			return fail("release", "%s L%d (o%d, token %d), whose hold was deleted%s: %v, want ErrNotHeld",
				what, lr.id, lr.owner, lr.token, m.takenSince(h), err)
		}
	}
	return nil
}

// takenSince describes who took the key after h was deleted.
func (m *lockModel) takenSince(h *holdRec) string {
	for _, x := range m.holds {
		if x != h && x.token > h.token {
			return fmt.Sprintf(" and taken since by o%d with token %d", x.owner, x.token)
		}
	}
	return ""
}

// timingLoss reports whether h is a short hold (TTL under longTTL) that one
// of its leases reports lost: a starved process, not a bug the model can
// name.
func (m *lockModel) timingLoss(h *holdRec) bool {
	short := true
	lost := false
	for _, lr := range h.levels {
		if lr.ttl >= longTTL {
			short = false
		}
		if lr.l.(lock.LeaseStatus).Err() != nil {
			lost = true
		}
	}
	return short && lost
}

// resync follows a timing loss of h: release what is left of it, wait for
// the key to be free, and go on from a free key.
func (m *lockModel) resync(ctx context.Context, h *holdRec) error {
	var ttl time.Duration
	for _, lr := range h.levels {
		lr.l.Release(ctx)
		lr.released = true
		ttl = max(ttl, lr.ttl)
	}
	h.levels = map[int]*leaseRec{}
	h.state = gone
	h.goneAt = time.Now()
	if m.cur == h {
		m.cur = nil
	}
	return m.waitFree(ctx, ttl+time.Second, "after a timing loss")
}

func (m *lockModel) waitFree(ctx context.Context, d time.Duration, why string) error {
	if !waitFor(d, func() bool { return m.admin.Exists(ctx, m.hashKey).Val() == 0 }) {
		return fail("free", "the key is still held %v later %s: %v", d, why, m.admin.HGetAll(ctx, m.hashKey).Val())
	}
	return nil
}

// pair: two goroutines of one owner on one client TryObtain at once, with
// different TTLs.
func (m *lockModel) pair(ctx context.Context, o op) error {
	type res struct {
		l   lock.Lease
		err error
		el  time.Duration
		ttl time.Duration
	}
	ch := make(chan res, 2)
	for _, ttl := range []time.Duration{o.TTL, o.TTL2} {
		go func() {
			t0 := time.Now()
			l, err := m.lockers[o.Client].TryObtain(lock.WithOwner(ctx, m.owners[o.Owner]), m.key, lock.WithTTL(ttl))
			ch <- res{l, err, time.Since(t0), ttl}
		}()
	}
	a, b := <-ch, <-ch
	if a.err != nil && b.err == nil {
		a, b = b, a // a success first: the other attempt then finds the key held
	}
	if m.simple {
		// Not reentrant: on a free key exactly one wins.
		var first error
		for _, x := range []res{a, b} {
			if err := m.obtained(ctx, o.ID, o.Owner, o.Client, x.ttl, x.l, x.err, x.el); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	if err := m.obtained(ctx, o.ID, o.Owner, o.Client, a.ttl, a.l, a.err, a.el); err != nil {
		return err
	}
	return m.obtained(ctx, o.ID, o.Owner, o.Client, b.ttl, b.l, b.err, b.el)
}

// cancelAtGrant: o.Owner's blocking Obtain on o.Client waits for the held
// key; every level of the hold is released and the waiter's ctx cancelled
// right then. The waiter either holds (a fresh token) or not, and then the
// key must be free.
func (m *lockModel) cancelAtGrant(ctx context.Context, o op) error {
	h := m.cur
	if h == nil || (!m.simple && h.owner == o.Owner) {
		return nil
	}
	wctx, cancel := context.WithTimeout(lock.WithOwner(ctx, m.owners[o.Owner]), 20*time.Second)
	defer cancel()
	type res struct {
		l   lock.Lease
		err error
	}
	ch := make(chan res, 1)
	go func() {
		l, err := m.lockers[o.Client].Obtain(wctx, m.key, lock.WithTTL(o.TTL))
		ch <- res{l, err}
	}()
	time.Sleep(40 * time.Millisecond) // the waiter queues (if not yet, it finds the key free or its ctx cancelled)
	for _, id := range slices.Backward(levelIDs(h)) {
		lr := h.levels[id]
		err := lr.l.Release(ctx)
		if e := m.released(ctx, lr, err, false); e != nil {
			cancel()
			<-ch
			return e
		}
	}
	time.Sleep(o.Dur)
	cancel()
	r := <-ch
	if r.err == nil {
		if m.cur != nil {
			m.record(o.ID, o.Owner, o.Client, o.TTL, r.l, nil)
			return fail("exclusion", "the cancelled waiter o%d holds (token %d) while o%d holds too", o.Owner, r.l.Token(), m.cur.owner)
		}
		return m.obtained(ctx, o.ID, o.Owner, o.Client, o.TTL, r.l, nil, 0)
	}
	if !errors.Is(r.err, lock.ErrNotObtained) {
		return fail("error", "cancelled Obtain: %v, want ErrNotObtained", r.err)
	}
	if m.cur == nil {
		// Nobody holds: a grant the cancelled waiter gave up must be given back.
		if !waitFor(time.Second, func() bool { return m.admin.Exists(ctx, m.hashKey).Val() == 0 }) {
			return fail("ghost", "Obtain of o%d cancelled at its grant returned %v, but the key is held a second later: %v",
				o.Owner, r.err, m.admin.HGetAll(ctx, m.hashKey).Val())
		}
	}
	return nil
}

// lossDeadline is when a lease of a hold deleted at goneAt must report the
// loss: its client's next renewal (a third of the longest TTL of the
// hold's levels on that client) plus slack.
func (m *lockModel) lossDeadline(lr *leaseRec) time.Time {
	var ttl time.Duration
	for _, x := range m.leases {
		if x.hold == lr.hold && x.client == lr.client {
			ttl = max(ttl, x.ttl)
		}
	}
	return lr.hold.goneAt.Add(ttl/3 + lossSlack)
}

func (m *lockModel) check(ctx context.Context) error {
	// Each lease's report is consistent; leases of a deleted hold report the
	// loss in time; leases of the live hold do not.
	for _, id := range m.unreleased() {
		lr := m.leases[id]
		st := lr.l.(lock.LeaseStatus)
		lerr := st.Err()
		lost := isClosed(lr.l.Lost())
		if lerr != nil {
			if !errors.Is(lerr, lock.ErrLockLost) {
				return fail("loss", "L%d: Err() = %v, want an error matching ErrLockLost", id, lerr)
			}
			if !lost {
				return fail("loss", "L%d: Err() = %v but Lost() is not closed", id, lerr)
			}
			if !st.Until().IsZero() {
				return fail("loss", "L%d: lost (%v) but Until() = %v, want the zero Time", id, lerr, st.Until())
			}
		}
		switch lr.hold.state {
		case live:
			if lerr != nil {
				if m.timingLoss(lr.hold) {
					return m.resync(ctx, lr.hold)
				}
				return fail("loss", "L%d (o%d, token %d, ttl %v), a level of the live hold, reports lost: %v", id, lr.owner, lr.token, lr.ttl, lerr)
			}
		case gone:
			if lerr == nil && time.Now().After(m.lossDeadline(lr)) {
				select {
				case <-lr.l.Lost():
				case <-time.After(300 * time.Millisecond):
					return fail("loss", "L%d (o%d, token %d, ttl %v): its hold was deleted %v ago, still not reported lost (Until %v)",
						id, lr.owner, lr.token, lr.ttl, time.Since(lr.hold.goneAt).Round(time.Millisecond), time.Until(st.Until()).Round(time.Millisecond))
				}
			}
		}
	}
	return m.checkRedis(ctx)
}

// checkRedis compares the key in Redis with the model.
func (m *lockModel) checkRedis(ctx context.Context) error {
	h := m.cur
	if h == nil {
		n, err := m.admin.Exists(ctx, m.hashKey).Result()
		if err != nil {
			return err
		}
		if n != 0 {
			return fail("free", "the model has nobody holding, but the key exists: %v", m.dump(ctx))
		}
		return nil
	}
	// Untils first, then the key's PTTL: a renewal between the two only
	// makes the PTTL longer.
	var until time.Time
	var which int
	for id, lr := range h.levels {
		st := lr.l.(lock.LeaseStatus)
		if u := st.Until(); st.Err() == nil && u.After(until) {
			until, which = u, id
		}
	}
	pttl, err := m.admin.PTTL(ctx, m.hashKey).Result()
	if err != nil {
		return err
	}
	now := time.Now()
	if pttl < 0 {
		if m.timingLoss(h) {
			return m.resync(ctx, h)
		}
		return fail("exclusion", "the model has o%d holding (token %d, levels %v) but the key is gone (PTTL %v)", h.owner, h.token, levelIDs(h), pttl)
	}
	if !until.IsZero() && now.Add(pttl).Before(until.Add(-pttlSlack)) {
		lr := h.levels[which]
		return fail("pttl", "L%d (o%d, ttl %v) reports held for %v more, but the key expires in %v: another owner can take it first",
			which, lr.owner, lr.ttl, until.Sub(now).Round(time.Millisecond), pttl)
	}
	if !m.simple {
		n, err := m.admin.HGet(ctx, m.hashKey, m.owners[h.owner]).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if n != len(h.levels) {
			return fail("levels", "o%d holds %d levels in the model (%v), Redis counts %d: %v", h.owner, len(h.levels), levelIDs(h), n, m.dump(ctx))
		}
	}
	return nil
}

func (m *lockModel) dump(ctx context.Context) any {
	if m.simple {
		return m.admin.Get(ctx, m.hashKey).Val()
	}
	return m.admin.HGetAll(ctx, m.hashKey).Val()
}

// quiet discards the clients' logs (losses are expected here).
var quiet = slog.New(slog.DiscardHandler)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (m *lockModel) finish(ctx context.Context) error {
	// Every lease of a deleted hold reports the loss by its deadline.
	for _, id := range m.unreleased() {
		lr := m.leases[id]
		if lr.hold.state != gone {
			continue
		}
		if !finishLost(lr.l.Lost(), m.lossDeadline(lr)) {
			return fail("loss", "L%d (o%d, token %d, ttl %v): its hold was deleted %v ago, still not reported lost",
				id, lr.owner, lr.token, lr.ttl, time.Since(lr.hold.goneAt).Round(time.Millisecond))
		}
	}
	return nil
}

func (m *lockModel) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, lr := range m.leases {
		lr.l.Release(ctx)
	}
	for _, c := range m.closers {
		c()
	}
	for _, r := range m.rdbs {
		r.Close()
	}
	m.admin.Del(ctx, m.hashKey, m.fenceKey)
	m.admin.Close()
}

func TestModel(t *testing.T) {
	for _, sys := range systems() {
		t.Run(sys.name, func(t *testing.T) { testModel(t, sys) })
	}
}

func systems() []system {
	return []system{
		{"Client", func(t *testing.T, seed uint64) model { return newLockModel(t, seed, false) }},
		{"Simple", func(t *testing.T, seed uint64) model { return newLockModel(t, seed, true) }},
		{"RW", newRWModel},
		{"Redlock", newRedlockModel},
		{"Semaphore", newSemModel},
	}
}
