package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/semaphore"
)

// The sem backend: lock.Do over the Redis semaphore (semaphore.New, a
// lock.Locker) with semPermits permits per name, the names being the hot
// keys. A section holds its permit for up to hold (or, for a long one,
// twice the TTL unless the permit is lost) and writes nothing: holders of
// one name are many by design, so the protected resource's fenced write
// and counter do not apply. The checkers: tokens increasing per name
// (semaphore/doc.go: "fencing tokens still increase"), at most semPermits
// holders believed-held at once (checkPermits), liveness after the heal.
const semPermits = 2

// Anomalies of the sem backend: more than semPermits holders of a name
// believed they held a permit at once, and none of them was told of its
// loss within the report bound (unreported), or one was but under no fault
// semaphore/doc.go allows it for (undocumented).
const (
	aPermitsUnrep = "permits-exceeded-unreported"
	aPermitsUndoc = "permits-exceeded-undocumented"
	dPermits      = "permits-exceeded-documented-reported"
)

// dialSem builds the sem backend's Locker over the Redis at addr.
func dialSem(addr string) (lock.Locker, func(), error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c := semaphore.New(rdb, semaphore.WithPermits(semPermits))
	if err := c.Err(); err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return c, func() { c.Close(); rdb.Close() }, nil
}

// semSection is a section of the sem backend: the work only.
func (w *worker) semSection(ctx context.Context, a *attempt) error {
	w.work(ctx, a)
	return ctx.Err()
}

// checkPermits: when a hold of a name is acquired while semPermits others
// are believed held, the name has one holder too many. A holder whose pair
// with the newcomer classify (as for two holders of a lock) finds
// documented (one of the two told within the report bound, under a fault
// semaphore/doc.go allows it for) does not count; if semPermits or more
// remain, the acquisition is an anomaly: unreported if one of their pairs
// is, else undocumented. Counted once per acquisition. (The liveness bound is the lock's: a vanished holder's permit comes back a
// TTL after its last renewal, a vanished waiter's place a waiter timeout,
// 3 s, after it last called in; livenessBound allows 5 s.)
func (r *Result) checkPermits(in Input) {
	doc := documentedFaults(in.Backend)
	for _, key := range sortedKeys(r.byKey) {
		bound := reportBound(in, key).Nanoseconds()
		var active []*Hold
		for _, b := range r.byKey[key] {
			keep := active[:0]
			for _, a := range active {
				if a.end() > b.Acquired {
					keep = append(keep, a)
				}
			}
			active = keep
			if len(active) >= semPermits {
				// A holder whose pair with the newcomer is documented
				// lost its permit as the doc allows: it does not count.
				excused, unreported := 0, false
				for _, a := range active {
					switch r.classify(in, doc, bound, a, b) {
					case dOverlap:
						excused++
					case aOverlapUnrep:
						unreported = true
					}
				}
				if len(active)-excused < semPermits {
					r.Documented[dPermits]++
				} else {
					kind := aPermitsUndoc
					if unreported {
						kind = aPermitsUnrep
					}
					ids := make([]string, 0, len(active))
					for _, a := range active {
						ids = append(ids, fmt.Sprintf("%s (token %d)", a.ID, a.Token))
					}
					r.violate(kind, key, fmt.Sprintf("%s (token %d) acquired a permit of %s while %s held the %d permits",
						b.ID, b.Token, key, strings.Join(ids, ", "), semPermits), append([]*Hold{b}, active...)...)
				}
			}
			active = append(active, b)
			sort.Slice(active, func(i, j int) bool { return active[i].Acquired < active[j].Acquired })
		}
	}
}
