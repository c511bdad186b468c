package idgen_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

// t0 is a whole second, so it starts a tick of every preset.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a wall clock the test moves, plus a monotonic clock that only
// moves forward (Advance, step). Every reading advances both by step.
type fakeClock struct {
	mu   sync.Mutex
	wall time.Time
	mono time.Duration
	step time.Duration
}

func newClock(t time.Time) *fakeClock { return &fakeClock{wall: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.wall
	c.wall = c.wall.Add(c.step)
	c.mono += c.step
	return w
}

func (c *fakeClock) Elapsed() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// Set steps the wall clock to t; the monotonic clock does not move.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = t
}

// Advance moves both clocks forward by d.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
	c.mono += d
}

// SetStep makes every reading advance both clocks by d.
func (c *fakeClock) SetStep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = d
}

func newSnowflake(t *testing.T, l idgen.Layout, worker int64, opts ...idgen.Option) *idgen.Snowflake {
	t.Helper()
	g, err := idgen.NewSnowflake(l, worker, opts...)
	if err != nil {
		t.Fatalf("NewSnowflake(%s, %d): %v", l.Name, worker, err)
	}
	return g
}

// issuer checks every ID it takes from g against the previous one.
type issuer struct {
	t    *testing.T
	g    *idgen.Snowflake
	last int64
}

func (is *issuer) next() int64 {
	is.t.Helper()
	id, err := is.g.Next()
	if err != nil {
		is.t.Fatalf("Next: %v", err)
	}
	if id <= is.last {
		is.t.Fatalf("Next = %d after %d: not increasing", id, is.last)
	}
	is.last = id
	return id
}

// memStore is an in-memory HighWaterStore.
type memStore struct {
	mu   sync.Mutex // protects mark
	mark time.Time
}

func (s *memStore) Load(context.Context) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mark, nil
}

func (s *memStore) Store(_ context.Context, mark time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if mark.After(s.mark) {
		s.mark = mark
	}
	return nil
}

var _ idgen.HighWaterStore = (*memStore)(nil)

// await runs f in a goroutine and returns a channel that yields its result.
func await[T any](f func() (T, error)) <-chan result[T] {
	ch := make(chan result[T], 1)
	go func() {
		v, err := f()
		ch <- result[T]{v, err}
	}()
	return ch
}

type result[T any] struct {
	v   T
	err error
}
