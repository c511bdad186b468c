package redisid_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen/redisid"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// nodeClients returns one client per server that fails fast on a dead server.
func nodeClients(t testing.TB, rs []*testserver.Redis) []redis.UniversalClient {
	t.Helper()
	cs := make([]redis.UniversalClient, len(rs))
	for i, r := range rs {
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs
}

func newTime(t testing.TB, clients []redis.UniversalClient, opts ...redisid.TimeOption) *redisid.Time {
	t.Helper()
	c, err := redisid.NewTime(redisid.Nodes(clients...), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTimeThreeNodes: two clients over three nodes, 8 goroutines each, one
// tag and shard: IDs unique; then one node is killed and both keep issuing.
func TestTimeThreeNodes(t *testing.T) {
	rs := testserver.StartRedisMasters(t, 3)
	ctx := ctxT(t)
	clients := []*redisid.Time{newTime(t, nodeClients(t, rs)), newTime(t, nodeClients(t, rs))}
	run := func(per int) []int64 {
		var (
			mu  sync.Mutex
			all []int64
			wg  sync.WaitGroup
		)
		for _, c := range clients {
			g, err := c.For("order", 53)
			if err != nil {
				t.Fatal(err)
			}
			for range 8 {
				wg.Go(func() {
					ids := make([]int64, 0, per)
					for range per {
						id, err := g.Next(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						ids = append(ids, id)
					}
					mu.Lock()
					all = append(all, ids...)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		return all
	}
	before := run(400)
	rs[0].Kill()
	after := run(400)
	all := append(before, after...)
	if len(all) != 2*2*8*400 {
		t.Fatalf("%d IDs", len(all))
	}
	noDuplicates(t, all)
	for _, id := range all {
		p, err := redisid.Parse(id)
		if err != nil || p.Shard != 53 {
			t.Fatalf("Parse(%d) = %+v, %v", id, p, err)
		}
		if d := time.Since(p.Time); d < 0 || d > time.Minute {
			t.Fatalf("ID %d carries time %v", id, p.Time)
		}
	}
	for _, id := range after {
		if p, _ := redisid.Parse(id); p.Sequence%3 == 0 {
			t.Fatalf("ID %d has sequence %d from the killed node 0", id, p.Sequence)
		}
	}
}

// TestTimeBusy: with 1024 nodes declared, a node owns one sequence value per
// millisecond, so every second call finds the millisecond full and must wait
// for the next one (without spinning in Redis).
func TestTimeBusy(t *testing.T) {
	ctx := ctxT(t)
	c := newTime(t, []redis.UniversalClient{sharedClient(t)}, redisid.WithNodeCount(1024),
		redisid.WithTimeKeyPrefix(uniqueKey(t)+":"))
	var last int64
	for range 30 {
		id, err := c.Next(ctx, "busy", 7)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := redisid.Parse(id)
		if p.Sequence != 0 || id <= last {
			t.Fatalf("ID %d (%+v) after %d", id, p, last)
		}
		last = id
	}
}

// TestTimeSequenceFull: one node, one shard: at most 1024 IDs per millisecond,
// all distinct, sequences in range.
func TestTimeSequenceFull(t *testing.T) {
	ctx := ctxT(t)
	c := newTime(t, []redis.UniversalClient{sharedClient(t)}, redisid.WithTimeKeyPrefix(uniqueKey(t)+":"))
	g, _ := c.For("full", 0)
	var (
		mu  sync.Mutex
		all []int64
		wg  sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			var ids []int64
			for range 1000 {
				id, err := g.Next(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				ids = append(ids, id)
			}
			mu.Lock()
			all = append(all, ids...)
			mu.Unlock()
		})
	}
	wg.Wait()
	noDuplicates(t, all)
}

// TestTimeClockBackwards simulates a Redis clock that went back by writing a
// future last-millisecond mark: that node refuses (the client moves on), and
// when every node refuses, Next returns ErrClockBackwards — never a
// duplicate.
func TestTimeClockBackwards(t *testing.T) {
	rs := testserver.StartRedisMasters(t, 2)
	ctx := ctxT(t)
	cs := nodeClients(t, rs)
	c := newTime(t, cs)
	future := time.Now().Add(time.Hour).UnixMilli()
	cs[0].Set(ctx, redisid.DefaultTimePrefix+"{pay}:last", future, 0)
	for range 20 {
		id, err := c.Next(ctx, "pay", 1)
		if err != nil {
			t.Fatal(err)
		}
		if p, _ := redisid.Parse(id); p.Sequence%2 != 1 {
			t.Fatalf("ID %d from the node whose clock is behind", id)
		}
	}
	cs[1].Set(ctx, redisid.DefaultTimePrefix+"{pay}:last", future, 0)
	_, err := c.Next(ctx, "pay", 1)
	if !errors.Is(err, redisid.ErrClockBackwards) {
		t.Fatalf("err = %v, want ErrClockBackwards", err)
	}
	var ne *redisid.NodeError
	if !errors.As(err, &ne) {
		t.Errorf("err %v carries no *NodeError", err)
	}
	t.Log(err)

	// A shard that remembers a later millisecond than the clock is caught
	// too, even if the mark is gone.
	cs[0].Del(ctx, redisid.DefaultTimePrefix+"{pay}:last")
	cs[1].Del(ctx, redisid.DefaultTimePrefix+"{pay}:last")
	for _, cl := range cs {
		cl.HSet(ctx, redisid.DefaultTimePrefix+"{pay}:seq", "m1", future, "q1", 0)
	}
	if _, err := c.Next(ctx, "pay", 1); !errors.Is(err, redisid.ErrClockBackwards) {
		t.Fatalf("err = %v, want ErrClockBackwards", err)
	}
}

// TestTimeSmallClockStep: a clock a few milliseconds behind the mark is
// waited out, not reported.
func TestTimeSmallClockStep(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	prefix := uniqueKey(t) + ":"
	c := newTime(t, []redis.UniversalClient{rdb}, redisid.WithTimeKeyPrefix(prefix),
		redisid.WithMaxClockBack(50*time.Millisecond))
	mark := time.Now().Add(20 * time.Millisecond).UnixMilli()
	rdb.Set(ctx, prefix+"{step}:last", mark, 0)
	id, err := c.Next(ctx, "step", 0)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := redisid.Parse(id); p.Millis < mark {
		t.Errorf("ID at %d ms, before the mark %d", p.Millis, mark)
	}
}

func TestTimeNodeDown(t *testing.T) {
	rs := testserver.StartRedisMasters(t, 2)
	ctx := ctxT(t)
	c := newTime(t, nodeClients(t, rs))
	rs[0].Kill()
	rs[1].Kill()
	_, err := c.Next(ctx, "down", 0)
	var ne *redisid.NodeError
	if err == nil || !errors.As(err, &ne) {
		t.Fatalf("err = %v, want node errors", err)
	}
	t.Log(err)
}

func TestTimeCorrupt(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	prefix := uniqueKey(t) + ":"
	c := newTime(t, []redis.UniversalClient{rdb}, redisid.WithTimeKeyPrefix(prefix))
	rdb.HSet(ctx, prefix+"{a}:last", "x", 1)
	rdb.Set(ctx, prefix+"{b}:seq", "x", 0)
	rdb.Set(ctx, prefix+"{c}:last", "soon", 0)
	for _, tag := range []string{"a", "b", "c"} {
		if _, err := c.Next(ctx, tag, 0); !errors.Is(err, redisid.ErrCorrupt) {
			t.Errorf("tag %s: err = %v, want ErrCorrupt", tag, err)
		}
	}
}

func TestTimeBadInput(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	c := newTime(t, []redis.UniversalClient{rdb})
	for _, tc := range []struct {
		tag   string
		shard int64
		want  error
	}{
		{"", 0, redisid.ErrEmptyTag},
		{"a{b", 0, redisid.ErrBadTag},
		{"a}", 0, redisid.ErrBadTag},
		{"ok", -1, redisid.ErrBadShard},
		{"ok", 4096, redisid.ErrBadShard},
	} {
		if _, err := c.Next(ctx, tc.tag, tc.shard); !errors.Is(err, tc.want) {
			t.Errorf("Next(%q, %d) err = %v, want %v", tc.tag, tc.shard, err, tc.want)
		}
		if _, err := c.For(tc.tag, tc.shard); !errors.Is(err, tc.want) {
			t.Errorf("For(%q, %d) err = %v, want %v", tc.tag, tc.shard, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name  string
		nodes []redisid.TimeNode
		opts  []redisid.TimeOption
		want  error
	}{
		{"no nodes", nil, nil, redisid.ErrBadNode},
		{"index too large", []redisid.TimeNode{{Client: rdb, Index: 1}}, nil, redisid.ErrBadNode},
		{"negative index", []redisid.TimeNode{{Client: rdb, Index: -1}}, nil, redisid.ErrBadNode},
		{"index twice", []redisid.TimeNode{{Client: rdb, Index: 0}, {Client: rdb, Index: 0}}, nil, redisid.ErrBadNode},
		{"nil client", []redisid.TimeNode{{Index: 0}}, nil, redisid.ErrBadNode},
		{"count too small", redisid.Nodes(rdb, rdb), []redisid.TimeOption{redisid.WithNodeCount(1)}, redisid.ErrBadNode},
		{"count too large", redisid.Nodes(rdb), []redisid.TimeOption{redisid.WithNodeCount(1025)}, redisid.ErrBadNode},
		{"negative clock back", redisid.Nodes(rdb), []redisid.TimeOption{redisid.WithMaxClockBack(-1)}, redisid.ErrBadOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := redisid.NewTime(tc.nodes, tc.opts...); !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := redisid.NewTime([]redisid.TimeNode{{Client: rdb, Index: 5}}, redisid.WithNodeCount(8)); err != nil {
		t.Errorf("index 5 of 8 nodes: %v", err)
	}
}

func TestParseRoundTrip(t *testing.T) {
	// The example of hengyunabc's README: 2015-03-13 10:00:00 CST, shard 53, seq 4.
	id, err := redisid.FromReply(1426212000, 0, 53, 4)
	if err != nil || id != 5981966696448054276 {
		t.Fatalf("FromReply = %d, %v", id, err)
	}
	for _, tc := range []struct{ sec, usec, shard, seq int64 }{
		{0, 0, 0, 0},
		{1426212000, 999_999, 4095, 1023},
		{1_700_000_000, 123_456, 1, 512},
		{redisid.MaxMillis / 1000, (redisid.MaxMillis % 1000) * 1000, 4095, 1023},
	} {
		id, err := redisid.FromReply(tc.sec, tc.usec, tc.shard, tc.seq)
		if err != nil {
			t.Fatal(err)
		}
		p, err := redisid.Parse(id)
		if err != nil || p.Millis != tc.sec*1000+tc.usec/1000 || p.Shard != tc.shard || p.Sequence != tc.seq ||
			!p.Time.Equal(time.UnixMilli(p.Millis)) {
			t.Errorf("Parse(FromReply(%v)) = %+v, %v", tc, p, err)
		}
	}
	for _, tc := range []struct {
		sec, usec, shard, seq int64
		want                  error
	}{
		{-1, 0, 0, 0, redisid.ErrBadID},
		{0, 1_000_000, 0, 0, redisid.ErrBadID},
		{0, 0, 4096, 0, redisid.ErrBadShard},
		{0, 0, 0, 1024, redisid.ErrBadID},
		{redisid.MaxMillis/1000 + 1, 0, 0, 0, redisid.ErrTimeOverflow},
	} {
		if _, err := redisid.FromReply(tc.sec, tc.usec, tc.shard, tc.seq); !errors.Is(err, tc.want) {
			t.Errorf("FromReply(%v) err = %v, want %v", tc, err, tc.want)
		}
	}
	if _, err := redisid.Parse(-5); !errors.Is(err, redisid.ErrBadID) {
		t.Errorf("Parse(-5) err = %v", err)
	}
	if got := redisid.End.Format(time.RFC3339Nano); got != "2039-09-07T15:47:35.551Z" {
		t.Errorf("End = %s", got)
	}
}

// TestTimeCluster runs the TIME script and a segment on Redis Cluster: all
// keys of one call share a slot.
func TestTimeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node Redis Cluster")
	}
	cl := testserver.StartRedisCluster(t)
	rdb := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := redisid.LoadScripts(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	c := newTime(t, []redis.UniversalClient{rdb})
	// The tags' keys hash to different slots (nodes); each tag's IDs are
	// unique and carry the shard asked for.
	for _, tag := range []string{"order", "user", "pay", "x"} {
		var ids []int64
		for range 50 {
			id, err := c.Next(ctx, tag, 9)
			if err != nil {
				t.Fatal(err)
			}
			if p, err := redisid.Parse(id); err != nil || p.Shard != 9 {
				t.Fatalf("%s: Parse(%d) = %+v, %v", tag, id, p, err)
			}
			ids = append(ids, id)
		}
		noDuplicates(t, ids)
	}
	h := "{hash}:ids"
	if _, err := redisid.CreateHash(ctx, rdb, h, 1, 5); err != nil {
		t.Fatal(err)
	}
	hg, _ := redisid.NewHash(rdb, h)
	if id, err := hg.Next(ctx); err != nil || id != 1 {
		t.Fatalf("step hash on Cluster: %d, %v", id, err)
	}
	s := newSegments(t, rdb)
	if id, err := s.Next(ctx, "order"); err != nil || id != 1 {
		t.Fatalf("segment on Cluster: %d, %v", id, err)
	}
}

// TestLoadScripts loads every script on a real server.
func TestLoadScripts(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	if err := redisid.LoadScripts(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"raise.lua", "stephash.lua", "createhash.lua", "time.lua"} {
		sha := redisid.ScriptSHA(name)
		if sha == "" {
			t.Fatalf("no SHA for %s", name)
		}
		ok, err := rdb.ScriptExists(ctx, sha).Result()
		if err != nil || len(ok) != 1 || !ok[0] {
			t.Errorf("%s (%s) not in the script cache: %v, %v", name, sha, ok, err)
		}
	}
	if redisid.ScriptSHA("nope.lua") != "" {
		t.Error("ScriptSHA of an unknown script")
	}
}
