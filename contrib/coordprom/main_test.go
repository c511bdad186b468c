package coordprom_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
)

// shared is the Redis server of the tests that do not break their server.
var shared *testserver.Redis

// serverRun starts the shared server around the tests, so that goleak checks
// for leaks after it is gone.
type serverRun struct{ m *testing.M }

func (r serverRun) Run() int {
	var err error
	if shared, err = testserver.NewRedis(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.Close()
	os.Setenv("REDIS_ADDR", shared.Addr()) // for the examples
	return r.m.Run()
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(serverRun{m}) }

// uniqueKey returns a key no other test uses.
func uniqueKey(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	return strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()) + ":" + hex.EncodeToString(b)
}

// sample returns the value of the series of family name whose labels
// include want: a counter's value, or a histogram's sample count and sum.
// ok is false if there is no such series.
func sample(t testing.TB, g prometheus.Gatherer, name string, want map[string]string) (count, sum float64, ok bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, want) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), 0, true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), m.Histogram.GetSampleSum(), true
			}
			t.Fatalf("%s: neither counter nor histogram", name)
		}
	}
	return 0, 0, false
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// count is sample's count, failing the test when the series is missing.
func count(t testing.TB, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	c, _, ok := sample(t, g, name, want)
	if !ok {
		t.Fatalf("no series %s%v", name, want)
	}
	return c
}

// eventually waits until cond holds, at most d, polling every 10 ms.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// near reports whether a and b differ by at most tol.
func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }
