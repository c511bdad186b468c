package redlock_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/coordkit/coordkit/redlock"
)

// BenchmarkUncontended: goroutines that each lock and release a key of
// their own on 3 masters, 16 per CPU (32 on the 2-core host bench/
// compares redsync on).
func BenchmarkUncontended(b *testing.B) {
	c := newClient(b, shared[:3])
	ctx := context.Background()
	prefix := uniqueKey(b)
	var seq atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		key := prefix + ":" + strconv.FormatInt(seq.Add(1), 10)
		for pb.Next() && pair(b, c, ctx, key) {
		}
	})
}

// BenchmarkHotKey: goroutines of one client, 8 per CPU (16 on the 2-core
// host of bench/), lock and release one key on 3 masters: every section
// after the first is a hand-off.
func BenchmarkHotKey(b *testing.B) {
	c := newClient(b, shared[:3])
	ctx := context.Background()
	key := uniqueKey(b)
	b.SetParallelism(8)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() && pair(b, c, ctx, key) {
		}
	})
}

// pair obtains key and releases it, and reports whether both succeeded.
func pair(b *testing.B, c *redlock.Client, ctx context.Context, key string) bool {
	l, err := c.Obtain(ctx, key)
	if err != nil {
		b.Error(err)
		return false
	}
	if err := l.Release(ctx); err != nil {
		b.Error(err)
		return false
	}
	return true
}
