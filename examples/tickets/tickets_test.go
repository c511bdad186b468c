package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEveryLockedStrategySellsExactlyTheStock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A Redlock node timeout of 250 ms, as redlock's TestMutualExclusion:
	// at the default 20 ms, beside two CPU burners and two other test
	// packages, hand-offs to the masters answered later than that and the
	// library rightly reported a release not confirmed by a quorum, which
	// ended the run. Exclusion is what is tested.
	c := config{buyers: 16, clients: 3, stock: 60, work: 500 * time.Microsecond, strategies: allStrategies,
		nodeTimeout: 250 * time.Millisecond}
	rs, err := run(ctx, c)
	var out bytes.Buffer
	printTable(&out, c, rs)
	t.Logf("\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(allStrategies) {
		t.Fatalf("%d results for %d strategies", len(rs), len(allStrategies))
	}
	for _, r := range rs {
		if r.strategy == "none" {
			// Without a lock buyers read the same stock: the oversell the
			// example exists to show (16 buyers, 0.5 ms between read and write).
			if r.oversold == 0 {
				t.Errorf("none: no oversell with %d buyers; the race did not show", c.buyers)
			}
			continue
		}
		if r.sold != c.stock || r.left != 0 || r.oversold != 0 {
			t.Errorf("%s: sold %d, left %d, oversold %d; want %d, 0, 0", r.strategy, r.sold, r.left, r.oversold, c.stock)
		}
	}
	for _, row := range []string{"lock", "redlock", "zklock", "mysql:session", "pg:lease", "pg:forupdate"} {
		if !strings.Contains(out.String(), "| "+row+" ") {
			t.Errorf("table lacks the %s row:\n%s", row, out.String())
		}
	}
}

func TestBadConfig(t *testing.T) {
	if _, err := run(context.Background(), config{buyers: 0, clients: 1, stock: 1}); err == nil {
		t.Error("zero buyers accepted")
	}
	_, err := run(context.Background(), config{buyers: 1, clients: 1, stock: 1, strategies: []string{"bogus"}})
	if err == nil || !strings.Contains(err.Error(), "unknown strategy") {
		t.Errorf("bogus strategy: %v", err)
	}
}
