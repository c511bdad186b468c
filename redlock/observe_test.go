package redlock_test

import (
	"log/slog"
	"testing"

	"github.com/coordkit/coordkit/internal/locktest"
	"github.com/coordkit/coordkit/internal/logtest"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/redlock"
	"github.com/coordkit/coordkit/watchdog"
)

// TestObservability: three of five masters killed while a lease is held:
// the renewal rounds without a quorum are logged and reported, then the
// loss (expired), with the key the metrics key function makes.
func TestObservability(t *testing.T) {
	rs := testserver.StartRedisMasters(t, 5)
	logs, m := &logtest.Recorder{}, &locktest.MetricsRecorder{}
	c := newClient(t, rs, redlock.WithLogger(slog.New(logs)), redlock.WithMetrics(m),
		redlock.WithMetricsKey(locktest.MetricsKey))
	locktest.LossObserved(t, c, uniqueKey(t), logs, m, func() {
		for _, r := range rs[:3] {
			r.Kill()
		}
	}, watchdog.ErrExpired)
}
