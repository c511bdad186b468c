package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

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

// semWaiterTimeout is package semaphore's default waiter timeout, which
// the chaos clients keep: a grant lasts min(TTL, it).
const semWaiterTimeout = 3 * time.Second

// checkSemFairness: the semaphore serves its waiters in arrival order
// (semaphore/doc.go), and a permit granted to a waiter is held for it
// until it takes it, its message lost or not. So while a waiter x waits,
// from when its request reached Redis for sure (queuedBy) until it is
// served (acquired, or gave up), the holds of those that asked after that
// never hold all semPermits permits at once: if they do, x was passed
// over, a fair-order-broken anomaly, unless something may have cost x its
// turn (waiterExcused: a fault but pubsub-kill, a stall of its process,
// waitBounds). Nor is x served more than a lease's life (and fairSlack)
// after the first of them acquired: a later asker acquires a permit only
// once x has been granted one (or with x among the first waiters when
// permits are free), and x takes it at its next call-in, within half its
// grant TTL of its last attempt, heard or not. Each such hold counts from
// its acquisition's return to its release's invocation, its loss, or the
// first stall or pause of its process, whichever comes first: while it
// surely held its permit on Redis (a process stopped can lose its permits
// before it learns it).
func (r *Result) checkSemFairness(in Input) {
	for _, key := range sortedKeys(r.byKey) {
		var hs []*Hold
		for _, h := range r.byKey[key] {
			if h.invoked {
				hs = append(hs, h)
			}
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i].Invoke < hs[j].Invoke })
		life := in.lifeOf(key).Nanoseconds()
		slack := fairSlack.Nanoseconds()
		stall, unheard := waitBounds(in, key, semWaiterTimeout)
		for i, x := range hs {
			served, judged := r.served(x)
			if !judged {
				continue
			}
			from := r.queuedBy(x)
			// The later askers' holds before served, as +1/-1 steps.
			type step struct {
				at int64
				d  int
				h  *Hold
			}
			var steps []step
			var first *Hold // the later askers' first acquisition
			for _, y := range hs[i+1:] {
				if y.Invoke >= served {
					break
				}
				if y.Invoke < from || y.Acquired == 0 || y.Acquired >= served {
					continue
				}
				if first == nil || y.Acquired < first.Acquired {
					first = y
				}
				if end := r.surelyHeldUntil(y); end > y.Acquired {
					steps = append(steps, step{y.Acquired, 1, y}, step{end, -1, y})
				}
			}
			late := first != nil && served-first.Acquired > life+slack
			var over []*Hold // later askers holding every permit at once
			if !late && len(steps) >= 2*semPermits {
				sort.Slice(steps, func(a, b int) bool {
					if steps[a].at != steps[b].at {
						return steps[a].at < steps[b].at
					}
					return steps[a].d < steps[b].d // an end before a start at the same instant
				})
				held := map[*Hold]bool{}
				for _, st := range steps {
					if st.d < 0 {
						delete(held, st.h)
						continue
					}
					held[st.h] = true
					if len(held) >= semPermits {
						for h := range held {
							over = append(over, h)
						}
						break
					}
				}
			}
			if !late && over == nil || r.waiterExcused(in, x, served, life, stall, unheard) {
				continue
			}
			if late {
				r.violate(aUnfair, key, fmt.Sprintf("%s waited for a permit of %s %v after %s, who asked %v after it, acquired one: a waiter ahead of it is granted a permit first, or with it, and calls in within half its grant TTL",
					x.ID, key, time.Duration(served-first.Acquired).Round(time.Millisecond), first.ID, time.Duration(first.Invoke-x.Invoke).Round(time.Millisecond)), x, first)
				continue
			}
			sort.Slice(over, func(a, b int) bool { return over[a].ID < over[b].ID })
			ids := make([]string, 0, len(over))
			for _, h := range over {
				ids = append(ids, fmt.Sprintf("%s (asked %v after it)", h.ID, time.Duration(h.Invoke-x.Invoke).Round(time.Millisecond)))
			}
			r.violate(aUnfair, key, fmt.Sprintf("%s waited for a permit of %s while %s, who asked after it, held all %d permits",
				x.ID, key, strings.Join(ids, ", "), semPermits), append([]*Hold{x}, over...)...)
		}
	}
}

// surelyHeldUntil is until when h's hold was surely held on the server:
// its end (release invoked, loss), or the start of the first stall or
// pause of its process after its acquisition, if earlier.
func (r *Result) surelyHeldUntil(h *Hold) int64 {
	end := h.ownEnd()
	for _, ss := range [][][2]int64{r.pauses[h.Proc], r.selfStalls[h.Proc]} {
		for _, s := range ss {
			if s[1] > h.Acquired && s[0] < end {
				end = max(h.Acquired, s[0])
			}
		}
	}
	return end
}
