package redlock_test

import (
	"testing"

	"github.com/coordkit/coordkit/internal/locktest"
	"github.com/coordkit/coordkit/internal/testserver"
)

// TestTokenAfterOlderSnapshots: masters restart from RDBs saved before the
// last acquisitions, all of them or a minority. The next token must exceed
// every token handed out.
func TestTokenAfterOlderSnapshots(t *testing.T) {
	for _, restored := range []int{5, 2} {
		t.Run(map[int]string{5: "all masters", 2: "a minority"}[restored], func(t *testing.T) {
			rs := testserver.StartRedisMasters(t, 5)
			c := newClient(t, rs)
			key := uniqueKey(t)
			locktest.Cycles(t, c, key, 1)
			snaps := make([]string, len(rs))
			for i, r := range rs[:restored] {
				var err error
				if snaps[i], err = r.Snapshot(); err != nil {
					t.Fatal(err)
				}
			}
			last := locktest.Cycles(t, c, key, 5)
			for i, r := range rs[:restored] {
				if err := r.RestartFromSnapshot(snaps[i]); err != nil {
					t.Fatal(err)
				}
			}
			if got := locktest.Cycles(t, c, key, 1); got <= last {
				t.Fatalf("token after %d of 5 masters restarted from older snapshots = %d, want > %d", restored, got, last)
			}
		})
	}
}
