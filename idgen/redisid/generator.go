package redisid

import (
	"context"
	"sync/atomic"
)

// Generator is what every generator of this package implements: Next returns
// the next ID. Implementations are safe for concurrent use.
type Generator interface {
	Next(ctx context.Context) (int64, error)
}

var (
	_ Generator = (*Segment)(nil)
	_ Generator = (*Counter)(nil)
	_ Generator = (*Hash)(nil)
	_ Generator = (*TimeGen)(nil)
)

// raiseMax lifts a to at least v.
func raiseMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}
