package main

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// chartIDs are the page's charts, in the order the page draws them.
var chartIDs = []string{"ids", "left", "locks", "leases"}

// chartInk counts, in a screenshot of /?part=charts (two charts a row,
// each 480×200 CSS pixels, its SVG 20 pixels below its top), the coloured
// pixels inside each chart's plot area: a drawn series is coloured, while
// the grid, the axes and the text are grey.
func chartInk(t *testing.T, shot []byte) []int {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	ink := make([]int, len(chartIDs))
	for i := range chartIDs {
		x0, y0 := (i%2)*480, (i/2)*200+20
		r := image.Rect(x0+plotL+1, y0+plotT-2, x0+plotR, y0+plotB+2)
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				cr, cg, cb, _ := img.At(x, y).RGBA()
				hi, lo := max(cr, cg, cb)>>8, min(cr, cg, cb)>>8
				if hi-lo > 60 {
					ink[i]++
				}
			}
		}
	}
	return ink
}

// screenshotCharts loads /?part=charts in headless Chromium and returns
// the PNG.
func screenshotCharts(t *testing.T, bin, base string) []byte {
	t.Helper()
	shot := filepath.Join(t.TempDir(), "charts.png")
	headless(t, bin, "--window-size=960,400", "--force-device-scale-factor=1", "--screenshot="+shot, base+"/?part=charts")
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPageCharts draws the page's charts from what serve sampled while
// IDs were drawn, a lock held and a waiter queued: in the DOM every chart
// has its series with points, and in a screenshot every chart's plot area
// has coloured pixels. A server that has sampled once has nothing to draw:
// the same screenshot check finds every chart empty.
func TestPageCharts(t *testing.T) {
	bin := chromium(t)
	r := testserver.StartRedis(t)
	ctx := context.Background()

	// Nothing sampled yet but the first sample: the check must see empty
	// charts, or it could not tell a drawn chart from an empty one.
	_, idle := startServer(t, r, serverConfig{chartEvery: time.Hour, service: "idle"})
	for i, n := range chartInk(t, screenshotCharts(t, bin, idle.URL)) {
		if n != 0 {
			t.Errorf("chart %s has %d coloured pixels with one sample", chartIDs[i], n)
		}
	}
	_, body := get(t, idle.URL+"/", false)
	if strings.Count(body, `class="chart-empty"`) != len(chartIDs) {
		t.Errorf("with one sample, not every chart says it is empty")
	}

	lc := lock.New(r.Client(t))
	t.Cleanup(func() { lc.Close() })
	held, err := lc.Obtain(lock.WithOwner(ctx, "owner-chart"), "orders:7", lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Release(ctx) })
	waiter := lock.New(r.Client(t))
	t.Cleanup(func() { waiter.Close() })
	wctx, cancel := context.WithCancel(lock.WithOwner(ctx, "owner-queued"))
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		waiter.Obtain(wctx, "orders:7", lock.WithTTL(time.Minute))
	}()
	t.Cleanup(func() { cancel(); <-waited })

	s, hs := startServer(t, r, serverConfig{tags: []string{"orders", "invoices"}, chartEvery: 100 * time.Millisecond})
	load, stop := context.WithCancel(ctx)
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		for load.Err() == nil {
			for _, u := range []string{"/ids/orders?n=50", "/ids/invoices?n=10"} {
				if resp, err := http.Get(hs.URL + u); err == nil {
					resp.Body.Close()
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	waitFor(t, 20*time.Second, "20 samples with the waiter queued", func() bool {
		n := 0
		for _, c := range s.hist.snapshot() {
			if c.wait > 0 && c.issued["invoices"] > 0 {
				n++
			}
		}
		return n >= 20
	})
	stop()
	<-loaded

	// The DOM: every chart has its series, each with points, none empty.
	dom := headless(t, bin, "--virtual-time-budget=3000", "--dump-dom", hs.URL+"/")
	for _, id := range chartIDs {
		i := strings.Index(dom, `<figure class="chart" id="chart-`+id+`">`)
		if i < 0 {
			t.Errorf("no chart %s on the page", id)
			continue
		}
		fig := dom[i:]
		fig = fig[:strings.Index(fig, "</figure>")]
		if strings.Contains(fig, "chart-empty") {
			t.Errorf("chart %s is empty:\n%s", id, fig)
		}
		series := regexp.MustCompile(`<polyline class="series" data-series="([^"]*)" data-points="(\d+)" points="([^"]*)"`).FindAllStringSubmatch(fig, -1)
		want := map[string]int{"ids": 2, "left": 2, "locks": 2, "leases": 1}[id]
		if len(series) != want {
			t.Errorf("chart %s: %d series, want %d:\n%s", id, len(series), want, fig)
		}
		for _, m := range series {
			if n, _ := strconv.Atoi(m[2]); n < 10 || len(strings.Fields(m[3])) != n {
				t.Errorf("chart %s, series %s: %s points: %q", id, m[1], m[2], m[3])
			}
		}
	}
	if !strings.Contains(dom, `data-series="orders"`) || !strings.Contains(dom, `data-series="wait"`) {
		t.Errorf("the charts lack the tag orders or the waiter")
	}

	// The screenshot: every chart's plot area has a drawn series.
	shot := screenshotCharts(t, bin, hs.URL)
	for i, n := range chartInk(t, shot) {
		if n < 100 {
			t.Errorf("chart %s: %d coloured pixels in its plot area: empty", chartIDs[i], n)
		}
	}
	if *update {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "coordctl-charts.png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLockAges: a hold's age runs from the first scan that saw its key and
// token; a new token (another hold) starts again, and waiters likewise.
func TestLockAges(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	held := func(token int64, waiters ...uint64) lockList {
		row := lockRow{Kind: kindHash, Key: "k", Owners: []ownerView{{"o", 1}}, Token: token}
		for _, seq := range waiters {
			row.Waiters = append(row.Waiters, waiterView{Client: "c", Seq: seq})
		}
		return lockList{Locks: []lockRow{row}}
	}
	var a lockAges
	for _, tc := range []struct {
		ll         lockList
		at         time.Duration
		hold, wait float64
	}{
		{held(1, 1), 0, 0, 0},
		{held(1, 1, 2), 3 * time.Second, 3, 3},
		{held(1, 2), 5 * time.Second, 5, 2}, // waiter 1 left; waiter 2 since 3 s
		{held(2, 2), 6 * time.Second, 0, 3}, // another hold
		{lockList{}, 7 * time.Second, 0, 0}, // free
		{held(2), 8 * time.Second, 0, 0},    // seen again: a new age
	} {
		hold, wait := a.update(tc.ll, t0.Add(tc.at))
		if hold != tc.hold || wait != tc.wait {
			t.Errorf("at %v: hold %v wait %v, want %v %v", tc.at, hold, wait, tc.hold, tc.wait)
		}
	}
	for v, want := range map[float64]string{0: "0", 0.05: "0.05", 9.63: "9.6", 27.4: "27", 6400.7: "6401", 15234: "15.2k", 2.5e6: "2.5M"} {
		if got := label(v); got != want {
			t.Errorf("label(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 7: 10, 1200: 2000, 15234: 20000} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}
