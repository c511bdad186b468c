package coordotel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/coordkit/coordkit/contrib/coordotel"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

var srv *testserver.Redis

func TestMain(m *testing.M) {
	var err error
	if srv, err = testserver.NewRedis(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("REDIS_ADDR", srv.Addr())
	code := m.Run()
	srv.Close()
	os.Exit(code)
}

// traced returns a traced lock client on the test server and the spans'
// recorder.
func traced(t *testing.T) (lock.Locker, *lock.Client, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	c := lock.New(rdb, lock.WithLogger(slog.New(slog.DiscardHandler)))
	t.Cleanup(func() { c.Close(); rdb.Close() })
	return coordotel.Locker(c, coordotel.WithTracerProvider(tp), coordotel.WithBackend("redis")), c, rec
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

// TestSpans: an obtain and a hold span per Do, with key, backend, token and
// result; a TryObtain on a held key is a not_obtained obtain span and no
// hold; a lease lost before its release ends its hold span in error with
// the cause; lock.LostCause still reaches the wrapped lease's reason.
func TestSpans(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, c, rec := traced(t)
	var token int64
	err := lock.Do(ctx, l, "orders:1", func(ctx context.Context) error {
		if _, err := l.TryObtain(lock.WithOwner(ctx, "someone else"), "orders:1"); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("TryObtain by another owner: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// 1.5 s: the hold must be lost to the ForceRelease (ErrNotHeld), not
	// expire first because a renewal starved for 200 ms (load 23 on 2
	// cores), as it could with 300 ms.
	lease, err := l.Obtain(ctx, "orders:2", lock.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	token = lease.Token()
	c.ForceRelease(ctx, "orders:2")
	<-lease.Lost()
	if cause := lock.LostCause(lease); !errors.Is(cause, lock.ErrNotHeld) {
		t.Fatalf("LostCause through the wrapper: %v", cause)
	}
	lease.Release(ctx)

	spans := rec.Ended()
	var obtains, holds, notObtained int
	var lostHold sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch s.Name() {
		case "coordkit.lock.obtain":
			obtains++
			if attr(s, "coordkit.lock.backend") != "redis" || attr(s, "coordkit.lock.key") == "" {
				t.Errorf("obtain span attributes: %v", s.Attributes())
			}
			if attr(s, "coordkit.lock.result") == "not_obtained" {
				notObtained++
			}
		case "coordkit.lock.hold":
			holds++
			if attr(s, "coordkit.lock.key") == "orders:2" {
				lostHold = s
			}
		}
	}
	if obtains != 3 || holds != 2 || notObtained != 1 {
		t.Fatalf("%d obtain spans (%d not obtained), %d hold spans; want 3 (1), 2", obtains, notObtained, holds)
	}
	if lostHold == nil || attr(lostHold, "coordkit.lock.lost") != "true" || lostHold.Status().Code.String() != "Error" ||
		attr(lostHold, "coordkit.lock.token") != fmt.Sprint(token) {
		t.Fatalf("the lost lease's hold span: %v %v", lostHold.Attributes(), lostHold.Status())
	}
}

func ExampleLocker() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	client := lock.New(rdb)
	defer client.Close()
	rec := tracetest.NewSpanRecorder() // in a service: an OTLP exporter
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	locker := coordotel.Locker(client, coordotel.WithTracerProvider(tp), coordotel.WithBackend("redis"))
	lock.Do(context.Background(), locker, "invoice:7", func(ctx context.Context) error { return nil })
	for _, s := range rec.Ended() {
		fmt.Println(s.Name())
	}
	// Output:
	// coordkit.lock.obtain
	// coordkit.lock.hold
}
