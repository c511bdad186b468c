package logtest

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The process-wide loggers (slog's default, and through it the log
// package; go-redis's) write to route once Capture has run. route writes
// each line to the output of the test that captured most recently and has
// not ended, else to stderr as before.
var (
	install sync.Once
	mu      sync.Mutex   // protects tests
	tests   []testing.TB // capturing tests, the current one last
)

// Capture routes what the libraries log while tb runs to tb's output
// (tb.Output, shown with the test's other lines when it fails, or with
// -v) instead of the process's stderr: records of slog's default logger
// (the default of every coordkit client built without WithLogger), lines
// of the log package (go-zookeeper's default logger among them) and of
// go-redis's internal logger (its pool's dial errors, Sentinel's
// failovers). The first call installs those loggers for the rest of the
// process. Capture is undone when tb's cleanups run; calling it again for
// tb does nothing. Tests run one at a time (none of coordkit's calls
// t.Parallel): a line logged by a goroutine a test left behind goes to
// the test running then, or to stderr between tests.
func Capture(tb testing.TB) {
	install.Do(func() {
		slog.SetDefault(slog.New(slog.NewTextHandler(route{}, &slog.HandlerOptions{
			Level:       slog.LevelDebug,
			ReplaceAttr: shortTime,
		})))
		redis.SetLogger(redisLogger{})
	})
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(tests, tb) {
		return
	}
	tests = append(tests, tb)
	// Cleanups run before tb ends, so route never writes to a test that
	// has ended (which panics).
	tb.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if i := slices.Index(tests, tb); i >= 0 {
			tests = slices.Delete(tests, i, i+1)
		}
	})
}

// Writer returns a writer whose lines go where Capture routes the
// process-wide loggers: to the current capturing test, else stderr.
func Writer() io.Writer { return route{} }

// Logger returns a log.Logger over Writer whose lines start with the time
// and prefix. It serves as go-zookeeper's zk.WithLogger and as
// go-sql-driver/mysql's SetLogger.
func Logger(prefix string) *log.Logger {
	return log.New(route{}, prefix, log.Ltime|log.Lmicroseconds|log.Lmsgprefix)
}

// route is an io.Writer over the current capturing test's output.
type route struct{}

func (route) Write(p []byte) (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if len(tests) == 0 {
		return os.Stderr.Write(p)
	}
	return tests[len(tests)-1].Output().Write(p)
}

// redisLogger is go-redis's internal.Logging over route.
type redisLogger struct{}

func (redisLogger) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(strings.TrimSuffix(fmt.Sprintf(format, v...), "\n"), "redis: ")
	fmt.Fprintf(route{}, "%s redis: %s\n", time.Now().Format("15:04:05.000000"), msg)
}

// shortTime writes a record's time as a time of day to the microsecond:
// a test's lines span seconds, never days.
func shortTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
		a.Value = slog.StringValue(a.Value.Time().Format("15:04:05.000000"))
	}
	return a
}
