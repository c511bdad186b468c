package testserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/logtest"
	"github.com/redis/go-redis/v9"
)

// RedisCluster is a Redis Cluster of three masters on loopback, without
// replicas, with the 16384 hash slots split evenly between them.
type RedisCluster struct {
	nodes []*Redis
}

// NewRedisCluster starts three cluster-enabled servers, assigns the slots,
// joins them, and returns once every node reports cluster_state:ok and
// knows all three nodes. The caller must Close it.
func NewRedisCluster() (*RedisCluster, error) {
	c := &RedisCluster{}
	for range 3 {
		r, err := newRedis(redisOptions{startup: 10 * time.Second}, []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
		})
		if err != nil {
			c.Close()
			return nil, err
		}
		c.nodes = append(c.nodes, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.form(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// StartRedisCluster is NewRedisCluster for tests.
func StartRedisCluster(tb testing.TB) *RedisCluster {
	tb.Helper()
	c, err := NewRedisCluster()
	return must(tb, c, err)
}

func (c *RedisCluster) form(ctx context.Context) error {
	const slots = 16384
	per := slots / len(c.nodes)
	for i, n := range c.nodes {
		lo, hi := i*per, (i+1)*per-1
		if i == len(c.nodes)-1 {
			hi = slots - 1
		}
		if err := n.do("CLUSTER", "ADDSLOTSRANGE", lo, hi); err != nil {
			return fmt.Errorf("testserver: cluster ADDSLOTSRANGE on %s: %w", n.Addr(), err)
		}
	}
	for _, n := range c.nodes[1:] {
		if err := c.nodes[0].do("CLUSTER", "MEET", "127.0.0.1", n.Port(), n.bus); err != nil {
			return fmt.Errorf("testserver: cluster MEET %s: %w", n.Addr(), err)
		}
	}
	return c.waitOK(ctx)
}

// waitOK waits until every live node says cluster_state:ok and sees every node.
func (c *RedisCluster) waitOK(ctx context.Context) error {
	for {
		var notReady error
		for _, n := range c.nodes {
			if !n.Running() {
				continue
			}
			cl := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
			info, err := cl.ClusterInfo(ctx).Result()
			nodes, err2 := cl.ClusterNodes(ctx).Result()
			cl.Close()
			switch {
			case err != nil:
				notReady = err
			case err2 != nil:
				notReady = err2
			case !strings.Contains(info, "cluster_state:ok"):
				notReady = fmt.Errorf("%s: cluster_state not ok", n.Addr())
			case strings.Count(strings.TrimSpace(nodes), "\n")+1 != len(c.nodes) || strings.Contains(nodes, "handshake"):
				notReady = fmt.Errorf("%s does not know every node yet", n.Addr())
			}
		}
		if notReady == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: cluster not ready: %w", notReady)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Nodes returns the three master nodes (each can be killed, paused, restarted).
func (c *RedisCluster) Nodes() []*Redis { return c.nodes }

// Addrs returns the nodes' addresses.
func (c *RedisCluster) Addrs() []string {
	a := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		a[i] = n.Addr()
	}
	return a
}

// Options returns cluster client options; with several addresses go-redis
// builds a *redis.ClusterClient behind redis.UniversalClient.
func (c *RedisCluster) Options() *redis.UniversalOptions {
	return &redis.UniversalOptions{Addrs: c.Addrs(), IsClusterMode: true}
}

// NewClient returns a new cluster client; the caller closes it.
func (c *RedisCluster) NewClient() redis.UniversalClient {
	return redis.NewUniversalClient(c.Options())
}

// Client returns a new cluster client that is closed when the test ends;
// the process-wide loggers write to tb meanwhile (logtest.Capture).
func (c *RedisCluster) Client(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	logtest.Capture(tb)
	cl := c.NewClient()
	tb.Cleanup(func() { cl.Close() })
	return cl
}

// NodeFor returns the node that serves key's hash slot.
func (c *RedisCluster) NodeFor(ctx context.Context, key string) (*Redis, error) {
	cl := redis.NewClient(&redis.Options{Addr: c.nodes[0].Addr(), MaxRetries: -1})
	defer cl.Close()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	shards, err := cl.ClusterShards(ctx).Result()
	if err != nil {
		return nil, err
	}
	for _, sh := range shards {
		if !slices.ContainsFunc(sh.Slots, func(r redis.SlotRange) bool { return r.Start <= slot && slot <= r.End }) {
			continue
		}
		for _, m := range sh.Nodes {
			if m.Role != "master" {
				continue
			}
			for _, n := range c.nodes {
				if int64(n.port) == m.Port {
					return n, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("testserver: no node serves slot %d", slot)
}

// Close kills every node. It is idempotent.
func (c *RedisCluster) Close() {
	for _, n := range c.nodes {
		n.Close()
	}
}
