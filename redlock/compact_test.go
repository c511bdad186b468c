package redlock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// TestNoErrorReplies: reading a master's hold in the wrong form (package
// lock's string form or its hash) is an error reply Redis counts in INFO
// errorstats even when the script catches it; a Client's rounds say the
// form they know, and make none: fresh holds released, holds renewed,
// re-entered, and handed over between goroutines of one Client.
func TestNoErrorReplies(t *testing.T) {
	rs := testserver.StartRedisMasters(t, 3)
	c := newClient(t, rs)
	ctx := ctxTimeout(t, 20*time.Second)
	for _, r := range rs {
		if err := r.Client(t).ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	key := uniqueKey(t)
	l := mustObtain(t, ctx, c, key, lock.WithTTL(300*time.Millisecond))
	time.Sleep(400 * time.Millisecond) // a renewal
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Hand-offs: goroutines of one Client on one key.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				err := lock.Do(ctx, c, key, func(context.Context) error { return nil })
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, r := range rs {
		s, err := r.Client(t).Info(ctx, "errorstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		// (NOSCRIPT and go-redis's CLIENT SETINFO's ERR are expected.)
		if strings.Contains(s, "errorstat_WRONGTYPE") {
			t.Fatalf("master %d counted error replies: %s", i, s)
		}
	}
}
