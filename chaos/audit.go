package main

import (
	"context"
	"fmt"
	"sync"
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
