package testserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/logtest"
	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name under which the Sentinel monitors the master.
const SentinelMaster = "coordkit"

// RedisSentinel is a master, one replica of it, and one Sentinel (quorum 1)
// monitoring them, all on loopback.
type RedisSentinel struct {
	master, replica *Redis
	sentinel        *Redis // a redis-server in sentinel mode
}

// NewRedisSentinel starts the master, the replica and the Sentinel and
// returns once the replica is in sync and the Sentinel knows both. The
// caller must Close it.
func NewRedisSentinel() (*RedisSentinel, error) {
	s := &RedisSentinel{}
	var err error
	// Diskless sync without the default 5 s delay: the replica is in sync
	// within milliseconds.
	if s.master, err = NewRedis(WithRedisArgs("--repl-diskless-sync-delay", "0")); err != nil {
		return nil, err
	}
	if s.replica, err = newRedis(redisOptions{startup: 10 * time.Second},
		[]string{"--replicaof", "127.0.0.1", strconv.Itoa(s.master.Port())}); err != nil {
		s.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Start the Sentinel only once the replica is in sync: it discovers
	// replicas from the master's INFO, which it reads at once and then only
	// every 10 s.
	if err = s.waitReady(ctx, s.replicaInSync); err != nil {
		s.Close()
		return nil, err
	}
	if err = s.startSentinel(); err != nil {
		s.Close()
		return nil, err
	}
	if err = s.waitReady(ctx, s.sentinelKnowsReplica); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// StartRedisSentinel is NewRedisSentinel for tests.
func StartRedisSentinel(tb testing.TB) *RedisSentinel {
	tb.Helper()
	s, err := NewRedisSentinel()
	return must(tb, s, err)
}

func (s *RedisSentinel) startSentinel() error {
	bin, err := redisBinary()
	if err != nil {
		return err
	}
	dir, err := tempDir("sentinel")
	if err != nil {
		return err
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
sentinel monitor %s 127.0.0.1 %d 1
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 5000
sentinel parallel-syncs %s 1
`, port, dir, SentinelMaster, s.master.Port(), SentinelMaster, SentinelMaster, SentinelMaster)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return err
		}
		r := &Redis{port: port, dir: dir, proc: &process{
			name: "redis-sentinel :" + strconv.Itoa(port), bin: bin, args: []string{conf, "--sentinel"},
			dir: dir, log: filepath.Join(dir, "sentinel.log"),
		}}
		if last = r.start(10 * time.Second); last == nil {
			s.sentinel = r
			return nil
		}
		r.proc.kill()
	}
	removeKeepingLogs(dir) // the error names sentinel.log
	return last
}

func (s *RedisSentinel) waitReady(ctx context.Context, ready func(context.Context) error) error {
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: sentinel set-up not ready: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *RedisSentinel) replicaInSync(ctx context.Context) error {
	m := redis.NewClient(&redis.Options{Addr: s.master.Addr(), MaxRetries: -1})
	defer m.Close()
	info, err := m.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "connected_slaves:1") || !strings.Contains(info, "state=online") {
		return fmt.Errorf("replica not in sync yet")
	}
	return nil
}

func (s *RedisSentinel) sentinelKnowsReplica(ctx context.Context) error {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.sentinel.Addr(), MaxRetries: -1})
	defer sc.Close()
	reps, err := sc.Replicas(ctx, SentinelMaster).Result()
	if err != nil {
		return err
	}
	// A replica is good to promote once the Sentinel has read its INFO.
	for _, r := range reps {
		if r["flags"] == "slave" && r["master-link-status"] == "ok" {
			return nil
		}
	}
	return fmt.Errorf("sentinel has not discovered a healthy replica yet: %v", reps)
}

// Master returns the server that was started as master.
func (s *RedisSentinel) Master() *Redis { return s.master }

// Replica returns the server that was started as replica.
func (s *RedisSentinel) Replica() *Redis { return s.replica }

// SentinelAddr returns the Sentinel's address.
func (s *RedisSentinel) SentinelAddr() string { return s.sentinel.Addr() }

// Options returns failover-client options: go-redis asks the Sentinel for the
// current master behind redis.UniversalClient.
func (s *RedisSentinel) Options() *redis.UniversalOptions {
	return &redis.UniversalOptions{Addrs: []string{s.sentinel.Addr()}, MasterName: SentinelMaster}
}

// NewClient returns a new failover client; the caller closes it.
func (s *RedisSentinel) NewClient() redis.UniversalClient {
	return redis.NewUniversalClient(s.Options())
}

// Client returns a new failover client that is closed when the test
// ends; the process-wide loggers write to tb meanwhile (logtest.Capture).
func (s *RedisSentinel) Client(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	logtest.Capture(tb)
	c := s.NewClient()
	tb.Cleanup(func() { c.Close() })
	return c
}

// MasterAddr asks the Sentinel for the current master's address.
func (s *RedisSentinel) MasterAddr(ctx context.Context) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.sentinel.Addr(), MaxRetries: -1})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", err
	}
	return a[0] + ":" + a[1], nil
}

// Failover asks the Sentinel to promote the replica and waits until it
// reports the new master, the new master says role:master and the old one,
// if alive, has been turned into its replica (so no write can still land on
// the old master and be lost).
func (s *RedisSentinel) Failover(ctx context.Context) error {
	before, err := s.MasterAddr(ctx)
	if err != nil {
		return err
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.sentinel.Addr(), MaxRetries: -1})
	defer sc.Close()
	if err := sc.Failover(ctx, SentinelMaster).Err(); err != nil {
		return err
	}
	for {
		now, err := s.MasterAddr(ctx)
		if err == nil && now != before && s.role(ctx, now) == "master" {
			// The Sentinel turns the old master into a replica only when it
			// next reads its INFO (up to 10 s); do what it will do now.
			if s.role(ctx, before) == "master" {
				host, port, _ := strings.Cut(now, ":")
				s.replicaOf(ctx, before, host, port)
			}
			if s.role(ctx, before) != "master" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: failover did not complete: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// role returns the ROLE of the server at addr ("" if it does not answer).
func (s *RedisSentinel) role(ctx context.Context, addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	v, err := c.Do(ctx, "ROLE").Slice()
	if err != nil || len(v) == 0 {
		return ""
	}
	r, _ := v[0].(string)
	return r
}

func (s *RedisSentinel) replicaOf(ctx context.Context, addr, host, port string) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	c.ReplicaOf(ctx, host, port)
}

// Close kills the Sentinel, the replica and the master. It is idempotent.
func (s *RedisSentinel) Close() {
	for _, r := range []*Redis{s.sentinel, s.replica, s.master} {
		if r != nil {
			r.Close()
		}
	}
}
