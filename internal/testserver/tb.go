package testserver

import (
	"testing"

	"github.com/coordkit/coordkit/internal/logtest"
)

// must fails tb with err, if any, and registers closer with tb.Cleanup. It
// also routes the process-wide loggers to tb while it runs
// (logtest.Capture; first, so that the capture ends after the close).
func must[T interface{ Close() }](tb testing.TB, v T, err error) T {
	tb.Helper()
	logtest.Capture(tb)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(v.Close)
	return v
}
