package etcdworker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/coordkit/coordkit/etcd/etcdworker"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
)

// server is the package's shared etcd member.
var server *testserver.Etcd

func TestMain(m *testing.M) {
	if spec := os.Getenv(pauseHolderEnv); spec != "" {
		os.Exit(pauseHolder(spec)) // this process is TestPausedHolderIssuesNothing's holder
	}
	e, err := testserver.NewEtcd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdworker tests:", err)
		os.Exit(1)
	}
	server = e
	// The example connects as a user's program would, to servers from its
	// environment.
	os.Setenv("ETCD_ENDPOINTS", strings.Join(e.Endpoints(), ","))
	code := m.Run()
	e.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// ttl is the tests' lease TTL: renewals every 333 ms, a loss 1.33 s after
// the send of the last one that succeeded.
const ttl = 2 * time.Second

// dial returns an etcd client of endpoints, closed when the test ends.
func dial(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

var run atomic.Int64

// prefix is the test's own key prefix, new for every run (-count=N), so
// that marks stored by an earlier run do not move this one's generators.
func prefix(t *testing.T) string {
	return fmt.Sprintf("/test/%s-%d", strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()), run.Add(1))
}

// newLeaser returns a Leaser on cli with prefix p and the tests' TTL.
func newLeaser(t *testing.T, cli *clientv3.Client, p string, opts ...etcdworker.Option) *etcdworker.Leaser {
	t.Helper()
	l, err := etcdworker.New(cli, append([]etcdworker.Option{etcdworker.WithPrefix(p), etcdworker.WithTTL(ttl),
		etcdworker.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil)))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func release(t *testing.T, l *workerid.Lease) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release of worker %d: %v", l.ID(), err)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
