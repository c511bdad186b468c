package coordotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/coordkit/coordkit/lock"
)

// instrumentation is the tracer's name.
const instrumentation = "github.com/coordkit/coordkit/contrib/coordotel"

// Option configures Locker.
type Option func(*options)

type options struct {
	tp      trace.TracerProvider
	backend string
	noKey   bool
}

// WithTracerProvider sets where spans go. Default: otel.GetTracerProvider()
// when Locker is called.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tp = tp } }

// WithBackend sets the coordkit.lock.backend attribute (e.g. "redis",
// "redlock", "zookeeper"). Default: none.
func WithBackend(name string) Option { return func(o *options) { o.backend = name } }

// WithoutKey leaves the lock's key out of the spans (for keys that carry
// personal data).
func WithoutKey() Option { return func(o *options) { o.noKey = true } }

// Locker returns l traced: see the package documentation.
func Locker(l lock.Locker, opts ...Option) lock.Locker {
	o := options{}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.tp == nil {
		o.tp = otel.GetTracerProvider()
	}
	return &locker{l: l, o: o, tr: o.tp.Tracer(instrumentation)}
}

type locker struct {
	l  lock.Locker
	o  options
	tr trace.Tracer
}

func (t *locker) attrs(key string) []attribute.KeyValue {
	var a []attribute.KeyValue
	if !t.o.noKey {
		a = append(a, attribute.String("coordkit.lock.key", key))
	}
	if t.o.backend != "" {
		a = append(a, attribute.String("coordkit.lock.backend", t.o.backend))
	}
	return a
}

func (t *locker) Obtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return t.obtain(ctx, key, opts, false)
}

func (t *locker) TryObtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	return t.obtain(ctx, key, opts, true)
}

func (t *locker) obtain(ctx context.Context, key string, opts []lock.Option, try bool) (lock.Lease, error) {
	attrs := t.attrs(key)
	ctx, span := t.tr.Start(ctx, "coordkit.lock.obtain", trace.WithAttributes(attrs...),
		trace.WithAttributes(attribute.Bool("coordkit.lock.try", try)))
	var l lock.Lease
	var err error
	if try {
		l, err = t.l.TryObtain(ctx, key, opts...)
	} else {
		l, err = t.l.Obtain(ctx, key, opts...)
	}
	span.SetAttributes(attribute.String("coordkit.lock.result", result(err)))
	if err != nil {
		if !errors.Is(err, lock.ErrNotObtained) {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		return nil, err
	}
	span.SetAttributes(attribute.Int64("coordkit.lock.token", l.Token()))
	span.End()
	_, hold := t.tr.Start(ctx, "coordkit.lock.hold", trace.WithAttributes(attrs...),
		trace.WithAttributes(attribute.Int64("coordkit.lock.token", l.Token())))
	return &lease{Lease: l, span: hold, since: time.Now()}, nil
}

// result classifies an obtain's error for the coordkit.lock.result
// attribute.
func result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, lock.ErrNotObtained):
		return "not_obtained"
	}
	return "error"
}

// lease is a traced lease: it ends its hold span at Release. It keeps the
// wrapped lease's LeaseStatus (Err, Until) reachable through lock.LostCause.
type lease struct {
	lock.Lease
	span  trace.Span
	since time.Time
}

// Err returns the wrapped lease's Err, if it has one (lock.LeaseStatus).
func (l *lease) Err() error {
	if s, ok := l.Lease.(lock.LeaseStatus); ok {
		return s.Err()
	}
	return nil
}

// Until returns the wrapped lease's Until, if it has one.
func (l *lease) Until() time.Time {
	if s, ok := l.Lease.(lock.LeaseStatus); ok {
		return s.Until()
	}
	return time.Time{}
}

func (l *lease) Release(ctx context.Context) error {
	lost := false
	select {
	case <-l.Lost():
		lost = true
	default:
	}
	err := l.Lease.Release(ctx)
	l.span.SetAttributes(attribute.Bool("coordkit.lock.lost", lost),
		attribute.Int64("coordkit.lock.held_ms", time.Since(l.since).Milliseconds()))
	switch {
	case lost:
		cause := lock.LostCause(l.Lease)
		l.span.RecordError(cause)
		l.span.SetStatus(codes.Error, "lease lost before release: "+cause.Error())
	case err != nil:
		l.span.RecordError(err)
		l.span.SetStatus(codes.Error, err.Error())
	}
	l.span.End()
	return err
}
