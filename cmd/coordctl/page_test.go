package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// chromiumInstall is how to install the browser the page test drives.
const chromiumInstall = "sudo apt-get install -y chromium (or ./scripts/deps.sh)"

// chromium returns the headless browser's path; a missing browser fails the
// test with the command that installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium is missing: install it with " + chromiumInstall)
	return ""
}

// headless runs the browser on one page and returns what it printed. The
// browser and its helper processes run in a process group of their own,
// killed as a whole if it overruns.
func headless(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--hide-scrollbars", "--user-data-dir=" + t.TempDir()}, args...)
	cmd := exec.CommandContext(ctx, bin, all...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %q: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

// TestPageInBrowser loads the operator page in headless Chromium, with a
// lock held (and a waiter queued behind it), a lock.Simple held and tags in
// use, and reads what it rendered: after its script has refreshed the live
// part, and with the decode box's answer. With -update it also writes the
// screenshot docs/coordctl-page.png.
func TestPageInBrowser(t *testing.T) {
	bin := chromium(t)
	r := testserver.StartRedis(t)
	ctx := context.Background()
	lc := lock.New(r.Client(t), lock.WithHolderMeta("service=orders host=web-1 pid=4242"))
	t.Cleanup(func() { lc.Close() })
	held, err := lc.Obtain(lock.WithOwner(ctx, "owner-page"), "orders:42", lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Release(ctx) })
	waiter := lock.New(r.Client(t))
	t.Cleanup(func() { waiter.Close() })
	wctx, cancel := context.WithCancel(lock.WithOwner(ctx, "owner-next"))
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		waiter.Obtain(wctx, "orders:42", lock.WithTTL(time.Minute))
	}()
	t.Cleanup(func() { cancel(); <-waited })
	sl := lock.NewSimple(r.Client(t))
	t.Cleanup(func() { sl.Close() })
	simple, err := sl.Obtain(ctx, "report:daily", lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { simple.Release(ctx) })
	waitFor(t, 5*time.Second, "the waiter is not queued", func() bool {
		info, _ := lc.Inspect(ctx, "orders:42")
		return len(info.Waiters) == 1
	})

	// Charts sampled every 200 ms, so that the screenshot shows them drawn.
	_, hs := startServer(t, r, serverConfig{tags: []string{"orders", "invoices"}, service: "checkout", chartEvery: 200 * time.Millisecond})
	for range 3 {
		get(t, hs.URL+"/ids/orders?n=100", false)
	}
	get(t, hs.URL+"/ids/invoices?n=10", false)
	_, body := get(t, hs.URL+"/snowflake", false)
	sf := strings.TrimSpace(body)

	// The status the page shows, as JSON.
	code, body := get(t, hs.URL+"/api/status", false)
	var st status
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || len(st.Tags) != 2 || st.Tags[1].Tag != "orders" ||
		st.Tags[1].Issued != 300 || st.Tags[1].End < st.Tags[1].Current || len(st.Locks.Locks) != 2 || st.Worker.Service != "checkout" {
		t.Fatalf("/api/status: %d %s", code, body)
	}
	if l := st.Locks.Locks[0]; l.Key != "orders:42" || l.Owners[0].Owner != "owner-page" || l.Token != held.Token() ||
		l.Meta != "service=orders host=web-1 pid=4242" ||
		len(l.Waiters) != 1 || l.Waiters[0].Owner != "owner-next" {
		t.Fatalf("/api/status lock: %+v", l)
	}
	code, body = get(t, hs.URL+"/api/decode?id="+sf+"&layout=twitter", false)
	if code != 200 || !strings.Contains(body, `"worker": 0`) || !strings.Contains(body, `"id": "`+sf+`"`) {
		t.Fatalf("/api/decode: %d %s", code, body)
	}
	if code, body = get(t, hs.URL+"/api/decode?id=zz", true); code != 400 || !strings.Contains(body, `"status": 400`) {
		t.Fatalf("/api/decode of a bad ID: %d %s", code, body)
	}

	// The page, once its script has fetched the live part again.
	dom := headless(t, bin, "--virtual-time-budget=5000", "--dump-dom", hs.URL+"/")
	for _, want := range []string{
		`<tr class="tag-row" data-tag="invoices">`, `<tr class="tag-row" data-tag="orders">`,
		`<tr class="lock-row" data-key="orders:42">`, `owner-page`, `owner-next`, `service=orders host=web-1 pid=4242`,
		`<tr class="lock-row" data-key="report:daily">`,
		`<b id="worker-id">0</b>`, `<dd id="worker-layout">twitter</dd>`, `id="high-water"`, `service <b>checkout</b>`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	// The script ran and swapped the live part in; the header says when,
	// in ISO 8601 UTC as the rest of the page (not "12:06:03 AM").
	if !regexp.MustCompile(`<span id="conn" class="meta">live: updated \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ</span>`).MatchString(dom) {
		t.Errorf("the header lacks an ISO UTC update time")
	}
	if !regexp.MustCompile(`data-tag="orders"><td><b>orders</b>.*?</td><td class="num mono">\d+</td>`).MatchString(dom) {
		t.Errorf("no current ID for orders in:\n%s", dom)
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}

	// The decode box, answered by the server (no script needed).
	dom = headless(t, bin, "--dump-dom", hs.URL+"/?id="+sf+"&layout=twitter")
	id, _ := strconv.ParseInt(sf, 10, 64)
	p := decodedTime(id)
	for _, want := range []string{`<dd id="decoded-worker">0</dd>`, `<dd class="mono" id="decoded-time">` + p + `</dd>`, `value="` + sf + `"`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the decoded ID lacks %q:\n%s", want, dom)
		}
	}

	// A screenshot, with IDs drawn meanwhile so that the page shows a
	// rate; -update keeps it for the README.
	load, stopLoad := context.WithCancel(ctx)
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		for load.Err() == nil {
			if resp, err := http.Get(hs.URL + "/ids/orders?n=100"); err == nil {
				resp.Body.Close()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	get(t, hs.URL+"/api/status", false) // the rate's first sample
	time.Sleep(3 * time.Second)         // the rate's next sample, and 15 of the charts
	shot := filepath.Join(t.TempDir(), "page.png")
	headless(t, bin, "--virtual-time-budget=3000", "--window-size=1280,1000", "--screenshot="+shot, hs.URL+"/?id="+sf+"&layout=twitter")
	stopLoad()
	<-loaded
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot: %v", err)
	}
	if *update {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "coordctl-page.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// decodedTime is the time the page shows for a Twitter-layout ID.
func decodedTime(id int64) string {
	d, _ := decodeID("twitter", strconv.FormatInt(id, 10), idgen.SerialFormat{}, time.Now())
	return d.Time
}
