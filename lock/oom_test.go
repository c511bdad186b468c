package lock_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// TestOutOfMemory: a Redis over its maxmemory (noeviction) refuses what
// adds data: a new hold is refused with Redis's OOM error and nothing
// written. A holder still renews and releases. By EVALSHA that was so
// already: Redis refuses a script's command that adds data only before
// the script's first write (renew's PEXPIRE adds nothing; release's
// stored answer follows its DEL). A function without flags is refused as
// a whole, before it runs: the library's renew and release carry
// allow-oom (with none, this test fails on the function path).
func TestOutOfMemory(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	srv := testserver.StartRedis(t, testserver.WithRedisArgs("--maxmemory", "4mb", "--maxmemory-policy", "noeviction"))
	rdb := srv.Client(t)
	const ttl = time.Second
	c := newClient(t, srv, lock.WithDefaultTTL(ttl))
	held := mustObtain(t, ctx, c, "oom-held")
	// Fill it: large values first, then smaller ones, until even a small
	// one is refused (a large SET is refused while its own bytes would
	// cross the limit; the state that refuses every write is memory over
	// the limit before the command). Memory then drifts back under the
	// limit (buffers freed), so fill tops it up again before each check.
	n := 0
	fill := func() {
		t.Helper()
		for _, size := range []int{64 << 10, 1 << 10, 16} {
			v := strings.Repeat("x", size)
			for ; ; n++ {
				err := rdb.Set(ctx, fmt.Sprint("fill:", n), v, 0).Err()
				if err != nil && strings.HasPrefix(err.Error(), "OOM") {
					break
				}
				if err != nil || n > 100000 {
					t.Errorf("filling Redis: %d values, %v", n, err)
					return
				}
			}
		}
	}
	fill()
	if _, err := c.TryObtain(ctx, "oom-new"); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("TryObtain with Redis out of memory: %v, want its OOM error", err)
	}
	if n := rdb.Exists(ctx, lock.DefaultPrefix+"{oom-new}").Val(); n != 0 {
		t.Fatalf("the refused hold left its hash (%d)", n)
	}
	// Three TTLs, Redis kept full: without its renewals the hold would
	// have expired.
	done := make(chan struct{})
	filled := make(chan struct{})
	go func() {
		defer close(filled)
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
				fill()
			}
		}
	}()
	time.Sleep(3 * ttl)
	close(done)
	<-filled
	select {
	case <-held.Lost():
		t.Fatalf("the hold was lost with Redis out of memory: %v", held.(lock.LeaseStatus).Err())
	default:
	}
	fill()
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release with Redis out of memory: %v", err)
	}
	if n := rdb.Exists(ctx, lock.DefaultPrefix+"{oom-held}").Val(); n != 0 {
		t.Fatal("the released hold is still there")
	}
}
