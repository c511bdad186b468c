package idgen_test

import (
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

// layout22 is a single-worker layout whose 22-bit sequence (4.19 billion IDs
// per second) is out of reach, so its benchmarks measure the cost of Next.
var layout22 = idgen.Layout{Name: "seq22", TimeBits: 41, SequenceBits: 22}

func BenchmarkTimeNow(b *testing.B) {
	b.ReportAllocs()
	var s int64
	for b.Loop() {
		s += time.Now().UnixNano()
	}
	_ = s
}

func benchNext(b *testing.B, l idgen.Layout) {
	g, err := idgen.NewSnowflake(l, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNext(b *testing.B) {
	b.Run("twitter", func(b *testing.B) { benchNext(b, idgen.LayoutTwitter) })
	b.Run("seq22", func(b *testing.B) { benchNext(b, layout22) })
}

func BenchmarkNextParallel(b *testing.B) {
	for _, l := range []idgen.Layout{idgen.LayoutTwitter, layout22} {
		b.Run(l.Name, func(b *testing.B) {
			g, err := idgen.NewSnowflake(l, 0)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := g.Next(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func BenchmarkNextN(b *testing.B) {
	g, err := idgen.NewSnowflake(layout22, 0)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]int64, 256)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.NextN(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(buf)), "ns/id")
}

func BenchmarkObjectID(b *testing.B) {
	g, err := idgen.NewObjectIDGenerator()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var last idgen.ObjectID
	for b.Loop() {
		last = g.New()
	}
	_ = last
}

func BenchmarkSerial(b *testing.B) {
	s, err := idgen.NewSerial(idgen.SerialFormat{}, 1)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 32)
	b.ReportAllocs()
	for b.Loop() {
		if buf, err = s.AppendNext(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	buf := make([]byte, 0, 16)
	b.Run("base32", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			buf = idgen.AppendBase32(buf[:0], int64(i)<<22)
		}
	})
	b.Run("base58", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			buf = idgen.AppendBase58(buf[:0], int64(i)<<22)
		}
	})
}
