package coordprom

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// labels are the variable label values of one series: a key, tag or
// service, and a result or reason ("" for a vector with one label).
type labels struct{ name, result string }

// series caches the children of one metric vector by label values, so that
// a hook call costs one map read, without a lock, once its series exists
// (a vector's WithLabelValues hashes the values, takes the vector's read
// lock and checks the values on every call). Label values are bounded by design (keys reach the
// hooks only through WithMetricsKey, tags are the user's own names), so the
// cache is never pruned and copying it on a miss is cheap.
type series[M any] struct {
	// get returns the vector's child for the label values.
	get func(lv labels) (M, error)

	// m is a copy-on-write map, read without a lock on the hot path; a
	// writer holds mu while it copies and replaces it.
	m  atomic.Pointer[map[labels]M]
	mu sync.Mutex // serialises writers of m
}

func newSeries[M any](get func(labels) (M, error)) *series[M] {
	s := &series[M]{get: get}
	s.m.Store(&map[labels]M{})
	return s
}

// with returns the child of lv, creating it on first use.
func (s *series[M]) with(lv labels) M {
	if c, ok := (*s.m.Load())[lv]; ok {
		return c
	}
	return s.create(lv)
}

func (s *series[M]) create(lv labels) M {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.m.Load()
	if c, ok := old[lv]; ok {
		return c
	}
	c, err := s.get(lv)
	if err != nil {
		// The only error left once the vector is registered: a label value
		// that is not valid UTF-8 (a lock key is any string). A hook must
		// not panic, so report it under the value with the bad bytes
		// replaced.
		c, err = s.get(labels{valid(lv.name), valid(lv.result)})
		if err != nil {
			panic(fmt.Sprintf("coordprom: %v", err)) // unreachable: the labels are valid now
		}
	}
	m := make(map[labels]M, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[lv] = c
	s.m.Store(&m)
	return c
}

func valid(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// counters returns the cache of a counter vector with one or two labels.
func counters(v *prometheus.CounterVec, two bool) *series[prometheus.Counter] {
	return newSeries(func(lv labels) (prometheus.Counter, error) {
		if two {
			return v.GetMetricWithLabelValues(lv.name, lv.result)
		}
		return v.GetMetricWithLabelValues(lv.name)
	})
}

// observers returns the cache of a histogram vector with one or two labels.
func observers(v *prometheus.HistogramVec, two bool) *series[prometheus.Observer] {
	return newSeries(func(lv labels) (prometheus.Observer, error) {
		if two {
			return v.GetMetricWithLabelValues(lv.name, lv.result)
		}
		return v.GetMetricWithLabelValues(lv.name)
	})
}

// register registers cs on reg, all or none: after a failure it
// unregisters those it registered and returns the error.
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return fmt.Errorf("%w: nil Registerer", ErrInvalid)
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("coordprom: %w", err)
		}
	}
	return nil
}
