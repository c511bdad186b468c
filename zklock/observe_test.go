package zklock_test

import (
	"log/slog"
	"testing"

	"github.com/coordkit/coordkit/internal/locktest"
	"github.com/coordkit/coordkit/internal/logtest"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/zklock"
)

// TestObservability: the ensemble killed while a lease is held: the
// heartbeat that fails is logged as a failed renewal and reported, then
// the loss (session expired), with the key the metrics key function makes.
func TestObservability(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	logs, m := &logtest.Recorder{}, &locktest.MetricsRecorder{}
	c := newClient(t, dial(t, z, sessionTimeout), zklock.WithSessionTimeout(sessionTimeout),
		zklock.WithLogger(slog.New(logs)), zklock.WithMetrics(m), zklock.WithMetricsKey(locktest.MetricsKey))
	locktest.LossObserved(t, c, "observe", logs, m, func() {
		for _, n := range z.Nodes() {
			n.Kill()
		}
	}, zklock.ErrSessionExpired)
}
