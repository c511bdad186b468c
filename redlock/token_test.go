package redlock_test

import (
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// cycles obtains and releases key n times and returns the last token.
func cycles(t *testing.T, l lock.Locker, key string, n int) int64 {
	t.Helper()
	ctx := ctxTimeout(t, 10*time.Second)
	var last int64
	for range n {
		le := mustObtain(t, ctx, l, key)
		if le.Token() <= last {
			t.Fatalf("token %d after %d: not increasing", le.Token(), last)
		}
		last = le.Token()
		if err := le.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	return last
}

// TestTokenAfterOlderSnapshots: masters restart from RDBs saved before the
// last acquisitions, all of them or a minority. The next token must exceed
// every token handed out.
func TestTokenAfterOlderSnapshots(t *testing.T) {
	for _, restored := range []int{5, 2} {
		t.Run(map[int]string{5: "all masters", 2: "a minority"}[restored], func(t *testing.T) {
			rs := testserver.StartRedisMasters(t, 5)
			c := newClient(t, rs)
			key := uniqueKey(t)
			cycles(t, c, key, 1)
			snaps := make([]string, len(rs))
			for i, r := range rs[:restored] {
				var err error
				if snaps[i], err = r.Snapshot(); err != nil {
					t.Fatal(err)
				}
			}
			last := cycles(t, c, key, 5)
			for i, r := range rs[:restored] {
				if err := r.RestartFromSnapshot(snaps[i]); err != nil {
					t.Fatal(err)
				}
			}
			if got := cycles(t, c, key, 1); got <= last {
				t.Fatalf("token after %d of 5 masters restarted from older snapshots = %d, want > %d", restored, got, last)
			}
		})
	}
}
