package modeltest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
)

// The model of redlock over three masters: per master, which client holds
// (a client's hold of an owner: one level on each master it took, its
// re-entries counted in the client) have a level there — definitely, or
// maybe (the rest of a hold that lost its quorum, which expires by itself
// once its loss is noticed). A hold is live while it definitely has a
// level on a quorum.
//
//   - TryObtain by an owner whose hold on that client is live re-enters
//     locally with the hold's token; otherwise a round: it must succeed
//     when a quorum of masters is free of other owners, and fail when no
//     quorum can be; a fresh hold's token is larger than every token
//     before, a round that re-entered the owner's hold of another client
//     answers at least that hold's token;
//   - Release: of an inner level, nil (ErrNotHeld once the hold is
//     reported lost); of the outermost level, nil when the hold
//     definitely had a quorum, also when replies were lost and the
//     commands resent; ErrNotHeld when a quorum of masters did not have it;
//     a released lease, ErrNotHeld;
//   - each master's owner counts agree with the model, and a quorum of a
//     live hold's masters keep the key for at least the Until of every
//     lease that reports held;
//   - a hold deleted on a quorum reports the loss by its next renewal (TTL/3)
//     plus slack.

const (
	nMasters = 3
	quorum   = 2
	// rlNodeTimeout is generous: a slow answer under -race on a busy
	// machine would otherwise cost acquisitions the model expects.
	rlNodeTimeout = 250 * time.Millisecond
)

const (
	onNone  = 0
	onDef   = 1
	onMaybe = 2
)

type rlHold struct {
	owner, client int
	token         int64
	ttl           time.Duration
	levels        map[int]*rlLease
	on            [nMasters]int
	state         hstate
	goneAt        time.Time
}

func (h *rlHold) def() int {
	n := 0
	for _, v := range h.on {
		if v == onDef {
			n++
		}
	}
	return n
}

type rlLease struct {
	id       int
	l        lock.Lease
	ttl      time.Duration
	hold     *rlHold
	released bool
}

type redlockModel struct {
	t        *testing.T
	key      string
	hashKey  string
	fenceKey string
	admins   []*redis.Client
	rdbs     []*redis.Client
	hooks    [][]*loser // [client][master]
	clients  []*redlock.Client
	owners   []string
	leases   map[int]*rlLease
	holds    []*rlHold
	maxToken int64
}

func newRedlockModel(t *testing.T, seed uint64) model {
	m := &redlockModel{t: t, key: uniqueKey("redlock", seed), leases: map[int]*rlLease{}}
	m.hashKey = redlock.DefaultPrefix + "{" + m.key + "}"
	m.fenceKey = m.hashKey + ":fence"
	for _, s := range masters {
		m.admins = append(m.admins, redis.NewClient(&redis.Options{Addr: s.Addr()}))
	}
	for range 2 {
		var ms []redis.UniversalClient
		var hs []*loser
		for _, s := range masters {
			rdb, h := newRedis(s.Addr(), true)
			m.rdbs = append(m.rdbs, rdb)
			ms, hs = append(ms, rdb), append(hs, h)
		}
		c, err := redlock.New(ms, redlock.WithNodeTimeout(rlNodeTimeout), redlock.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		m.clients, m.hooks = append(m.clients, c), append(m.hooks, hs)
	}
	for i := range nOwners {
		m.owners = append(m.owners, fmt.Sprintf("o%d-%x", i, seed&0xffff))
	}
	return m
}

func (m *redlockModel) ids(all bool) []int {
	var ids []int
	for id, lr := range m.leases {
		if all || !lr.released {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// holder returns a live hold, if any.
func (m *redlockModel) holder() *rlHold {
	for _, h := range m.holds {
		if h.state == live {
			return h
		}
	}
	return nil
}

func (m *redlockModel) gen(r *rand.Rand, id int) op {
	o := op{ID: id, Multi: true, Owner: r.IntN(nOwners), Client: r.IntN(len(m.clients)), TTL: rlTTL(r), Master: r.IntN(nMasters)}
	un, all := m.ids(false), m.ids(true)
	if fenceFirst(r, id) {
		o.Kind = opFence
		return o
	}
	h := m.holder()
	w := r.IntN(100)
	switch {
	case w < 30:
		o.Kind = opObtain
		if h != nil && r.IntN(2) == 0 && *flagReentry {
			o.Owner = h.owner
		}
	case w < 55 && len(all) > 0:
		o.Kind = opRelease
		o.Lease = pickLease(r, un, all)
	case w < 65:
		o.Kind = opWait
		o.Dur = randWait(r)
	case w < 78:
		o.Kind = opDelete
	case w < 83:
		o.Kind = opFence
	case w < 90 && *flagReentry:
		o.Kind = opPair
		o.TTL2 = rlTTL(r)
	case h != nil:
		o.Kind = opCancel
		o.TTL = time.Duration(2000+r.IntN(6000)) * time.Millisecond
		o.Dur = time.Duration(r.IntN(3)) * time.Millisecond
		if o.Owner == h.owner {
			o.Owner = (o.Owner + 1) % nOwners
		}
	default:
		o.Kind = opWait
		o.Dur = time.Duration(10+r.IntN(300)) * time.Millisecond
	}
	if o.Kind == opObtain && !*flagReentry && h != nil && o.Owner == h.owner {
		o.Owner = (o.Owner + 1) % nOwners
	}
	if (o.Kind == opObtain || o.Kind == opRelease) && r.IntN(4) == 0 {
		o.Lose = 1 + r.IntN(7) // a non-empty set of masters
	}
	return o
}

// rlTTL is randTTL above the node timeout (redlock needs TTL − node
// timeout − drift positive).
func rlTTL(r *rand.Rand) time.Duration {
	if d := randTTL(r); d > rlNodeTimeout+150*time.Millisecond {
		return d
	}
	return rlNodeTimeout + time.Duration(150+r.IntN(300))*time.Millisecond
}

func (m *redlockModel) arm(client, mask int, names ...string) {
	for i, h := range m.hooks[client] {
		if mask&(1<<i) != 0 {
			h.arm(names...)
		}
	}
}

func (m *redlockModel) disarm(client int) {
	for _, h := range m.hooks[client] {
		h.disarm()
	}
}

func (m *redlockModel) step(ctx context.Context, o op) error {
	if err := m.resolve(ctx); err != nil {
		return err
	}
	switch o.Kind {
	case opObtain:
		pre := m.predict(o.Owner, o.Client)
		m.arm(o.Client, o.Lose, "acquire.lua")
		t0 := time.Now()
		l, err := m.clients[o.Client].TryObtain(lock.WithOwner(ctx, m.owners[o.Owner]), m.key, lock.WithTTL(o.TTL))
		el := time.Since(t0)
		m.disarm(o.Client)
		return m.obtained(ctx, o.ID, o.Owner, o.Client, o.TTL, pre, l, err, el)
	case opPair:
		pre := m.predict(o.Owner, o.Client)
		type res struct {
			l   lock.Lease
			err error
			ttl time.Duration
			el  time.Duration
		}
		ch := make(chan res, 2)
		for _, ttl := range []time.Duration{o.TTL, o.TTL2} {
			go func() {
				t0 := time.Now()
				l, err := m.clients[o.Client].TryObtain(lock.WithOwner(ctx, m.owners[o.Owner]), m.key, lock.WithTTL(ttl))
				ch <- res{l, err, ttl, time.Since(t0)}
			}()
		}
		a, b := <-ch, <-ch
		if a.err != nil && b.err == nil {
			a, b = b, a
		}
		if err := m.obtained(ctx, o.ID, o.Owner, o.Client, a.ttl, pre, a.l, a.err, a.el); err != nil {
			if b.l != nil {
				b.l.Release(ctx)
			}
			return err
		}
		// The second of one owner's pair on one client: a level of the first's hold.
		return m.obtained(ctx, -o.ID-1000, o.Owner, o.Client, b.ttl, m.predict(o.Owner, o.Client), b.l, b.err, b.el)
	case opRelease:
		lr := m.leases[o.Lease]
		if lr == nil {
			return nil
		}
		return m.release(ctx, lr, o.Lose)
	case opWait:
		time.Sleep(o.Dur)
	case opDelete:
		if err := m.admins[o.Master].Del(ctx, m.hashKey).Err(); err != nil {
			return err
		}
		for _, h := range m.holds {
			if h.on[o.Master] != onNone {
				h.on[o.Master] = onNone
			}
			if h.state == live && h.def() < quorum {
				m.lose(h)
			}
		}
	case opFence:
		return setFenceAhead(ctx, m.admins[o.Master], m.fenceKey)
	case opCancel:
		return m.cancelAtGrant(ctx, o)
	}
	return nil
}

// lose marks h gone: its levels left on masters expire by themselves.
func (m *redlockModel) lose(h *rlHold) {
	h.state, h.goneAt = gone, time.Now()
	for i, v := range h.on {
		if v == onDef {
			h.on[i] = onMaybe
		}
	}
}

// prediction is what a round of owner on client may get.
type prediction struct {
	local        *rlHold // a local re-entry of this hold is expected
	localMaybe   *rlHold // a gone hold whose loss may not be noticed yet: local re-entry or a round
	free, maybe  int     // masters certainly free of other owners, maybe free
	reenter      int64   // the largest token of the owner's holds on other clients (or gone ones on this client) it re-enters on some master, or 0
	freeMasters  [nMasters]bool
	maybeMasters [nMasters]bool
}

func (m *redlockModel) predict(owner, client int) prediction {
	var p prediction
	for _, h := range m.holds {
		if h.owner == owner && h.client == client && len(h.levels) > 0 {
			switch {
			case h.state == live:
				p.local = h
			case h.state == gone:
				p.localMaybe = h
			}
		}
	}
	for i := range nMasters {
		blocked, maybe := false, false
		for _, h := range m.holds {
			if h.owner == owner {
				// A round re-enters the owner's level left on master i and
				// answers its hold's token there: another client's hold, or
				// a gone hold of this client (found lost, so not re-entered
				// locally; see obtained).
				if h.on[i] != onNone && (h.client != client || h.state != live) {
					p.reenter = max(p.reenter, h.token)
				}
				continue
			}
			switch h.on[i] {
			case onDef:
				blocked = true
			case onMaybe:
				maybe = true
			}
		}
		switch {
		case blocked:
		case maybe:
			p.maybe++
			p.maybeMasters[i] = true
		default:
			p.free++
			p.freeMasters[i] = true
		}
	}
	return p
}

func (m *redlockModel) obtained(ctx context.Context, id, owner, client int, ttl time.Duration, p prediction, l lock.Lease, err error, el time.Duration) error {
	keep := func() {
		if l != nil {
			m.leases[id] = &rlLease{id: id, l: l, ttl: ttl, released: true, hold: &rlHold{state: gone}}
		}
	}
	// A gone hold the client may not have found lost yet is re-entered
	// locally only if the lease shares that hold's Lost: "the nested lease
	// carries the hold's token and shares its Lost" (redlock/doc.go,
	// Guarantees). Its token alone does not tell: a round of the client,
	// which found the hold lost, re-enters the owner's levels left on the
	// masters that still have them and answers their token ("Re-entry
	// through another Client with the same owner gets the largest of the
	// hold's tokens on its quorum", "Lease.Token is the largest token of
	// the quorum that granted the lock", Fencing tokens) whenever the
	// quorum that decided the round has no larger one (a master whose
	// fresh token is larger answered after the decision). Such a round is a
	// new hold with a level of its own on every master it took.
	if p.local != nil || (p.localMaybe != nil && err == nil && l.Token() == p.localMaybe.token && sharesLost(p.localMaybe, l)) {
		h := p.local
		if h == nil {
			h = p.localMaybe
		}
		if err != nil {
			return fail("reentry", "o%d re-entering its hold (token %d) on c%d: %v", owner, h.token, client, err)
		}
		if l.Token() != h.token {
			keep()
			return fail("token", "local re-entry by o%d answered token %d, the hold's is %d", owner, l.Token(), h.token)
		}
		lr := &rlLease{id: id, l: l, ttl: ttl, hold: h}
		h.levels[id] = lr
		m.leases[id] = lr
		return nil
	}
	if err != nil {
		if !errors.Is(err, lock.ErrNotObtained) {
			return fail("error", "TryObtain: %v", err)
		}
		if p.free >= quorum {
			if el > rlNodeTimeout || ttl < 400*time.Millisecond {
				return m.settle(ctx, "after an acquisition refused by timing")
			}
			return fail("free", "o%d on c%d could not obtain: %d masters free of other owners: %v (after %v)", owner, client, p.free, err, el)
		}
		return m.settle(ctx, "after a refused acquisition")
	}
	if p.free+p.maybe < quorum {
		keep()
		return fail("exclusion", "o%d obtained on c%d (token %d) while only %d masters were free of other owners' holds (%s)",
			owner, client, l.Token(), p.free+p.maybe, m.describe())
	}
	switch {
	case p.reenter == 0 && l.Token() <= m.maxToken:
		keep()
		return fail("token", "fresh acquisition by o%d answered token %d, not above the largest before, %d", owner, l.Token(), m.maxToken)
	case p.reenter != 0 && l.Token() < p.reenter:
		keep()
		return fail("token", "o%d re-entering its hold of another client (token %d) answered token %d", owner, p.reenter, l.Token())
	}
	m.maxToken = max(m.maxToken, l.Token())
	h := &rlHold{owner: owner, client: client, token: l.Token(), ttl: ttl, levels: map[int]*rlLease{}}
	// Which masters it took, by what they hold (a master that answers
	// after the quorum did, or after the node timeout, or not at all, may
	// not have it yet, or ever): the free ones are given a little time.
	took := func() bool {
		all := true
		for i := range nMasters {
			if h.on[i] == onDef || !(p.freeMasters[i] || p.maybeMasters[i]) {
				continue
			}
			if m.count(ctx, i, owner) > m.levelsOf(owner, i) {
				h.on[i] = onDef
			} else if p.freeMasters[i] {
				all = false
			}
		}
		return all
	}
	waitFor(rlNodeTimeout+100*time.Millisecond, took)
	if h.def() < quorum {
		keep()
		return fail("exclusion", "o%d obtained on c%d (token %d), but only masters %v have its level", owner, client, l.Token(), h.on)
	}
	m.holds = append(m.holds, h)
	lr := &rlLease{id: id, l: l, ttl: ttl, hold: h}
	h.levels[id] = lr
	m.leases[id] = lr
	return nil
}

// sharesLost reports whether l is a level of the client's hold that h
// models: a local re-entry shares its hold's Lost channel.
func sharesLost(h *rlHold, l lock.Lease) bool {
	for _, lr := range h.levels {
		if lr.l.Lost() == l.Lost() {
			return true
		}
	}
	return false
}

// levelsOf counts the holds of owner with a definite level on master i.
func (m *redlockModel) levelsOf(owner, i int) int {
	n := 0
	for _, h := range m.holds {
		if h.owner == owner && h.on[i] == onDef {
			n++
		}
	}
	return n
}

func (m *redlockModel) count(ctx context.Context, i, owner int) int {
	n, _ := m.admins[i].HGet(ctx, m.hashKey, m.owners[owner]).Int()
	return n
}

// settle waits (bounded) until the masters' counts agree with the model
// again after an attempt that failed (its levels are released, some in the
// background).
func (m *redlockModel) settle(ctx context.Context, why string) error {
	var last error
	if waitFor(3*time.Second, func() bool { last = m.checkCounts(ctx); return last == nil }) {
		return nil
	}
	return fail("levels", "%s: %v", why, last)
}

func (m *redlockModel) release(ctx context.Context, lr *rlLease, lose int) error {
	return m.releaseSettle(ctx, lr, lose, true)
}

// releaseSettle is release; with settle, the masters' counts must agree
// with the model after it (not while a waiter may take the lock).
func (m *redlockModel) releaseSettle(ctx context.Context, lr *rlLease, lose int, settle bool) error {
	h := lr.hold
	inner := len(h.levels) > 1
	reported := lr.l.(lock.LeaseStatus).Err() != nil
	// What a quorum of masters has, before.
	def, notHeld := 0, 0
	for _, v := range h.on {
		switch v {
		case onDef:
			def++
		case onNone:
			notHeld++
		}
	}
	if !inner && !lr.released {
		m.arm(firstClient(m, lr), lose, "release.lua", "handoff.lua")
	}
	err := lr.l.Release(ctx)
	m.disarm(firstClient(m, lr))
	was := lr.released
	lr.released = true
	what := "releasing"
	if lose != 0 && !inner && !was {
		what = fmt.Sprintf("releasing (replies of masters %03b lost, commands resent)", lose)
	}
	if was {
		if !errors.Is(err, lock.ErrNotHeld) {
			return releasedTwice(what, lr.id, err)
		}
		return nil
	}
	delete(h.levels, lr.id)
	if inner {
		switch {
		case h.state == live && err != nil && !m.timing(h):
			return fail("release", "%s L%d, an inner level of the live hold of o%d: %v, want nil", what, lr.id, h.owner, err)
		case reported && err == nil:
			return fail("release", "%s L%d, an inner level of a hold reported lost: nil, want ErrNotHeld", what, lr.id)
		}
		return nil
	}
	// The outermost level: a round on every master.
	for i := range h.on {
		h.on[i] = onNone
	}
	state := h.state
	h.state = ended
	switch {
	case def >= quorum && err != nil:
		if errors.Is(err, lock.ErrNotHeld) && m.timing(h) {
			return m.settle(ctx, "after a timing loss")
		}
		return fail("release", "%s L%d (o%d, token %d), the outermost level of a hold that %d masters have: %v, want nil",
			what, lr.id, h.owner, h.token, def, err)
	case notHeld > nMasters-quorum && !errors.Is(err, lock.ErrNotHeld):
		return fail("release", "%s L%d (o%d, token %d), whose hold %d masters no longer have (%v): %v, want ErrNotHeld",
			what, lr.id, h.owner, h.token, notHeld, state == gone, err)
	}
	if !settle {
		return nil
	}
	return m.settle(ctx, "after a release")
}

func firstClient(m *redlockModel, lr *rlLease) int { return lr.hold.client }

// timing reports whether h is a short hold that reports lost: a starved
// process.
func (m *redlockModel) timing(h *rlHold) bool {
	if h.ttl >= longTTL {
		return false
	}
	for _, lr := range m.leases {
		if lr.hold == h && lr.l.(lock.LeaseStatus).Err() != nil {
			return true
		}
	}
	return false
}

func (m *redlockModel) cancelAtGrant(ctx context.Context, o op) error {
	h := m.holder()
	if h == nil || h.owner == o.Owner {
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
		l, err := m.clients[o.Client].Obtain(wctx, m.key, lock.WithTTL(o.TTL))
		ch <- res{l, err}
	}()
	time.Sleep(40 * time.Millisecond)
	// Release every hold of the holder, inner levels first.
	for _, x := range m.holds {
		if x.owner != h.owner || len(x.levels) == 0 {
			continue
		}
		for _, id := range slices.Backward(slices.Sorted(maps.Keys(x.levels))) {
			if err := m.releaseSettle(ctx, x.levels[id], 0, false); err != nil {
				cancel()
				if r := <-ch; r.l != nil {
					r.l.Release(ctx)
				}
				return err
			}
		}
	}
	time.Sleep(o.Dur)
	cancel()
	r := <-ch
	if r.err == nil {
		if err := m.obtained(ctx, o.ID, o.Owner, o.Client, o.TTL, m.predict(o.Owner, o.Client), r.l, nil, 0); err != nil {
			return err
		}
		return m.settle(ctx, "after a waiter obtained at its cancellation")
	}
	if !errors.Is(r.err, lock.ErrNotObtained) {
		return fail("error", "cancelled Obtain: %v, want ErrNotObtained", r.err)
	}
	var last error
	if !waitFor(time.Second, func() bool { last = m.checkCounts(ctx); return last == nil }) {
		return fail("ghost", "Obtain of o%d cancelled at its grant returned %v, but a second later: %v", o.Owner, r.err, last)
	}
	return nil
}

// resolve drops the maybe-levels that Redis no longer has.
func (m *redlockModel) resolve(ctx context.Context) error {
	for i := range nMasters {
		for _, h := range m.holds {
			if h.on[i] != onMaybe || m.levelsOf(h.owner, i) > 0 {
				continue
			}
			n, err := m.admins[i].HExists(ctx, m.hashKey, m.owners[h.owner]).Result()
			if err != nil {
				return err
			}
			if !n {
				h.on[i] = onNone
			}
		}
	}
	return nil
}

// checkCounts compares each master's owner counts with the model.
func (m *redlockModel) checkCounts(ctx context.Context) error {
	for i := range nMasters {
		got, err := m.admins[i].HGetAll(ctx, m.hashKey).Result()
		if err != nil {
			return err
		}
		for o := range nOwners {
			lo, hi := 0, 0
			for _, h := range m.holds {
				if h.owner == o {
					switch h.on[i] {
					case onDef:
						lo++
						hi++
					case onMaybe:
						hi++
					}
				}
			}
			var n int
			fmt.Sscan(got[m.owners[o]], &n)
			if n < lo || n > hi {
				return fmt.Errorf("master m%d: o%d has %d levels, the model %d..%d (%s)", i, o, n, lo, hi, m.describe())
			}
		}
	}
	return nil
}

func (m *redlockModel) describe() string {
	s := ""
	for _, h := range m.holds {
		if h.state == ended {
			continue
		}
		s += fmt.Sprintf("[o%d c%d token %d %v on %v]", h.owner, h.client, h.token, map[hstate]string{live: "live", gone: "gone"}[h.state], h.on)
	}
	return s
}

func (m *redlockModel) check(ctx context.Context) error {
	if err := m.resolve(ctx); err != nil {
		return err
	}
	for _, id := range m.ids(false) {
		lr := m.leases[id]
		st := lr.l.(lock.LeaseStatus)
		lerr := st.Err()
		if lerr != nil {
			if !errors.Is(lerr, lock.ErrLockLost) || !isClosed(lr.l.Lost()) || !st.Until().IsZero() {
				return fail("loss", "L%d: Err() = %v, Lost closed %v, Until %v: inconsistent", id, lerr, isClosed(lr.l.Lost()), st.Until())
			}
		}
		h := lr.hold
		switch h.state {
		case live:
			if lerr != nil {
				if m.timing(h) {
					return m.resyncHold(ctx, h)
				}
				return fail("loss", "L%d (o%d, token %d, ttl %v), a level of a live hold (on %v), reports lost: %v", id, h.owner, h.token, lr.ttl, h.on, lerr)
			}
		case gone:
			if lerr == nil && time.Now().After(h.goneAt.Add(h.ttl/3+lossSlack)) {
				select {
				case <-lr.l.Lost():
				case <-time.After(300 * time.Millisecond):
					return fail("loss", "L%d (o%d, token %d, ttl %v): its hold lost its quorum %v ago, still not reported lost",
						id, h.owner, h.token, h.ttl, time.Since(h.goneAt).Round(time.Millisecond))
				}
			}
		}
	}
	if err := m.checkCounts(ctx); err != nil {
		return fail("levels", "%v", err)
	}
	// The Until of every lease that reports held is covered by a quorum of
	// its hold's masters. Of the masters where the hold is defined, not
	// only of those that answered its last renewal round first: a round
	// renews the others too (their commands run on after the quorum
	// decided it), so after a deletion (m.step's opDelete) the ones left
	// must still cover it. A round that dropped the late master's renewal
	// failed here under load: that master expired one renewal interval,
	// less the drift, before Until (redlock's TestRenewalReachesLateMaster).
	for _, h := range m.holds {
		if h.state != live || len(h.levels) == 0 {
			continue
		}
		var until time.Time
		var which int
		for id, lr := range h.levels {
			st := lr.l.(lock.LeaseStatus)
			if u := st.Until(); st.Err() == nil && u.After(until) {
				until, which = u, id
			}
		}
		if until.IsZero() {
			continue
		}
		ok := 0
		var pttls []time.Duration
		for i := range nMasters {
			if h.on[i] != onDef {
				continue
			}
			pttl, err := m.admins[i].PTTL(ctx, m.hashKey).Result()
			if err != nil {
				return err
			}
			pttls = append(pttls, pttl)
			if pttl >= 0 && !time.Now().Add(pttl).Before(until.Add(-pttlSlack)) {
				ok++
			}
		}
		if ok < quorum {
			return fail("pttl", "L%d (o%d, ttl %v) reports held for %v more, but its masters' keys expire in %v: another owner can take a quorum first",
				which, h.owner, h.levels[which].ttl, time.Until(until).Round(time.Millisecond), pttls)
		}
	}
	return nil
}

// resyncHold follows a timing loss of a short hold: release it, and wait
// for the masters to agree with the model.
func (m *redlockModel) resyncHold(ctx context.Context, h *rlHold) error {
	for _, lr := range h.levels {
		lr.l.Release(ctx)
		lr.released = true
	}
	h.levels = map[int]*rlLease{}
	h.state = ended
	for i := range h.on {
		if h.on[i] != onNone {
			h.on[i] = onMaybe
		}
	}
	h.goneAt = time.Now()
	var last error
	if !waitFor(h.ttl+2*time.Second, func() bool {
		if err := m.resolve(ctx); err != nil {
			return false
		}
		last = m.checkCounts(ctx)
		return last == nil && h.on == [nMasters]int{}
	}) {
		return fail("free", "after a timing loss: %v", last)
	}
	return nil
}

func (m *redlockModel) finish(ctx context.Context) error {
	for _, id := range m.ids(false) {
		lr := m.leases[id]
		h := lr.hold
		if h.state != gone {
			continue
		}
		if !finishLost(lr.l.Lost(), h.goneAt.Add(h.ttl/3+lossSlack)) {
			return fail("loss", "L%d (o%d, token %d, ttl %v): its hold lost its quorum %v ago, still not reported lost",
				id, h.owner, h.token, h.ttl, time.Since(h.goneAt).Round(time.Millisecond))
		}
	}
	return nil
}

func (m *redlockModel) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, lr := range m.leases {
		lr.l.Release(ctx)
	}
	for _, c := range m.clients {
		c.Close()
	}
	for _, r := range m.rdbs {
		r.Close()
	}
	for _, a := range m.admins {
		a.Del(ctx, m.hashKey, m.fenceKey)
		a.Close()
	}
}
