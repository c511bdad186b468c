package modeltest_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/semaphore"
)

// The model of the Redis semaphore with N permits: a set of live permits.
//
//   - TryAcquire succeeds while fewer than N are live (with a token larger
//     than every token before) and fails with ErrNotObtained at N;
//   - Release of a live permit answers nil (also when its reply was lost
//     and the command resent), of a released or deleted one ErrNotHeld;
//   - the holders' set in Redis has exactly the live permits (never more
//     than N), each scored (its expiry) no earlier than its Until;
//   - a deleted permit (ZREM, as an eviction would) reports the loss by its
//     next renewal (TTL/3) plus slack.

const semPermits = 2

type semPermit struct {
	id       int
	p        *semaphore.Permit
	client   int
	ttl      time.Duration
	state    hstate
	goneAt   time.Time
	released bool
}

type semModel struct {
	t        *testing.T
	name     string
	zkey     string
	fenceKey string
	admin    *redis.Client
	rdbs     []*redis.Client
	hooks    []*loser
	clients  []*semaphore.Client
	permits  map[int]*semPermit
	maxToken int64
}

func newSemModel(t *testing.T, seed uint64) model {
	m := &semModel{t: t, name: uniqueKey("sem", seed), permits: map[int]*semPermit{}}
	m.zkey = semaphore.DefaultPrefix + "{" + m.name + "}"
	m.fenceKey = m.zkey + ":fence"
	m.admin = redis.NewClient(&redis.Options{Addr: masters[0].Addr()})
	for range 2 {
		rdb, h := newRedis(masters[0].Addr(), false)
		m.rdbs, m.hooks = append(m.rdbs, rdb), append(m.hooks, h)
		m.clients = append(m.clients, semaphore.New(rdb, semaphore.WithPermits(semPermits), semaphore.WithLogger(quiet)))
	}
	return m
}

func (m *semModel) live() []int {
	var ids []int
	for id, p := range m.permits {
		if p.state == live && !p.released {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func (m *semModel) all() []int {
	var ids []int
	for id := range m.permits {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (m *semModel) gen(r *rand.Rand, id int) op {
	o := op{ID: id, NoOwner: true, Client: r.IntN(len(m.clients)), TTL: randTTL(r)}
	lv, all := m.live(), m.all()
	if fenceFirst(r, id) {
		o.Kind = opFence
		return o
	}
	w := r.IntN(100)
	switch {
	case w < 35:
		o.Kind = opObtain
	case w < 60 && len(all) > 0:
		o.Kind = opRelease
		o.Lease = pickLease(r, lv, all)
	case w < 72:
		o.Kind = opWait
		o.Dur = randWait(r)
	case w < 82 && len(lv) > 0:
		o.Kind = opDelete // one permit's member
		o.Lease = lv[r.IntN(len(lv))]
	case w < 87:
		o.Kind = opFence
	case len(lv) == semPermits:
		o.Kind = opCancel
		o.TTL = time.Duration(2000+r.IntN(6000)) * time.Millisecond
		o.Dur = time.Duration(r.IntN(3)) * time.Millisecond
	default:
		o.Kind = opWait
		o.Dur = time.Duration(10+r.IntN(300)) * time.Millisecond
	}
	if (o.Kind == opObtain || o.Kind == opRelease) && r.IntN(5) == 0 {
		o.Lose = 1
	}
	return o
}

func (m *semModel) step(ctx context.Context, o op) error {
	switch o.Kind {
	case opObtain:
		if o.Lose != 0 {
			m.hooks[o.Client].arm("sem_acquire.lua")
		}
		t0 := time.Now()
		p, err := m.clients[o.Client].TryAcquire(ctx, m.name, lock.WithTTL(o.TTL))
		el := time.Since(t0)
		m.hooks[o.Client].disarm()
		return m.acquired(ctx, o.ID, o.Client, o.TTL, p, err, el)
	case opRelease:
		p := m.permits[o.Lease]
		if p == nil {
			return nil
		}
		if o.Lose != 0 {
			m.hooks[p.client].arm("sem_release.lua")
		}
		err := p.p.Release(ctx)
		m.hooks[p.client].disarm()
		return m.released(ctx, p, err, o.Lose != 0)
	case opWait:
		time.Sleep(o.Dur)
	case opDelete:
		p := m.permits[o.Lease]
		if p == nil || p.released || p.state != live {
			return nil
		}
		if err := m.admin.ZRem(ctx, m.zkey, p.p.ID()).Err(); err != nil {
			return err
		}
		p.state, p.goneAt = gone, time.Now()
	case opFence:
		return setFenceAhead(ctx, m.admin, m.fenceKey)
	case opCancel:
		return m.cancelAtGrant(ctx, o)
	}
	return nil
}

func (m *semModel) acquired(ctx context.Context, id, client int, ttl time.Duration, p *semaphore.Permit, err error, el time.Duration) error {
	n := len(m.live())
	if err != nil {
		if !errors.Is(err, lock.ErrNotObtained) {
			return fail("error", "TryAcquire: %v", err)
		}
		if n < semPermits {
			if el > ttl/4 || m.timing() {
				return m.resync(ctx)
			}
			return fail("free", "c%d could not acquire a permit with %d of %d held: %v (after %v)", client, n, semPermits, err, el)
		}
		return nil
	}
	sp := &semPermit{id: id, p: p, client: client, ttl: ttl}
	m.permits[id] = sp
	if n >= semPermits {
		sp.released = true // not the model's
		return fail("exclusion", "c%d acquired a permit (token %d) while %d of %d are held (%v)", client, p.Token(), n, semPermits, m.live())
	}
	if p.Token() <= m.maxToken {
		return fail("token", "permit L%d has token %d, not above the largest before, %d", id, p.Token(), m.maxToken)
	}
	m.maxToken = p.Token()
	return nil
}

func (m *semModel) released(ctx context.Context, p *semPermit, err error, resent bool) error {
	what := releasing(resent)
	was := p.released
	p.released = true
	switch {
	case was:
		if !errors.Is(err, lock.ErrNotHeld) {
			return releasedTwice(what, p.id, err)
		}
	case p.state == live:
		if err != nil {
			if errors.Is(err, lock.ErrNotHeld) && p.ttl < longTTL && p.p.Err() != nil {
				return m.resync(ctx)
			}
			return fail("release", "%s L%d, a live permit: %v, want nil", what, p.id, err)
		}
	case p.state == gone:
		if !errors.Is(err, lock.ErrNotHeld) {
			return fail("release", "%s L%d, a deleted permit: %v, want ErrNotHeld", what, p.id, err)
		}
	}
	return nil
}

// timing reports whether a short live permit reports lost (a starved
// process).
func (m *semModel) timing() bool {
	for _, id := range m.live() {
		p := m.permits[id]
		if p.ttl < longTTL && p.p.Err() != nil {
			return true
		}
	}
	return false
}

// resync follows a timing loss: every live permit is released, and the
// holders' set must empty.
func (m *semModel) resync(ctx context.Context) error {
	var ttl time.Duration
	for _, id := range m.live() {
		p := m.permits[id]
		p.p.Release(ctx)
		p.released = true
		ttl = max(ttl, p.ttl)
	}
	if !waitFor(ttl+time.Second, func() bool { return m.held(ctx) == 0 }) {
		return fail("free", "after a timing loss, %d permits still held", m.held(ctx))
	}
	return nil
}

// held counts the unexpired permits in Redis.
func (m *semModel) held(ctx context.Context) int {
	now, err := m.admin.Time(ctx).Result()
	if err != nil {
		return -1
	}
	n, _ := m.admin.ZCount(ctx, m.zkey, "("+strconv.FormatInt(now.UnixMilli(), 10), "+inf").Result()
	return int(n)
}

func (m *semModel) cancelAtGrant(ctx context.Context, o op) error {
	lv := m.live()
	if len(lv) < semPermits {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	type res struct {
		p   *semaphore.Permit
		err error
	}
	ch := make(chan res, 1)
	go func() {
		p, err := m.clients[o.Client].Acquire(wctx, m.name, lock.WithTTL(o.TTL))
		ch <- res{p, err}
	}()
	time.Sleep(40 * time.Millisecond)
	p := m.permits[lv[0]]
	err := p.p.Release(ctx)
	if e := m.released(ctx, p, err, false); e != nil {
		cancel()
		if r := <-ch; r.p != nil {
			r.p.Release(ctx)
		}
		return e
	}
	time.Sleep(o.Dur)
	cancel()
	r := <-ch
	if r.err == nil {
		return m.acquired(ctx, o.ID, o.Client, o.TTL, r.p, nil, 0)
	}
	if !errors.Is(r.err, lock.ErrNotObtained) {
		return fail("error", "cancelled Acquire: %v, want ErrNotObtained", r.err)
	}
	want := len(m.live())
	if !waitFor(time.Second, func() bool { return m.held(ctx) == want }) {
		return fail("ghost", "Acquire cancelled at its grant returned %v, but a second later %d permits are held, the model has %d", r.err, m.held(ctx), want)
	}
	return nil
}

func (m *semModel) check(ctx context.Context) error {
	for _, id := range m.all() {
		p := m.permits[id]
		if p.released {
			continue
		}
		lerr := p.p.Err()
		if lerr != nil && (!errors.Is(lerr, lock.ErrLockLost) || !isClosed(p.p.Lost()) || !p.p.Until().IsZero()) {
			return fail("loss", "L%d: Err() = %v, Lost closed %v, Until %v: inconsistent", id, lerr, isClosed(p.p.Lost()), p.p.Until())
		}
		switch p.state {
		case live:
			if lerr != nil {
				if p.ttl < longTTL {
					return m.resync(ctx)
				}
				return fail("loss", "L%d (ttl %v), a live permit, reports lost: %v", id, p.ttl, lerr)
			}
		case gone:
			if lerr == nil && time.Now().After(p.goneAt.Add(p.ttl/3+lossSlack)) {
				select {
				case <-p.p.Lost():
				case <-time.After(300 * time.Millisecond):
					return fail("loss", "L%d (ttl %v): deleted %v ago, still not reported lost", id, p.ttl, time.Since(p.goneAt).Round(time.Millisecond))
				}
			}
		}
	}
	// Redis holds exactly the live permits, each until at least its Until.
	lv := m.live()
	untils := map[int]time.Time{}
	for _, id := range lv {
		untils[id] = m.permits[id].p.Until()
	}
	scores, err := m.admin.ZRangeWithScores(ctx, m.zkey, 0, -1).Result()
	if err != nil {
		return err
	}
	now, err := m.admin.Time(ctx).Result()
	if err != nil {
		return err
	}
	byID := map[string]float64{}
	n := 0
	for _, z := range scores {
		if int64(z.Score) > now.UnixMilli() {
			byID[z.Member.(string)] = z.Score
			n++
		}
	}
	if n > semPermits {
		return fail("exclusion", "%d permits held in Redis, N is %d", n, semPermits)
	}
	if n != len(lv) {
		return fail("levels", "Redis holds %d permits, the model %d (%v)", n, len(lv), lv)
	}
	for _, id := range lv {
		p := m.permits[id]
		s, ok := byID[p.p.ID()]
		if !ok {
			return fail("levels", "live permit L%d is not in Redis", id)
		}
		exp := time.UnixMilli(int64(s))
		if u := untils[id]; !u.IsZero() && exp.Before(u.Add(-pttlSlack)) {
			return fail("pttl", "L%d reports held for %v more, but Redis expires it in %v", id, time.Until(u).Round(time.Millisecond), time.Until(exp).Round(time.Millisecond))
		}
	}
	return nil
}

func (m *semModel) finish(ctx context.Context) error {
	for _, id := range m.all() {
		p := m.permits[id]
		if p.released || p.state != gone {
			continue
		}
		if !finishLost(p.p.Lost(), p.goneAt.Add(p.ttl/3+lossSlack)) {
			return fail("loss", "L%d (ttl %v): deleted %v ago, still not reported lost", id, p.ttl, time.Since(p.goneAt).Round(time.Millisecond))
		}
	}
	return nil
}

func (m *semModel) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, p := range m.permits {
		p.p.Release(ctx)
	}
	for _, c := range m.clients {
		c.Close()
	}
	for _, r := range m.rdbs {
		r.Close()
	}
	m.admin.Del(ctx, m.zkey, m.fenceKey, m.zkey+":tok", m.zkey+":q", m.zkey+":qt")
	m.admin.Close()
}
