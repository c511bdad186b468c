package modeltest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
)

// The model of the Redis read-write lock (lock.NewRW) on one key: at most
// one writer owner (its levels, one token) and any number of reader owners
// (their levels) — readers and a writer of another owner never together;
// the writer may also read (a downgrade); a reader may not write
// (ErrUpgrade). Each lease has its own watchdog and TTL.
//
//   - a write TryObtain succeeds on a free key (a token above every token
//     before), re-enters the owner's write hold (its token), answers
//     ErrUpgrade to a reader, ErrNotObtained otherwise;
//   - a read TryObtain succeeds unless another owner writes;
//   - Release of a live level answers nil (also after a lost reply), of a
//     released or deleted one ErrNotHeld;
//   - Redis's writer, its count, each reader's count agree with the model;
//     the writer's expiry ("we"), each reader's expiry (its score) and the
//     hash's PTTL never end before the Until of a lease that reports held;
//   - leases of a deleted lock report the loss by their next renewal (TTL/3)
//     plus slack.

type rwLeaseRec struct {
	id       int
	l        lock.Lease
	owner    int
	client   int
	read     bool
	ttl      time.Duration
	state    hstate
	goneAt   time.Time
	released bool
}

type rwModel struct {
	t        *testing.T
	key      string
	hashKey  string
	readKey  string
	fenceKey string
	admin    *redis.Client
	rdbs     []*redis.Client
	hooks    []*loser
	rws      []*lock.RW
	owners   []string
	leases   map[int]*rwLeaseRec
	writer   int   // the writing owner, -1 none
	wtoken   int64 // its token
	maxToken int64
}

func newRWModel(t *testing.T, seed uint64) model {
	m := &rwModel{t: t, key: uniqueKey("rw", seed), leases: map[int]*rwLeaseRec{}, writer: -1}
	m.hashKey = lock.DefaultPrefix + "rw:{" + m.key + "}"
	m.readKey = m.hashKey + ":r"
	m.fenceKey = m.hashKey + ":fence"
	m.admin = redis.NewClient(&redis.Options{Addr: masters[0].Addr()})
	for range 2 {
		rdb, h := newRedis(masters[0].Addr(), false)
		m.rdbs, m.hooks = append(m.rdbs, rdb), append(m.hooks, h)
		m.rws = append(m.rws, lock.NewRW(rdb, lock.WithLogger(quiet)))
	}
	for i := range nOwners {
		m.owners = append(m.owners, fmt.Sprintf("o%d-%x", i, seed&0xffff))
	}
	return m
}

// live returns the ids of the live, unreleased leases (of one side, or
// both), sorted.
func (m *rwModel) live(side int) []int {
	var ids []int
	for id, lr := range m.leases {
		if lr.state == live && !lr.released && (side < 0 || lr.read == (side == 1)) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func (m *rwModel) readers() map[int]int {
	r := map[int]int{}
	for _, id := range m.live(1) {
		r[m.leases[id].owner]++
	}
	return r
}

func (m *rwModel) all() []int {
	var ids []int
	for id := range m.leases {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (m *rwModel) gen(r *rand.Rand, id int) op {
	o := op{ID: id, RW: true, Owner: r.IntN(nOwners), Client: r.IntN(len(m.rws)), TTL: randTTL(r), Read: r.IntN(2) == 0}
	lv, all := m.live(-1), m.all()
	if fenceFirst(r, id) {
		o.Kind = opFence
		return o
	}
	w := r.IntN(100)
	switch {
	case w < 38:
		o.Kind = opObtain
		if len(lv) > 0 && r.IntN(2) == 0 && *flagReentry {
			lr := m.leases[lv[r.IntN(len(lv))]]
			o.Owner, o.Read = lr.owner, lr.read // nested, another TTL
		}
	case w < 62 && len(all) > 0:
		o.Kind = opRelease
		o.Lease = pickLease(r, lv, all)
	case w < 75:
		o.Kind = opWait
		o.Dur = randWait(r)
	case w < 84:
		o.Kind = opDelete
	case w < 89:
		o.Kind = opFence
	case w < 95 && *flagReentry:
		o.Kind = opPair
		o.TTL2 = randTTL(r)
	default:
		o.Kind = opWait
		o.Dur = time.Duration(10+r.IntN(300)) * time.Millisecond
	}
	if o.Kind == opObtain && !*flagReentry {
		holds := func(owner int) bool {
			for _, id := range lv {
				if lr := m.leases[id]; lr.owner == owner && lr.read == o.Read {
					return true
				}
			}
			return false
		}
		for range nOwners {
			if !holds(o.Owner) {
				break
			}
			o.Owner = (o.Owner + 1) % nOwners
		}
		if holds(o.Owner) {
			o.Kind, o.Dur = opWait, 10*time.Millisecond
		}
	}
	if (o.Kind == opObtain || o.Kind == opRelease) && r.IntN(5) == 0 {
		o.Lose = 1
	}
	return o
}

func (m *rwModel) side(read bool) func(*lock.RW) lock.Locker {
	if read {
		return (*lock.RW).Read
	}
	return (*lock.RW).Write
}

func (m *rwModel) step(ctx context.Context, o op) error {
	switch o.Kind {
	case opObtain:
		if o.Lose != 0 {
			m.hooks[o.Client].arm("rw_acquire.lua")
		}
		t0 := time.Now()
		l, err := m.side(o.Read)(m.rws[o.Client]).TryObtain(lock.WithOwner(ctx, m.owners[o.Owner]), m.key, lock.WithTTL(o.TTL))
		el := time.Since(t0)
		m.hooks[o.Client].disarm()
		return m.obtained(ctx, o.ID, o.Owner, o.Client, o.Read, o.TTL, l, err, el)
	case opPair:
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
				l, err := m.side(o.Read)(m.rws[o.Client]).TryObtain(lock.WithOwner(ctx, m.owners[o.Owner]), m.key, lock.WithTTL(ttl))
				ch <- res{l, err, ttl, time.Since(t0)}
			}()
		}
		a, b := <-ch, <-ch
		if a.err != nil && b.err == nil {
			a, b = b, a
		}
		if err := m.obtained(ctx, o.ID, o.Owner, o.Client, o.Read, a.ttl, a.l, a.err, a.el); err != nil {
			if b.l != nil {
				b.l.Release(ctx)
			}
			return err
		}
		return m.obtained(ctx, -o.ID-1000, o.Owner, o.Client, o.Read, b.ttl, b.l, b.err, b.el)
	case opRelease:
		lr := m.leases[o.Lease]
		if lr == nil {
			return nil
		}
		if o.Lose != 0 {
			m.hooks[lr.client].arm("rw_release.lua")
		}
		err := lr.l.Release(ctx)
		m.hooks[lr.client].disarm()
		return m.released(ctx, lr, err, o.Lose != 0)
	case opWait:
		time.Sleep(o.Dur)
	case opDelete:
		if err := m.admin.Del(ctx, m.hashKey, m.readKey).Err(); err != nil {
			return err
		}
		now := time.Now()
		for _, id := range m.live(-1) {
			m.leases[id].state, m.leases[id].goneAt = gone, now
		}
		m.writer = -1
	case opFence:
		return setFenceAhead(ctx, m.admin, m.fenceKey)
	}
	return nil
}

func (m *rwModel) obtained(ctx context.Context, id, owner, client int, read bool, ttl time.Duration, l lock.Lease, err error, el time.Duration) error {
	side := "write"
	if read {
		side = "read"
	}
	readers := m.readers()
	record := func(ok bool) {
		lr := &rwLeaseRec{id: id, l: l, owner: owner, client: client, read: read, ttl: ttl}
		if !ok {
			lr.released, lr.state = true, gone
		}
		m.leases[id] = lr
	}
	var want string // "ok", "reenter", "upgrade", "busy"
	switch {
	case !read && m.writer == owner:
		want = "reenter"
	case !read && readers[owner] > 0:
		want = "upgrade"
	case !read && (m.writer >= 0 || len(readers) > 0):
		want = "busy"
	case !read:
		want = "fresh"
	case m.writer >= 0 && m.writer != owner:
		want = "busy"
	default:
		want = "ok"
	}
	switch want {
	case "upgrade":
		if err == nil {
			record(false)
			return fail("exclusion", "o%d, a reader, obtained the write side (token %d)", owner, l.Token())
		}
		if !errors.Is(err, lock.ErrUpgrade) {
			return fail("error", "o%d, a reader, asking for the write side: %v, want ErrUpgrade", owner, err)
		}
		return nil
	case "busy":
		if err == nil {
			record(false)
			return fail("exclusion", "o%d obtained the %s side on c%d (token %d) while the model has writer o%d and readers %v",
				owner, side, client, l.Token(), m.writer, readers)
		}
		if !errors.Is(err, lock.ErrNotObtained) {
			return fail("error", "%s TryObtain of a held key: %v, want ErrNotObtained", side, err)
		}
		return nil
	}
	if err != nil {
		if errors.Is(err, lock.ErrNotObtained) && (el > ttl/4 || m.timing()) {
			return m.resync(ctx)
		}
		return fail("free", "o%d on c%d could not obtain the %s side (%s): %v (after %v)", owner, client, side, want, err, el)
	}
	switch want {
	case "reenter":
		if l.Token() != m.wtoken {
			record(false)
			return fail("token", "write re-entry by o%d answered token %d, the hold's is %d", owner, l.Token(), m.wtoken)
		}
	case "fresh":
		if l.Token() <= m.maxToken {
			record(false)
			return fail("token", "fresh write acquisition by o%d answered token %d, not above the largest before, %d", owner, l.Token(), m.maxToken)
		}
		m.writer, m.wtoken, m.maxToken = owner, l.Token(), l.Token()
	}
	record(true)
	return nil
}

func (m *rwModel) released(ctx context.Context, lr *rwLeaseRec, err error, resent bool) error {
	what := releasing(resent)
	was := lr.released
	lr.released = true
	switch {
	case was:
		if !errors.Is(err, lock.ErrNotHeld) {
			return releasedTwice(what, lr.id, err)
		}
	case lr.state == live:
		if !lr.read && len(m.live(0)) == 0 {
			m.writer = -1
		}
		if err != nil {
			if errors.Is(err, lock.ErrNotHeld) && m.timing() {
				return m.resync(ctx)
			}
			return fail("release", "%s L%d, a live level (o%d): %v, want nil", what, lr.id, lr.owner, err)
		}
	case lr.state == gone:
		if !errors.Is(err, lock.ErrNotHeld) {
			return fail("release", "%s L%d (o%d), whose lock was deleted: %v, want ErrNotHeld", what, lr.id, lr.owner, err)
		}
	}
	return nil
}

// timing reports whether a short live lease reports lost.
func (m *rwModel) timing() bool {
	for _, id := range m.live(-1) {
		lr := m.leases[id]
		if lr.ttl < longTTL && lr.l.(lock.LeaseStatus).Err() != nil {
			return true
		}
	}
	return false
}

// resync follows a timing loss: every live lease is released, and the
// lock must become free.
func (m *rwModel) resync(ctx context.Context) error {
	var ttl time.Duration
	for _, id := range m.live(-1) {
		lr := m.leases[id]
		lr.l.Release(ctx)
		lr.released = true
		ttl = max(ttl, lr.ttl)
	}
	m.writer = -1
	var last error
	if !waitFor(ttl+time.Second, func() bool { last = m.checkRedis(ctx); return last == nil }) {
		return fail("free", "after a timing loss: %v", last)
	}
	return nil
}

// rwState is what Redis holds: the writer (if its expiry is ahead), its
// count and expiry, each live reader's count and expiry, the hash's PTTL.
type rwState struct {
	writer  string
	wc      int
	we      time.Time
	readers map[string]int
	rexp    map[string]time.Time
	pttl    time.Duration
}

func (m *rwModel) read(ctx context.Context) (rwState, error) {
	s := rwState{readers: map[string]int{}, rexp: map[string]time.Time{}}
	h, err := m.admin.HGetAll(ctx, m.hashKey).Result()
	if err != nil {
		return s, err
	}
	zs, err := m.admin.ZRangeWithScores(ctx, m.readKey, 0, -1).Result()
	if err != nil {
		return s, err
	}
	if s.pttl, err = m.admin.PTTL(ctx, m.hashKey).Result(); err != nil {
		return s, err
	}
	now := time.Now()
	if we, _ := strconv.ParseInt(h["we"], 10, 64); h["w"] != "" && time.UnixMilli(we).After(now) {
		s.writer, s.we = h["w"], time.UnixMilli(we)
		s.wc, _ = strconv.Atoi(h["wc"])
	}
	for _, z := range zs {
		exp := time.UnixMilli(int64(z.Score))
		o := z.Member.(string)
		if exp.After(now) {
			s.rexp[o] = exp
			s.readers[o], _ = strconv.Atoi(h["r:"+o])
		}
	}
	return s, nil
}

// checkRedis compares Redis with the model, and each live lease's Until
// with the expiries that hold it.
func (m *rwModel) checkRedis(ctx context.Context) error {
	untils := map[int]time.Time{}
	for _, id := range m.live(-1) {
		st := m.leases[id].l.(lock.LeaseStatus)
		if st.Err() == nil {
			untils[id] = st.Until()
		}
	}
	s, err := m.read(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	wl := m.live(0)
	switch {
	case m.writer < 0 && s.writer != "":
		return fail("free", "the model has no writer, Redis has %s (count %d)", s.writer, s.wc)
	case m.writer >= 0 && s.writer != m.owners[m.writer]:
		return fail("exclusion", "the model has writer o%d (levels %v), Redis has %q", m.writer, wl, s.writer)
	case m.writer >= 0 && s.wc != len(wl):
		return fail("levels", "writer o%d has %d levels in the model (%v), Redis counts %d", m.writer, len(wl), wl, s.wc)
	}
	want := m.readers()
	for o := range nOwners {
		if got := s.readers[m.owners[o]]; got != want[o] {
			return fail("levels", "reader o%d has %d levels in the model, Redis %d (live readers %v)", o, want[o], got, s.readers)
		}
	}
	for _, id := range m.live(-1) {
		lr := m.leases[id]
		u, ok := untils[id]
		if !ok {
			continue
		}
		exp := s.we
		what := "the writer's expiry"
		if lr.read {
			exp, what = s.rexp[m.owners[lr.owner]], "its reader's expiry"
		}
		if exp.Before(u.Add(-pttlSlack)) {
			return fail("pttl", "L%d (o%d %s, ttl %v) reports held for %v more, but %s is in %v: another owner can take it first",
				id, lr.owner, map[bool]string{true: "read", false: "write"}[lr.read], lr.ttl, u.Sub(now).Round(time.Millisecond), what, exp.Sub(now).Round(time.Millisecond))
		}
		if s.pttl >= 0 && now.Add(s.pttl).Before(u.Add(-pttlSlack)) {
			return fail("pttl", "L%d (o%d, ttl %v) reports held for %v more, but the lock's hash expires in %v",
				id, lr.owner, lr.ttl, u.Sub(now).Round(time.Millisecond), s.pttl)
		}
	}
	return nil
}

func (m *rwModel) check(ctx context.Context) error {
	for _, id := range m.all() {
		lr := m.leases[id]
		if lr.released {
			continue
		}
		st := lr.l.(lock.LeaseStatus)
		lerr := st.Err()
		if lerr != nil && (!errors.Is(lerr, lock.ErrLockLost) || !isClosed(lr.l.Lost()) || !st.Until().IsZero()) {
			return fail("loss", "L%d: Err() = %v, Lost closed %v, Until %v: inconsistent", id, lerr, isClosed(lr.l.Lost()), st.Until())
		}
		switch lr.state {
		case live:
			if lerr != nil {
				if m.timing() {
					return m.resync(ctx)
				}
				return fail("loss", "L%d (o%d, ttl %v), a live level, reports lost: %v", id, lr.owner, lr.ttl, lerr)
			}
		case gone:
			if lerr == nil && time.Now().After(lr.goneAt.Add(lr.ttl/3+lossSlack)) && !waitLost(lr.l.Lost(), 300*time.Millisecond) {
				return fail("loss", "L%d (o%d, ttl %v): its lock was deleted %v ago, still not reported lost", id, lr.owner, lr.ttl, time.Since(lr.goneAt).Round(time.Millisecond))
			}
		}
	}
	return m.checkRedis(ctx)
}

func (m *rwModel) finish(ctx context.Context) error {
	for _, id := range m.all() {
		lr := m.leases[id]
		if lr.released || lr.state != gone {
			continue
		}
		if !finishLost(lr.l.Lost(), lr.goneAt.Add(lr.ttl/3+lossSlack)) {
			return fail("loss", "L%d (o%d, ttl %v): its lock was deleted %v ago, still not reported lost", id, lr.owner, lr.ttl, time.Since(lr.goneAt).Round(time.Millisecond))
		}
	}
	return nil
}

func (m *rwModel) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, lr := range m.leases {
		lr.l.Release(ctx)
	}
	for _, rw := range m.rws {
		rw.Close()
	}
	for _, r := range m.rdbs {
		r.Close()
	}
	m.admin.Del(ctx, m.hashKey, m.readKey, m.fenceKey, m.hashKey+":ww")
	m.admin.Close()
}
