package lock_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/locktest"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// lockers returns the two Redis lockers of the package on rdb.
func lockers(t *testing.T, rdb redis.UniversalClient) map[string]lock.Locker {
	t.Helper()
	c := lock.New(rdb)
	s := lock.NewSimple(rdb)
	t.Cleanup(func() { c.Close(); s.Close() })
	return map[string]lock.Locker{"Client": c, "Simple": s}
}

// TestTokenAfterOlderSnapshot: Redis restarts from an RDB saved before the
// last acquisitions (the fencing counter exists, with an old value). The
// next token must still exceed every token handed out.
func TestTokenAfterOlderSnapshot(t *testing.T) {
	for _, name := range []string{"Client", "Simple"} {
		t.Run(name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			rdb := srv.Client(t)
			l := lockers(t, rdb)[name]
			key := uniqueKey(t)
			locktest.Cycles(t, l, key, 1)
			snap, err := srv.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			last := locktest.Cycles(t, l, key, 5)
			if err := srv.RestartFromSnapshot(snap); err != nil {
				t.Fatal(err)
			}
			if got := locktest.Cycles(t, l, key, 1); got <= last {
				t.Fatalf("token after restart from an older snapshot = %d, want > %d (the last one handed out)", got, last)
			}
		})
	}
}

// TestTokenAfterLostAOFTail: an appendfsync everysec AOF loses its last
// writes when the host crashes; the counter comes back with an old value.
// (A SIGKILL alone loses nothing the kernel has; the crash is simulated by
// cutting the AOF back to its length before the last acquisitions.)
func TestTokenAfterLostAOFTail(t *testing.T) {
	for _, name := range []string{"Client", "Simple"} {
		t.Run(name, func(t *testing.T) {
			srv := testserver.StartRedis(t, testserver.WithAOF("everysec"))
			rdb := srv.Client(t)
			l := lockers(t, rdb)[name]
			key := uniqueKey(t)
			locktest.Cycles(t, l, key, 1)
			aofWritten(t, rdb)
			aof := incrAOF(t, srv)
			st, err := os.Stat(aof)
			if err != nil {
				t.Fatal(err)
			}
			last := locktest.Cycles(t, l, key, 5)
			srv.Kill()
			if err := os.Truncate(aof, st.Size()); err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			if got := locktest.Cycles(t, l, key, 1); got <= last {
				t.Fatalf("token after losing the AOF tail = %d, want > %d", got, last)
			}
		})
	}
}

// aofWritten waits until Redis has written its AOF buffer to the file.
// With appendfsync everysec, Redis answers a command before the write when
// a background fsync is still running (it postpones the write for up to 2
// s), so the file's size right after a reply may miss that reply's command.
func aofWritten(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := rdb.Info(ctxTimeout(t, 5*time.Second), "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "aof_buffer_length:0\r\n") && strings.Contains(info, "aof_rewrite_in_progress:0\r\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("AOF buffer not written within 10 s:\n%s", info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// incrAOF returns the path of srv's incremental AOF file (Redis 7's
// multi-part AOF: appendonlydir/*.incr.aof).
func incrAOF(t *testing.T, srv *testserver.Redis) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(srv.Dir(), "appendonlydir", "*.incr.aof"))
	if err != nil || len(m) != 1 {
		t.Fatalf("incremental AOF in %s: %v %v", srv.Dir(), m, err)
	}
	return m[0]
}

// TestTokenAfterFailoverToLaggingReplica: the replica misses the last
// acquisitions (paused), the master dies, Sentinel promotes the replica.
func TestTokenAfterFailoverToLaggingReplica(t *testing.T) {
	for _, name := range []string{"Client", "Simple"} {
		t.Run(name, func(t *testing.T) {
			s := testserver.StartRedisSentinel(t)
			rdb := s.Client(t)
			l := lockers(t, rdb)[name]
			key := uniqueKey(t)
			locktest.Cycles(t, l, key, 1)
			// The replica has the first acquisition once it acknowledges it.
			if err := rdb.Do(ctxTimeout(t, 5*time.Second), "WAIT", 1, 2000).Err(); err != nil {
				t.Fatal(err)
			}
			// Paused, and cut from the master: the writes below never reach it
			// (a paused process would still read what the kernel buffered).
			if err := s.Replica().Pause(); err != nil {
				t.Fatal(err)
			}
			master := redis.NewClient(&redis.Options{Addr: s.Master().Addr()})
			defer master.Close()
			if err := master.ClientKillByFilter(ctxTimeout(t, 5*time.Second), "TYPE", "replica").Err(); err != nil {
				t.Fatal(err)
			}
			last := locktest.Cycles(t, l, key, 5)
			s.Master().Kill()
			if err := s.Replica().Resume(); err != nil {
				t.Fatal(err)
			}
			if err := s.Failover(ctxTimeout(t, 30*time.Second)); err != nil {
				t.Fatal(err)
			}
			if got := locktest.Cycles(t, l, key, 1); got <= last {
				t.Fatalf("token after failover to a lagging replica = %d, want > %d", got, last)
			}
		})
	}
}
