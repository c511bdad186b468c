package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/redlock"
)

// The expiry audit (lock, fair): every auditEvery during the run the
// orchestrator asks the lock's Redis (directly, not through a client's
// proxy) for the PTTL of each key's lock hash. A hash without an expiry
// (PTTL -1) is never freed if its holder vanishes: lock/doc.go promises
// that a vanished holder frees the key a TTL after its last renewal, and
// every script that writes the hash sets its expiry in the same script,
// so no moment outside a script shows a hash without one. Each
// observation is kept in resource.json (NoExpiry); the checker counts
// them as lock-key-without-expiry (mutant 10).

// auditEvery is how often the audit looks.
const auditEvery = 100 * time.Millisecond

// auditRounds counts the rounds the audits completed (every server
// answered), so that tests wait for rounds, not for time.
var auditRounds atomic.Int64

// aNoExpiry is the anomaly of a lock hash seen without an expiry.
const aNoExpiry = "lock-key-without-expiry"

// NoExpiry is one lock hash seen without an expiry.
type NoExpiry struct {
	Key  string `json:"key"`
	Hash string `json:"hash"`
	Mono int64  `json:"mono"`
}

// auditor runs audit rounds: one goroutine per Redis, each calling its
// round every period, until stop. A round gets a context bounded by
// auditEvery (a server paused or restarting answers late or not at all,
// and its round is skipped: the round reports false); each round that
// reports true counts in auditRounds.
type auditor struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	rdbs   []*redis.Client
	once   sync.Once
}

func newAuditor() *auditor {
	a := &auditor{}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	return a
}

// start dials addr and runs round on it every period.
func (a *auditor) start(addr string, period time.Duration, round func(ctx context.Context, rdb *redis.Client) bool) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	a.rdbs = append(a.rdbs, rdb)
	a.wg.Add(1)
	go func() { // owned by the auditor: ends at stop
		defer a.wg.Done()
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-a.ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(a.ctx, auditEvery)
			ok := round(rctx, rdb)
			rcancel()
			if ok {
				auditRounds.Add(1)
			}
		}
	}()
}

// stop ends every round's goroutine and closes the clients; it is
// idempotent.
func (a *auditor) stop() {
	a.once.Do(func() {
		a.cancel()
		a.wg.Wait()
		for _, rdb := range a.rdbs {
			rdb.Close()
		}
	})
}

// auditable reports whether backend b's locks are hash locks the audit
// reads.
func auditable(b string) bool { return b == "lock" || b == "fair" }

// startAudit audits the lock hashes of keys on the Redis at addr until
// the returned stop is called, which returns what it saw.
func startAudit(addr string, keys []string) (stop func() []NoExpiry) {
	hashes := make([]string, len(keys))
	for i, k := range keys {
		hashes[i] = hashlock.LockKeys(hashlock.DefaultPrefix, k)[0]
	}
	var seen []NoExpiry
	a := newAuditor()
	a.start(addr, auditEvery, func(ctx context.Context, rdb *redis.Client) bool {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.DurationCmd, len(hashes))
		for i, h := range hashes {
			cmds[i] = pipe.PTTL(ctx, h)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return false
		}
		now := monoNow()
		for i, c := range cmds {
			if c.Val() == -1 { // go-redis: -1 ns for "exists, no expiry"
				seen = append(seen, NoExpiry{Key: keys[i], Hash: hashes[i], Mono: now})
			}
		}
		return true
	})
	return func() []NoExpiry {
		a.stop()
		return seen
	}
}

// checkNoExpiry turns the audit's observations into anomalies, one per
// key (with the number of observations and the first).
func (r *Result) checkNoExpiry(in Input) {
	if in.Resource == nil {
		return
	}
	byKey := map[string][]NoExpiry{}
	for _, o := range in.Resource.NoExpiry {
		byKey[o.Key] = append(byKey[o.Key], o)
	}
	for _, k := range sortedKeys(byKey) {
		obs := byKey[k]
		r.add(aNoExpiry, len(obs)-1) // violate counts the first
		r.violate(aNoExpiry, k, fmt.Sprintf("the lock hash %s had no expiry (PTTL -1) at %d audits (every %v): a holder that vanished then would never free it",
			obs[0].Hash, len(obs), auditEvery))
	}
}

// The high-water audit (ids): every markAuditEvery the orchestrator reads the
// Redis worker-ID leaser's high-water marks of the ids workload's service
// (directly, not through a client's proxy). workerid/doc.go promises that
// a stored mark is only ever raised: a late store from a holder whose
// lease was lost (its final mark, saved after the ID's next holder raised
// it) must not pull the mark back, or a third holder could start below IDs
// already issued. A mark seen lower than the reading before is kept in
// marks.json; the checker counts it as mark-lowered unless Redis lost
// data in between (a restart: the mark came back from an older snapshot,
// or was gone and raised anew). Mutant 25.

// markAuditEvery is how often the high-water audit reads the marks: a
// lowered mark lasts until the ID's holder saves its next one (every
// idCheckpoint, 100 ms), so the audit looks ten times as often.
const markAuditEvery = 10 * time.Millisecond

// aMarkLowered is the anomaly of a high-water mark seen lower than before.
const aMarkLowered = "mark-lowered"

// markPattern matches the ids workload's high-water keys
// (workerid.RedisLeaser's "coordkit:worker:{S}:hw:<id>"; Redis globs take
// braces literally).
const markPattern = "coordkit:worker:{" + idService + "}:hw:*"

// MarkDrop is one high-water mark seen lower than at the reading before.
type MarkDrop struct {
	Key  string `json:"key"`
	From int64  `json:"from"` // Unix ms, the reading before (at Prev)
	To   int64  `json:"to"`
	Prev int64  `json:"prev"` // mono of the reading before
	Mono int64  `json:"mono"`
}

// startMarkAudit reads the marks on the Redis at addr until the returned
// stop is called, which returns the drops it saw. A key gone (Redis lost
// it) is forgotten: its next value is not compared with the old one.
func startMarkAudit(addr string) (stop func() []MarkDrop) {
	type reading struct{ v, mono int64 }
	last := map[string]reading{}
	var drops []MarkDrop
	a := newAuditor()
	a.start(addr, markAuditEvery, func(ctx context.Context, rdb *redis.Client) bool {
		keys, err := rdb.Keys(ctx, markPattern).Result()
		var vals []any
		if err == nil && len(keys) > 0 {
			vals, err = rdb.MGet(ctx, keys...).Result()
		}
		if err != nil {
			return false
		}
		now := monoNow()
		seen := map[string]bool{}
		for i, k := range keys {
			s, ok := vals[i].(string)
			if !ok {
				continue
			}
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				continue // workerid reports a corrupt mark itself
			}
			seen[k] = true
			if p, ok := last[k]; ok && v < p.v {
				drops = append(drops, MarkDrop{Key: k, From: p.v, To: v, Prev: p.mono, Mono: now})
			}
			last[k] = reading{v, now}
		}
		for k := range last {
			if !seen[k] {
				delete(last, k)
			}
		}
		return true
	})
	return func() []MarkDrop {
		a.stop()
		return drops
	}
}

// checkMarks turns the high-water audit's drops into anomalies, unless a
// Redis restart (which can lose or roll back data) overlapped the two
// readings.
func (r *Result) checkMarks(drops []MarkDrop, faults []Fault) {
	for _, d := range drops {
		explained := false
		for _, f := range faults {
			switch f.Kind {
			case fRestartNoData, fRestartSnapshot, fRestartKeep:
				explained = explained || f.Err == "" && f.Start <= d.Mono && f.End >= d.Prev
			}
		}
		if explained {
			r.Documented[dMarkDataLoss]++
			continue
		}
		r.violateIDs(aMarkLowered, "redis", fmt.Sprintf("the high-water mark %s went from %d to %d (Unix ms) between two readings %v apart, with no Redis restart between them: a store lowered it",
			d.Key, d.From, d.To, time.Duration(d.Mono-d.Prev).Round(time.Millisecond)))
	}
}

// The renewal audit (redlock): every auditEvery the orchestrator reads,
// on every master (directly, not through a client's proxy), the long keys'
// lock hashes: their PTTL and their owners. A long section records its
// lease's deadline every 100 ms of its work (until events, client.go).
// redlock/doc.go promises that a hold survives one master losing its data,
// which needs every master the hold is on to keep it at least as long as
// the holder believes it: each renewal reaches every master, the late ones
// too (mutant 32 cancelled the renewals not sent when a quorum answered).
// The checker counts, for each until reading, the masters whose copy of
// the hold would expire before that deadline (masters-expire-before-lease:
// N − quorum of them or more, at two readings in a row, with no fault on
// a master or the holder and no stall of it to explain it).

// aMastersShort is the anomaly of too many masters keeping a hold shorter
// than its holder believes it.
const aMastersShort = "masters-expire-before-lease"

// redlockMasters and redlockQuorum are the redlock backend's (env.go).
const redlockMasters, redlockQuorum = 5, 3

// MasterCopy is one master's copy of a hold, seen by the renewal audit.
type MasterCopy struct {
	Master int    `json:"m"`
	Key    string `json:"key"`
	Owner  string `json:"owner"`
	Exp    int64  `json:"exp"` // mono: the latest the copy can expire (reply time + PTTL + 1 ms)
	Mono   int64  `json:"mono"`
}

// startRenewalAudit reads keys' lock hashes on the masters at addrs until
// the returned stop is called, which returns the copies it saw.
func startRenewalAudit(addrs, keys []string) (stop func() []MasterCopy) {
	hashes := make([]string, len(keys))
	for i, k := range keys {
		hashes[i] = hashlock.LockKeys(redlock.DefaultPrefix, k)[0] // redlock/doc.go's key schema
	}
	var (
		mu     sync.Mutex // protects copies
		copies []MasterCopy
	)
	a := newAuditor()
	for m, addr := range addrs {
		a.start(addr, auditEvery, func(ctx context.Context, rdb *redis.Client) bool {
			pipe := rdb.Pipeline()
			ttls := make([]*redis.DurationCmd, len(hashes))
			owners := make([]*redis.StringSliceCmd, len(hashes))
			for i, h := range hashes {
				ttls[i] = pipe.PTTL(ctx, h)
				owners[i] = pipe.HKeys(ctx, h)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return false
			}
			now := monoNow()
			var seen []MasterCopy
			for i := range hashes {
				left := ttls[i].Val()
				if left <= 0 {
					continue
				}
				for _, o := range owners[i].Val() {
					if o != "" && o[0] != 0 { // reserved fields start with NUL
						seen = append(seen, MasterCopy{Master: m, Key: keys[i], Owner: o, Exp: now + int64(left+time.Millisecond), Mono: now})
					}
				}
			}
			mu.Lock()
			copies = append(copies, seen...)
			mu.Unlock()
			return true
		})
	}
	return func() []MasterCopy {
		a.stop()
		sort.SliceStable(copies, func(i, j int) bool { return copies[i].Mono < copies[j].Mono })
		return copies
	}
}

// renewalReach is how long after a renewal round's quorum its late
// masters may still run it: redlock lets each master's command take the
// slow bound, 20 × the node timeout (20 ms by default: the chaos clients'),
// plus slack for a loaded host. A deadline read at t was set by a round
// that every master has run by t + renewalReach; only copies seen from
// then on are held to it. copyWindow is how long after that they are
// looked at (the next reading's window follows).
const (
	renewalReach = 450 * time.Millisecond
	copyWindow   = 100 * time.Millisecond
)

// copySlack is how far before a holder's deadline a master's copy may
// expire and still count as keeping it (the deadline is read in the
// client process, the copy's expiry by the orchestrator: clock reads
// apart).
const copySlack = 5 * time.Millisecond

// checkRenewalCopies: for each until reading of a hold (redlock's long
// sections), the masters whose copy of the hold, seen by the renewal audit
// in the copyWindow that begins renewalReach after the reading (while the
// holder still believed), would expire before the deadline read. N − quorum such masters or more at two
// readings in a row, with no fault on a master or on the holder's process
// and no stall of it from a lease life and the report bound before, breaks
// redlock/doc.go's promise that a hold survives one master losing its
// data. A master without a copy is not counted: an acquisition or a
// renewal that did not reach it in time is the first fault the doc allows.
func (r *Result) checkRenewalCopies(in Input) {
	if in.Resource == nil || len(in.Resource.Copies) == 0 {
		return
	}
	type ko struct{ key, owner string }
	byHold := map[ko][]MasterCopy{}
	for _, c := range in.Resource.Copies {
		byHold[ko{c.Key, c.Owner}] = append(byHold[ko{c.Key, c.Owner}], c)
	}
	for _, h := range sortedHolds(r.holds) {
		if len(h.untils) == 0 {
			continue
		}
		cs := byHold[ko{h.Key, h.Owner}]
		prevShort, flagged := false, 0
		var worst []int
		var worstAt Event
		for _, u := range h.untils {
			// The copies seen a renewal's reach after the reading, and
			// before the next reading's window, while h was believed.
			from := u.Mono + renewalReach.Nanoseconds()
			end := min(h.ownEnd(), from+copyWindow.Nanoseconds())
			latest := map[int]MasterCopy{}
			for _, c := range cs {
				if c.Mono > from && c.Mono <= end {
					latest[c.Master] = c
				}
			}
			var short []int
			for m, c := range latest {
				if c.Exp < u.Until-copySlack.Nanoseconds() {
					short = append(short, m)
				}
			}
			isShort := len(short) >= redlockMasters-redlockQuorum && !r.copiesExcused(in, h, u.Mono, end)
			if end <= from {
				isShort = false // h ended first: nothing seen
			}
			if isShort && prevShort {
				flagged++
				if len(short) > len(worst) {
					sort.Ints(short)
					worst, worstAt = short, u
				}
			}
			prevShort = isShort
		}
		if flagged == 0 {
			continue
		}
		r.add(aMastersShort, flagged-1) // violate counts the first
		r.violate(aMastersShort, h.Key, fmt.Sprintf("%s's lease read its deadline %v ahead, and the copies of its hold on masters %v would expire before it (%d readings in a row or more with %d of %d masters short, no fault on a master or on %s and no stall of it): a renewal did not reach every master",
			h.ID, time.Duration(worstAt.Until-worstAt.Mono).Round(time.Millisecond), worst, flagged+1, redlockMasters-redlockQuorum, redlockMasters, h.Proc), h)
	}
}

// copiesExcused reports whether a fault on a server or on h's process, or a
// stall of it, from a lease life and the report bound before from until to,
// explains masters keeping h's hold short.
func (r *Result) copiesExcused(in Input, h *Hold, from, to int64) bool {
	from -= (in.lifeOf(h.Key) + reportBound(in, h.Key)).Nanoseconds()
	for _, f := range in.Faults {
		if f.Err == "" && (f.Proc == "" || f.Proc == h.Proc) && f.Start <= to && f.End >= from {
			return true
		}
	}
	for _, st := range r.selfStalls[h.Proc] {
		if st[0] <= to && st[1] >= from {
			return true
		}
	}
	return false
}
