package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// hotLock obtains key for one goroutine and returns the matching unlock.
type hotLock func(ctx context.Context, key string) (func(ctx context.Context) error, error)

// hotRound is what one hot-key round measured.
type hotRound struct {
	total   int             // critical sections run
	counts  []int           // sections per goroutine
	waits   []time.Duration // lock call to holding, sorted
	failed  int64           // lock calls that gave up and were called again
	elapsed time.Duration
}

// runHot runs one hot-key round: g goroutines, goroutine i locking through
// lockFor(i), compete for key for d. Each section is an in-process
// read-modify-write (read, runtime.Gosched, write) with an overlap detector;
// a lock error for which gaveUp is true counts as a failed obtain and the
// goroutine tries again, any other error ends the round.
func runHot(ctx context.Context, d time.Duration, g int, key string, lockFor func(i int) hotLock, gaveUp func(error) bool) (hotRound, error) {
	var (
		inside, overlaps, failed atomic.Int64
		shared                   int64 // the protected state: a plain read-modify-write
		wg                       sync.WaitGroup
	)
	counts := make([]int, g)
	waits := make([][]time.Duration, g)
	errs := make(chan error, g)
	stop := time.Now().Add(d)
	begin := time.Now()
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lock := lockFor(i)
			for time.Now().Before(stop) {
				t0 := time.Now()
				unlock, err := lock(ctx, key)
				if err != nil {
					if gaveUp(err) {
						failed.Add(1)
						continue
					}
					errs <- err
					return
				}
				waits[i] = append(waits[i], time.Since(t0))
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				v := shared
				runtime.Gosched()
				shared = v + 1
				inside.Add(-1)
				counts[i]++
				if err := unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	r := hotRound{counts: counts, failed: failed.Load(), elapsed: time.Since(begin)}
	close(errs)
	if err := <-errs; err != nil {
		return r, err
	}
	for _, c := range counts {
		r.total += c
	}
	if overlaps.Load() != 0 || shared != int64(r.total) {
		return r, fmt.Errorf("mutual exclusion broken: %d overlaps, %d of %d increments", overlaps.Load(), shared, r.total)
	}
	for _, w := range waits {
		r.waits = append(r.waits, w...)
	}
	slices.Sort(r.waits)
	return r, nil
}

// perSec is the round's sections per second.
func (r hotRound) perSec() float64 { return float64(r.total) / r.elapsed.Seconds() }

// waitMS is the p-quantile of the waits in milliseconds (p = 1: the max).
func (r hotRound) waitMS(p float64) float64 {
	return float64(percentile(r.waits, p)) / 1e6
}

// percentile returns the p-quantile of xs (p = 1: the max), 0 for none.
func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := xs
	if !slices.IsSorted(s) {
		s = slices.Sorted(slices.Values(xs))
	}
	return s[min(int(float64(len(s))*p), len(s)-1)]
}
