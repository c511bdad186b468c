package main

import (
	"context"
	"encoding/json"
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

func startServer(t *testing.T, r *testserver.Redis, step int64) (*server, *httptest.Server) {
	t.Helper()
	c := &conn{timeout: 2 * time.Second}
	s, err := newServer(context.Background(), serverConfig{
		rdb: r.Client(t), conn: c, service: "test", backend: "redis", layout: idgen.LayoutTwitter, step: step,
	})
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

func TestServeEndpoints(t *testing.T) {
	r := testserver.StartRedis(t)
	_, hs := startServer(t, r, 1000)

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
	if code, body = get(t, hs.URL+"/healthz", false); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	for _, bad := range []string{"/id/bad%7Btag%7D", "/id/" + strings.Repeat("x", 65), "/ids/orders?n=0",
		"/ids/orders?n=10001", "/ids/orders?n=abc", "/ids/orders"} {
		if code, body := get(t, hs.URL+bad, false); code != 400 || body == "" {
			t.Errorf("%s: %d %q, want 400 with a message", bad, code, body)
		}
	}
	_, metrics := get(t, hs.URL+"/metrics", false)
	for _, want := range []string{`coordctl_ids_issued_total{kind="segment"} 107`, `coordctl_ids_issued_total{kind="snowflake"} 1`,
		`coordctl_errors_total{reason="bad_request"} 6`, "coordctl_lease_held 1", "coordctl_segment_refills_total"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestServeHundredThousandUniqueIDs(t *testing.T) {
	r := testserver.StartRedis(t)
	s, hs := startServer(t, r, 1000)
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
	if s.fetches() < 2 {
		t.Fatalf("only %v segment refills for %d IDs", s.fetches(), len(seen))
	}
}

func TestServeRedisDownAndBack(t *testing.T) {
	r := testserver.StartRedis(t)
	_, hs := startServer(t, r, 10)
	code, body := get(t, hs.URL+"/ids/t?n=50", false)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	before := strings.Fields(body)
	last, _ := strconv.ParseInt(before[len(before)-1], 10, 64)

	r.Kill()
	// What is left in memory is served; then 503 with a message.
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
	if code, _ := get(t, hs.URL+"/healthz", false); code != 503 {
		t.Fatalf("/healthz with Redis down: %d", code)
	}
	// Redis comes back empty (no persistence): the generator raises the
	// counter above what it handed out, so no ID repeats.
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body = get(t, hs.URL+"/id/t", false)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery: %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if id, _ := strconv.ParseInt(strings.TrimSpace(body), 10, 64); id <= last {
		t.Fatalf("after recovery ID %d <= %d handed out before", id, last)
	}
	// The worker lease key went with Redis's data: the lease is lost, so
	// /snowflake refuses rather than risk a second holder of the ID.
	deadline = time.Now().Add(15 * time.Second)
	for {
		code, _ = get(t, hs.URL+"/snowflake", false)
		if code == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("snowflake still served after the lease key was lost")
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, metrics := get(t, hs.URL+"/metrics", false)
	if !strings.Contains(metrics, "coordctl_lease_held 0") || !strings.Contains(metrics, `coordctl_errors_total{reason="unavailable"}`) {
		t.Errorf("metrics after the outage:\n%s", grep(metrics, "coordctl_"))
	}
}

func grep(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestServeCommandStartsAndStops(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--redis", r.Addr(), "--listen", "127.0.0.1:0"}, &out, &out, func(string) string { return "" })
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "serving IDs on") {
		if time.Now().After(deadline) {
			t.Fatalf("not serving: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
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
	code := run(context.Background(), []string{"serve", "--redis", "127.0.0.1:1", "--timeout", "200ms"}, &out, &out, func(string) string { return "" })
	if code != exitFailure {
		t.Fatalf("unreachable Redis: exit %d", code)
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
