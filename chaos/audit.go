package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
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

// auditable reports whether backend b's locks are hash locks the audit
// reads.
func auditable(b string) bool { return b == "lock" || b == "fair" }

// startAudit audits the lock hashes of keys on the Redis at addr until
// the returned stop is called, which returns what it saw.
func startAudit(addr string, keys []string) (stop func() []NoExpiry) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	hashes := make([]string, len(keys))
	for i, k := range keys {
		hashes[i] = hashlock.LockKeys(hashlock.DefaultPrefix, k)[0]
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg   sync.WaitGroup
		seen []NoExpiry
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(auditEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// A server paused or restarting answers late or not at all:
			// that round is skipped.
			rctx, rcancel := context.WithTimeout(ctx, auditEvery)
			pipe := rdb.Pipeline()
			cmds := make([]*redis.DurationCmd, len(hashes))
			for i, h := range hashes {
				cmds[i] = pipe.PTTL(rctx, h)
			}
			_, err := pipe.Exec(rctx)
			rcancel()
			if err != nil {
				continue
			}
			now := monoNow()
			for i, c := range cmds {
				if c.Val() == -1 { // go-redis: -1 ns for "exists, no expiry"
					seen = append(seen, NoExpiry{Key: keys[i], Hash: hashes[i], Mono: now})
				}
			}
			auditRounds.Add(1)
		}
	}()
	var once sync.Once
	return func() []NoExpiry {
		once.Do(func() {
			cancel()
			wg.Wait()
			rdb.Close()
		})
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
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	ctx, cancel := context.WithCancel(context.Background())
	type reading struct{ v, mono int64 }
	last := map[string]reading{}
	var (
		wg    sync.WaitGroup
		drops []MarkDrop
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(markAuditEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, auditEvery)
			keys, err := rdb.Keys(rctx, markPattern).Result()
			var vals []any
			if err == nil && len(keys) > 0 {
				vals, err = rdb.MGet(rctx, keys...).Result()
			}
			rcancel()
			if err != nil {
				continue // a server paused or restarting: skip the round
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
			auditRounds.Add(1)
		}
	}()
	var once sync.Once
	return func() []MarkDrop {
		once.Do(func() {
			cancel()
			wg.Wait()
			rdb.Close()
		})
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
