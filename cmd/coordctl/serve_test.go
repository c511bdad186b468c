package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/testserver"
)

// startServer serves IDs from r through an httptest server; cfg's zero
// fields get the tests' defaults (static tags "orders" and "t", the Redis
// lease backend with a 1.5 s TTL).
func startServer(t *testing.T, r *testserver.Redis, cfg serverConfig) (*server, *httptest.Server) {
	t.Helper()
	if cfg.rdb == nil {
		cfg.rdb = r.Client(t)
	}
	if cfg.conn == nil {
		cfg.conn = &conn{timeout: 2 * time.Second}
	}
	if cfg.service == "" {
		cfg.service = "test"
	}
	if cfg.backend == "" {
		cfg.backend = "redis"
	}
	if cfg.layout.Name == "" {
		cfg.layout = idgen.LayoutTwitter
	}
	if cfg.step == 0 {
		cfg.step = 1000
	}
	if cfg.tags == nil && cfg.tagsKey == "" {
		cfg.tags = []string{"orders", "t"}
	}
	if cfg.leaseTTL == 0 {
		cfg.leaseTTL = 1500 * time.Millisecond
	}
	if cfg.releaseRetry == 0 {
		cfg.releaseRetry = 200 * time.Millisecond
	}
	s, err := newServer(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	hs := httptest.NewServer(s.handler())
	t.Cleanup(hs.Close)
	return s, hs
}

func get(t *testing.T, url string, json bool) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if json {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func parseIDs(t *testing.T, body string) []int64 {
	t.Helper()
	var ids []int64
	for _, f := range strings.Fields(body) {
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("not an ID: %q in %q", f, body)
		}
		ids = append(ids, id)
	}
	return ids
}

func TestServeEndpoints(t *testing.T) {
	r := testserver.StartRedis(t)
	_, hs := startServer(t, r, serverConfig{})

	// Every error series exists, at 0, before the first error.
	fams := scrape(t, hs.URL)
	for _, reason := range reasonNames {
		wantValue(t, fams, "coordkit_idserver_errors_total", 0, "reason", reason)
	}
	wantValue(t, fams, "coordkit_idserver_clock_backwards_total", 0)
	wantValue(t, fams, "coordkit_idserver_worker_info", 1, "worker", "0", "service", "test", "layout", "twitter", "backend", "redis")

	code, body := get(t, hs.URL+"/id/orders", false)
	first, err := strconv.ParseInt(strings.TrimSpace(body), 10, 64)
	if code != 200 || err != nil {
		t.Fatalf("/id: %d %q", code, body)
	}
	code, body = get(t, hs.URL+"/id/orders", true)
	var one struct{ ID string }
	if code != 200 || json.Unmarshal([]byte(body), &one) != nil {
		t.Fatalf("/id JSON: %d %q", code, body)
	}
	if id, _ := strconv.ParseInt(one.ID, 10, 64); id <= first {
		t.Fatalf("IDs not increasing: %d then %s", first, one.ID)
	}
	code, body = get(t, hs.URL+"/ids/orders?n=100", false)
	if code != 200 || len(strings.Fields(body)) != 100 {
		t.Fatalf("/ids: %d, %d lines", code, len(strings.Fields(body)))
	}
	code, body = get(t, hs.URL+"/ids/orders?n=5", true)
	var many struct{ IDs []string }
	if code != 200 || json.Unmarshal([]byte(body), &many) != nil || len(many.IDs) != 5 {
		t.Fatalf("/ids JSON: %d %q", code, body)
	}
	code, body = get(t, hs.URL+"/snowflake", false)
	sf, err := strconv.ParseInt(strings.TrimSpace(body), 10, 64)
	if code != 200 || err != nil || idgen.LayoutTwitter.Decompose(sf).Worker != 0 {
		t.Fatalf("/snowflake: %d %q", code, body)
	}
	code, body = get(t, hs.URL+"/snowflake?n=50", false)
	batch := parseIDs(t, body)
	if code != 200 || len(batch) != 50 || batch[0] <= sf {
		t.Fatalf("/snowflake?n=50: %d, %d IDs", code, len(batch))
	}
	for i := 1; i < len(batch); i++ {
		if batch[i] <= batch[i-1] {
			t.Fatalf("/snowflake?n=50 not increasing at %d", i)
		}
	}
	code, body = get(t, hs.URL+"/snowflake?n=3", true)
	if code != 200 || json.Unmarshal([]byte(body), &many) != nil || len(many.IDs) != 3 {
		t.Fatalf("/snowflake?n=3 JSON: %d %q", code, body)
	}
	for _, p := range []string{"/livez", "/readyz", "/healthz"} {
		if code, body = get(t, hs.URL+p, false); code != 200 || body != "ok\n" {
			t.Fatalf("%s: %d %q", p, code, body)
		}
	}
	if code, body = get(t, hs.URL+"/readyz", true); code != 200 || !strings.Contains(body, `"ready": true`) {
		t.Fatalf("/readyz JSON: %d %q", code, body)
	}
	for _, bad := range []string{"/id/bad%7Btag%7D", "/id/" + strings.Repeat("x", 65), "/ids/orders?n=0",
		"/ids/orders?n=10001", "/ids/orders?n=abc", "/ids/orders", "/snowflake?n=0", "/snowflake?n=x"} {
		if code, body := get(t, hs.URL+bad, false); code != 400 || body == "" {
			t.Errorf("%s: %d %q, want 400 with a message", bad, code, body)
		}
	}
	// JSON errors when JSON is asked for.
	code, body = get(t, hs.URL+"/ids/orders?n=0", true)
	var jerr struct {
		Error  string
		Status int
	}
	if code != 400 || json.Unmarshal([]byte(body), &jerr) != nil || jerr.Status != 400 || !strings.Contains(jerr.Error, "n must be") {
		t.Fatalf("JSON error: %d %q", code, body)
	}

	fams = scrape(t, hs.URL)
	wantValue(t, fams, "coordkit_idserver_ids_issued_total", 107, "kind", "segment")
	wantValue(t, fams, "coordkit_idserver_ids_issued_total", 54, "kind", "snowflake")
	wantValue(t, fams, "coordkit_idserver_errors_total", 9, "reason", "bad_request")
	wantValue(t, fams, "coordkit_idserver_worker_lease_held", 1)
	wantValue(t, fams, "coordkit_idserver_segment_ids_issued_total", 107, "tag", "orders")
	wantValue(t, fams, "coordkit_idserver_segment_step", 1000, "tag", "orders")
	wantValue(t, fams, "coordkit_idserver_segment_waits_total", 1, "tag", "orders")
	wantValue(t, fams, "coordkit_idserver_segment_rollbacks_total", 0, "tag", "orders")
	if v, ok := value(fams, "coordkit_idserver_segment_fetches_total", "tag", "orders"); !ok || v < 1 {
		t.Errorf("coordkit_idserver_segment_fetches_total{tag=orders} = %v, %v", v, ok)
	}
	if v, ok := value(fams, "coordkit_idserver_segment_last_id", "tag", "orders"); !ok || int64(v) <= first {
		t.Errorf("coordkit_idserver_segment_last_id{tag=orders} = %v, %v; the first ID was %d", v, ok, first)
	}
	// Histograms: 7 requests to /ids (5 of them bad), 5 to /snowflake.
	for ep, n := range map[string]uint64{"ids": 7, "snowflake": 5, "id": 4} {
		h := metric(fams, "coordkit_idserver_request_duration_seconds", "endpoint", ep).GetHistogram()
		if h.GetSampleCount() != n || h.GetSampleSum() <= 0 || len(h.GetBucket()) != len(buckets)+1 { // and +Inf
			t.Errorf("request_duration_seconds{endpoint=%s}: %v", ep, h)
		}
	}
	// The library's hooks, through contrib/coordprom.
	wantValue(t, fams, "coordkit_ids_issued_total", 107, "tag", "orders")
	wantValue(t, fams, "coordkit_ids_issued_total", 54, "tag", "")
	if v, ok := value(fams, "coordkit_ids_segment_fetches_total", "tag", "orders", "result", "ok"); !ok || v < 1 {
		t.Errorf("coordkit_ids_segment_fetches_total{tag=orders,result=ok} = %v, %v", v, ok)
	}
	// The deprecated coordctl_* series are gone; the Go and process ones
	// come from client_golang's collectors.
	for name := range fams {
		if strings.HasPrefix(name, "coordctl_") {
			t.Errorf("deprecated series %s is still written", name)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "go_gc_cycles_total", "process_start_time_seconds", "process_cpu_seconds_total", "process_pid"} {
		if fams[name] == nil {
			t.Errorf("no %s", name)
		}
	}
	// The coordkit_* families, with their types and labels, as users scrape
	// them.
	golden(t, "metrics_families", families(fams, "coordkit_"))
}

func TestServeUnknownTag(t *testing.T) {
	r := testserver.StartRedis(t)
	s, hs := startServer(t, r, serverConfig{tags: []string{"known"}})
	rdb := r.Client(t)
	ctx := context.Background()
	code, body := get(t, hs.URL+"/id/unknown", false)
	if code != 404 || !strings.Contains(body, `unknown tag "unknown"`) {
		t.Fatalf("unknown tag: %d %q", code, body)
	}
	code, body = get(t, hs.URL+"/ids/unknown?n=3", true)
	if code != 404 || !strings.Contains(body, `"status": 404`) {
		t.Fatalf("unknown tag, JSON: %d %q", code, body)
	}
	if _, ok := (*s.tags.Load())["unknown"]; ok {
		t.Fatal("the unknown tag has state in memory")
	}
	if keys, _ := rdb.Keys(ctx, "*unknown*").Result(); len(keys) != 0 {
		t.Fatalf("the unknown tag created keys: %v", keys)
	}
	if code, _ := get(t, hs.URL+"/id/known", false); code != 200 {
		t.Fatalf("known tag: %d", code)
	}
	fams := scrape(t, hs.URL)
	wantValue(t, fams, "coordkit_idserver_errors_total", 2, "reason", "unknown_tag")
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tag" && l.GetValue() == "unknown" {
					t.Errorf("%s has a series for the unknown tag", name)
				}
			}
		}
	}
}

func TestServeTagRegistry(t *testing.T) {
	r := testserver.StartRedis(t)
	env := map[string]string{"COORDKIT_REDIS": r.Addr()}
	if code, out, errOut := runCLI(t, env, "tags", "add", "alpha", "beta"); code != 0 || out != "registered 2 new tag(s) of 2\n" {
		t.Fatalf("tags add: %d %q %q", code, out, errOut)
	}
	s, hs := startServer(t, r, serverConfig{tagsKey: defaultTagsKey})
	if code, body := get(t, hs.URL+"/id/alpha", false); code != 200 {
		t.Fatalf("registered tag: %d %q", code, body)
	}
	if code, _ := get(t, hs.URL+"/id/gamma", false); code != 404 {
		t.Fatalf("unregistered tag: %d", code)
	}
	// beta is registered but nobody asked for it: the page and the status
	// list it all the same, with nothing issued, and it has no state.
	code, body := get(t, hs.URL+"/api/status", false)
	var st status
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || len(st.Tags) != 2 ||
		st.Tags[0].Tag != "alpha" || st.Tags[0].Issued != 1 || st.Tags[1].Tag != "beta" || st.Tags[1].Issued != 0 {
		t.Fatalf("/api/status tags: %d %s", code, body)
	}
	_, page := get(t, hs.URL+"/", false)
	if !strings.Contains(page, `<tr class="tag-row tag-idle" data-tag="beta"><td><b>beta</b></td><td colspan="7" class="muted">registered, no ID issued yet</td></tr>`) ||
		!strings.Contains(page, `<tr class="tag-row" data-tag="alpha">`) {
		t.Fatalf("the page does not list both tags:\n%s", page)
	}
	if _, ok := (*s.tags.Load())["beta"]; ok {
		t.Fatal("listing beta gave it state")
	}
	if _, ok := (*s.tags.Load())["gamma"]; ok {
		t.Fatal("an unregistered tag has state in memory")
	}
	if n, _ := r.Client(t).Exists(context.Background(), "coordkit:id:seg:gamma").Result(); n != 0 {
		t.Fatal("an unregistered tag has a counter")
	}
	// A tag registered while serving is served within a second.
	runCLI(t, env, "tags", "add", "gamma")
	waitFor(t, 5*time.Second, "gamma not served once registered", func() bool {
		code, _ := get(t, hs.URL+"/id/gamma", false)
		return code == 200
	})
	code, out, _ := runCLI(t, env, "tags", "list", "--json")
	var views []tagView
	if code != 0 || json.Unmarshal([]byte(out), &views) != nil || len(views) != 3 || views[0].Tag != "alpha" || views[0].Counter < 1000 {
		t.Fatalf("tags list --json: %d %q", code, out)
	}
	code, out, _ = runCLI(t, env, "tags", "list")
	if code != 0 {
		t.Fatalf("tags list: %d %q", code, out)
	}
	golden(t, "tags_list", maskSpaces(out))
	// A tag removed stops being served (the background refresh).
	if code, out, _ := runCLI(t, env, "tags", "remove", "alpha"); code != 0 || out != "removed alpha\n" {
		t.Fatalf("tags remove: %d %q", code, out)
	}
	waitFor(t, 3*registryEvery, "alpha still served once removed", func() bool {
		code, _ := get(t, hs.URL+"/id/alpha", false)
		return code == 404
	})
	if code, _, errOut := runCLI(t, env, "tags", "add", "bad{tag}"); code != exitUsage {
		t.Fatalf("bad tag: %d %q", code, errOut)
	}
}

func TestServeHundredThousandUniqueIDs(t *testing.T) {
	r := testserver.StartRedis(t)
	s, hs := startServer(t, r, serverConfig{})
	const clients, perClient = 16, 63 // 16 × 63 × 100 ≥ 100,000 IDs
	var mu sync.Mutex
	seen := make(map[int64]bool, clients*perClient*100)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perClient {
				resp, err := http.Get(hs.URL + "/ids/orders?n=100")
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("status %d: %s", resp.StatusCode, b)
					return
				}
				mu.Lock()
				for _, f := range strings.Fields(string(b)) {
					id, _ := strconv.ParseInt(f, 10, 64)
					if seen[id] {
						t.Errorf("duplicate ID %d", id)
					}
					seen[id] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != clients*perClient*100 {
		t.Fatalf("%d distinct IDs, want %d", len(seen), clients*perClient*100)
	}
	if st := (*s.tags.Load())["orders"].seg.Stats(); st.Fetches < 2 {
		t.Fatalf("only %d segment fetches for %d IDs", st.Fetches, len(seen))
	}
}

func TestServeRedisDownAndBack(t *testing.T) {
	r := testserver.StartRedis(t)
	s, hs := startServer(t, r, serverConfig{step: 10})
	code, body := get(t, hs.URL+"/ids/t?n=50", false)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	before := parseIDs(t, body)
	last := before[len(before)-1]
	_, body = get(t, hs.URL+"/snowflake", false)
	lastSF := parseIDs(t, body)[0]

	r.Kill()
	// What is left in memory is served; then 503 with a message that names
	// no address.
	got503 := false
	for range 20 {
		if code, body = get(t, hs.URL+"/ids/t?n=10", false); code == 503 {
			got503 = strings.Contains(body, "Redis unavailable")
			break
		}
	}
	if !got503 {
		t.Fatalf("no 503 with Redis down: last %d %q", code, body)
	}
	port := strconv.Itoa(r.Port())
	for _, p := range []string{"/ids/t?n=10", "/readyz", "/healthz"} {
		for _, js := range []bool{false, true} {
			code, body := get(t, hs.URL+p, js)
			if code != 503 || strings.Contains(body, "127.0.0.1") || strings.Contains(body, port) || strings.Contains(body, "dial") {
				t.Errorf("%s (JSON %v) with Redis down: %d %q", p, js, code, body)
			}
		}
	}
	if code, _ := get(t, hs.URL+"/livez", false); code != 200 {
		t.Fatalf("/livez with Redis down: %d", code)
	}
	// The lease is lost (renewals fail for its TTL): /snowflake refuses
	// rather than risk a second holder of the worker ID.
	waitFor(t, 10*time.Second, "snowflake still served after the lease was lost", func() bool {
		code, body := get(t, hs.URL+"/snowflake", true)
		return code == 503 && strings.Contains(body, "worker lease is lost")
	})
	// Redis comes back empty (no persistence): the segment counter is raised
	// above what was handed out, and a new worker ID is leased, whose
	// generator starts above the old one's IDs.
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "no segment ID after Redis came back", func() bool {
		code, body = get(t, hs.URL+"/id/t", false)
		return code == 200
	})
	if id := parseIDs(t, body)[0]; id <= last {
		t.Fatalf("after recovery ID %d <= %d handed out before", id, last)
	}
	waitFor(t, 15*time.Second, "no Snowflake ID after Redis came back", func() bool {
		code, body = get(t, hs.URL+"/snowflake", false)
		return code == 200
	})
	if id := parseIDs(t, body)[0]; id <= lastSF {
		t.Fatalf("Snowflake after a new lease %d <= %d issued before", id, lastSF)
	}
	if code, body := get(t, hs.URL+"/readyz", false); code != 200 {
		t.Fatalf("/readyz after recovery: %d %q", code, body)
	}
	fams := scrape(t, hs.URL)
	wantValue(t, fams, "coordkit_idserver_worker_lease_held", 1)
	wantValue(t, fams, "coordkit_idserver_worker_lease_losses_total", 1)
	wantValue(t, fams, "coordkit_idserver_segment_rollbacks_total", 1, "tag", "t")
	wantValue(t, fams, "coordkit_worker_leases_lost_total", 1, "service", "test")
	for _, reason := range []string{"unavailable", "lease_lost"} {
		if v, _ := value(fams, "coordkit_idserver_errors_total", "reason", reason); v == 0 {
			t.Errorf("no error counted for %s after the outage", reason)
		}
	}
	if s.m.leaseLosses.Load() != 1 {
		t.Fatalf("%d losses", s.m.leaseLosses.Load())
	}
}

// TestServeZKSessionExpired: the ZooKeeper session that holds the worker
// lease expires for real; segment IDs go on, and Snowflakes come back from
// a new worker ID, above the old ones.
func TestServeZKSessionExpired(t *testing.T) {
	r := testserver.StartRedis(t)
	z := testserver.StartZooKeeper(t)
	zc := z.DialT(t, 4*time.Second, nil)
	s, hs := startServer(t, r, serverConfig{backend: "zk", zc: zc.Conn, conn: &conn{timeout: 4 * time.Second}})
	code, body := get(t, hs.URL+"/snowflake?n=10", false)
	if code != 200 {
		t.Fatalf("%d %q", code, body)
	}
	before := parseIDs(t, body)
	oldWorker := s.worker.Load()

	done := make(chan error, 1)
	go func() { done <- zc.Expire() }()
	// Segment IDs are served all along.
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		default:
			if code, body := get(t, hs.URL+"/id/orders", false); code != 200 {
				t.Fatalf("segment IDs during the expiry: %d %q", code, body)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		break
	}
	waitFor(t, 15*time.Second, "no new worker lease after the session expired", func() bool {
		return s.worker.Load() != oldWorker
	})
	code, body = get(t, hs.URL+"/snowflake?n=10", false)
	if code != 200 {
		t.Fatalf("after the new lease: %d %q", code, body)
	}
	if after := parseIDs(t, body); after[0] <= before[len(before)-1] {
		t.Fatalf("Snowflake %d after the expiry <= %d before", after[0], before[len(before)-1])
	}
	if s.m.leaseLosses.Load() != 1 {
		t.Fatalf("%d losses", s.m.leaseLosses.Load())
	}
	// The old node is gone with its session; the new one is listed.
	code, out, errOut := runCLI(t, map[string]string{"COORDKIT_ZK": z.Servers()[0]}, "workers", "list", "test", "--backend", "zk", "--json")
	var ws []workerView
	if code != 0 || json.Unmarshal([]byte(out), &ws) != nil || len(ws) != 1 || ws[0].ID != s.worker.Load().lease.ID() {
		t.Fatalf("workers list after the expiry: %d %q %q", code, out, errOut)
	}
}

// runServe runs the serve command in the background and returns once it
// serves; cancel stops it as SIGTERM does, and done yields its exit status.
func runServe(t *testing.T, args ...string) (base string, out *syncBuffer, cancel func(), done <-chan int) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	out = &syncBuffer{}
	ch, finished := make(chan int, 1), make(chan struct{})
	go func() {
		defer close(finished)
		ch <- run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...), out, out, func(string) string { return "" })
	}()
	t.Cleanup(func() {
		stop()
		<-finished
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := out.String()
		if i := strings.Index(s, "serving IDs on "); i >= 0 {
			base = strings.Fields(s[i+len("serving IDs on "):])[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving: %q", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return base, out, stop, ch
}

func TestServeCommandStartsAndStops(t *testing.T) {
	r := testserver.StartRedis(t)
	base, out, cancel, done := runServe(t, "--redis", r.Addr(), "--tags", "orders")
	if code, body := get(t, base+"/id/orders", false); code != 200 {
		t.Fatalf("%d %q", code, body)
	}
	cancel() // as SIGTERM does
	select {
	case code := <-done:
		if code != exitOK || !strings.Contains(out.String(), "shut down") {
			t.Fatalf("exit %d: %q", code, out.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no graceful shutdown")
	}
	// The worker ID was given back.
	if n, _ := r.Client(t).Exists(context.Background(), "coordkit:worker:{coordctl}:0").Result(); n != 0 {
		t.Fatal("worker lease left after shutdown")
	}
	var buf syncBuffer
	code := run(context.Background(), []string{"serve", "--redis", "127.0.0.1:1", "--timeout", "200ms", "--tags", "a"}, &buf, &buf, func(string) string { return "" })
	if code != exitFailure {
		t.Fatalf("unreachable Redis: exit %d", code)
	}
	for _, args := range [][]string{{"--listen", "nowhere"}, {"--redis", "localhost"}, {"--tags", "a{b}"}, {"--lease-backend", "etcd"}} {
		code := run(context.Background(), append([]string{"serve"}, args...), &buf, &buf, func(string) string { return "" })
		if code != exitUsage {
			t.Errorf("serve %q: exit %d, want 2", args, code)
		}
	}
}

// TestServeExitOnLeaseLoss: with --exit-on-lease-loss, a lost lease (its
// key deleted, as a Redis restart without data would) ends the process with
// status 1.
func TestServeExitOnLeaseLoss(t *testing.T) {
	r := testserver.StartRedis(t)
	_, out, _, done := runServe(t, "--redis", r.Addr(), "--tags", "orders", "--service", "exiting",
		"--exit-on-lease-loss", "--lease-ttl", "600ms")
	if err := r.Client(t).Del(context.Background(), "coordkit:worker:{exiting}:0").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != exitFailure || !strings.Contains(out.String(), "worker lease lost") {
			t.Fatalf("exit %d: %q", code, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still serving after the lease was lost: %q", out.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeUnknownRoute: a route that does not exist answers 404 naming
// the routes near it and all of them (not a bare "404 page not found"); a
// route served under GET only answers 405 to another method.
func TestServeUnknownRoute(t *testing.T) {
	r := testserver.StartRedis(t)
	_, hs := startServer(t, r, serverConfig{})
	var all strings.Builder
	for _, tc := range []struct {
		method, path string
		json         bool
		code         int
	}{
		{"GET", "/ids", false, 404},
		{"GET", "/id", false, 404},
		{"GET", "/api/nope", false, 404},
		{"GET", "/nope/x", false, 404},
		{"GET", "/ids", true, 404},
		{"POST", "/snowflake", false, 405},
		{"DELETE", "/id/orders", false, 405},
	} {
		req, _ := http.NewRequest(tc.method, hs.URL+tc.path, nil)
		if tc.json {
			req.Header.Set("Accept", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s %s: %d, want %d: %s", tc.method, tc.path, resp.StatusCode, tc.code, b)
		}
		fmt.Fprintf(&all, "%s %s (JSON %v): %d\n%s", tc.method, tc.path, tc.json, resp.StatusCode, b)
	}
	golden(t, "unknown_route", all.String())
	fams := scrape(t, hs.URL)
	wantValue(t, fams, "coordkit_idserver_errors_total", 7, "reason", "not_found")
	wantValue(t, fams, "coordkit_idserver_errors_total", 0, "reason", "bad_request")
	// The page and the other routes are still theirs.
	if code, body := get(t, hs.URL+"/", false); code != 200 || !strings.Contains(body, "<!doctype html>") {
		t.Fatalf("/: %d", code)
	}
	if code, _ := get(t, hs.URL+"/id/orders", false); code != 200 {
		t.Fatalf("/id/orders: %d", code)
	}
}
