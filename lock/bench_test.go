package lock_test

import (
	"context"
	"testing"

	"github.com/coordkit/coordkit/lock"
)

// BenchmarkObtainRelease is one uncontended lock+release pair on the
// shared server, for allocation profiles (-benchmem, -memprofile); the
// throughput figures against the peers come from bench/.
func BenchmarkObtainRelease(b *testing.B) {
	c := newClient(b, nil)
	ctx := context.Background()
	key := uniqueKey(b)
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.Obtain(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDo is BenchmarkObtainRelease through lock.Do.
func BenchmarkDo(b *testing.B) {
	c := newClient(b, nil)
	ctx := context.Background()
	key := uniqueKey(b)
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := lock.Do(ctx, c, key, fn); err != nil {
			b.Fatal(err)
		}
	}
}
