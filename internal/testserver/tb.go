package testserver

import "testing"

// must fails tb with err, if any, and registers closer with tb.Cleanup.
func must[T interface{ Close() }](tb testing.TB, v T, err error) T {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(v.Close)
	return v
}
