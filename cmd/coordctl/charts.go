package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The page's charts: what serve measures, sampled every chart interval
// (--chart-interval, 2 s by default) into a ring of chartPoints samples (5
// minutes at 2 s), drawn as inline SVG by the server (no script, no
// external resource: the page works offline).

const (
	chartPoints  = 150             // samples kept
	defaultChart = 2 * time.Second // the default interval
	chartMaxTags = 8               // tags drawn, those that issued most
	chartW       = 460             // an SVG's size, in CSS pixels
	chartH       = 150
	plotL, plotR = 44, chartW - 10 // the plot area within it
	plotT, plotB = 10, chartH - 22
)

// palette colours the series: a tag keeps its colour across charts.
var palette = []string{"#1a56db", "#d9480f", "#2b8a3e", "#9c36b5", "#e8590c", "#0b7285", "#c2255c", "#5c940d"}

// chartSample is what serve measured at one instant.
type chartSample struct {
	at     time.Time
	issued map[string]int64 // per tag: IDs served so far
	left   map[string]int64 // per tag: IDs reserved in memory and not served yet
	locks  bool             // the lock scan answered (hold and wait are known)
	hold   float64          // the longest current hold of a lock under the prefix, in seconds
	wait   float64          // the longest current wait of a queued waiter, in seconds
	losses int64            // worker leases lost so far
}

// history is the ring of samples.
type history struct {
	mu      sync.Mutex // protects samples
	samples []chartSample
}

func (h *history) add(s chartSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) == chartPoints {
		copy(h.samples, h.samples[1:])
		h.samples = h.samples[:chartPoints-1]
	}
	h.samples = append(h.samples, s)
}

func (h *history) snapshot() []chartSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]chartSample(nil), h.samples...)
}

// lockAges tells how long each lock seen by successive scans has been
// held, and each waiter queued: from the first scan that saw that hold
// (its key and token) or that waiter, a lower bound. Used by the sampler
// alone.
type lockAges struct {
	holds, waits map[string]time.Time
}

// update records a scan at now and returns the longest current hold and
// wait, in seconds.
func (a *lockAges) update(ll lockList, now time.Time) (hold, wait float64) {
	holds := make(map[string]time.Time, len(ll.Locks))
	waits := map[string]time.Time{}
	for _, l := range ll.Locks {
		if len(l.Owners) > 0 {
			k := l.Kind + "\x00" + l.Key + "\x00" + strconv.FormatInt(l.Token, 10)
			first, ok := a.holds[k]
			if !ok {
				first = now
			}
			holds[k] = first
			hold = max(hold, now.Sub(first).Seconds())
		}
		for _, w := range l.Waiters {
			k := l.Key + "\x00" + w.Client + "\x00" + strconv.FormatUint(w.Seq, 10)
			first, ok := a.waits[k]
			if !ok {
				first = now
			}
			waits[k] = first
			wait = max(wait, now.Sub(first).Seconds())
		}
	}
	a.holds, a.waits = holds, waits
	return hold, wait
}

// sampleCharts samples every interval until ctx ends.
func (s *server) sampleCharts(ctx context.Context, every time.Duration) {
	defer s.wg.Done()
	ages := &lockAges{}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.sample(ctx, ages)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *server) sample(ctx context.Context, ages *lockAges) {
	now := s.cfg.now()
	cs := chartSample{at: now, issued: map[string]int64{}, left: map[string]int64{}, losses: s.m.leaseLosses.Load()}
	for _, t := range s.tagStates() {
		n := t.issued.Load()
		cs.issued[t.name] = n
		if n > 0 {
			cs.left[t.name] = max(t.seg.Stats().High-t.last.Load(), 0)
		}
	}
	if ll := s.scanLocks(ctx); ll.Error == "" {
		cs.locks = true
		cs.hold, cs.wait = ages.update(ll, now)
	}
	s.hist.add(cs)
}

// chart is one chart as the template draws it.
type chart struct {
	ID, Title  string
	Series     []chartSeries
	YMax, YMid string // the labels of the top and middle grid lines
	Span       string // how far back the x axis goes
	Empty      string // why nothing is drawn ("" when something is)
	W, H       int
	PlotL      int
	PlotR      int
	PlotT      int
	PlotB      int
	PlotMid    float64
}

type chartSeries struct {
	Name, Color string
	Points      string // the polyline's "x,y x,y ..."
	N           int    // its points
	Last        string // its last value, for the legend
}

// point is one value of a series at an instant.
type point struct {
	at time.Time
	v  float64
}

// charts turns the samples into the page's charts.
func charts(samples []chartSample) []chart {
	// The tags drawn: those that issued most, by name when tied.
	var tags []string
	if n := len(samples); n > 0 {
		last := samples[n-1]
		for t := range last.issued {
			tags = append(tags, t)
		}
		sort.Slice(tags, func(i, j int) bool {
			a, b := last.issued[tags[i]], last.issued[tags[j]]
			return a > b || a == b && tags[i] < tags[j]
		})
		if len(tags) > chartMaxTags {
			tags = tags[:chartMaxTags]
		}
		sort.Strings(tags)
	}
	rates := map[string][]point{}
	left := map[string][]point{}
	var hold, wait, losses []point
	for i, s := range samples {
		for _, t := range tags {
			if i > 0 {
				prev := samples[i-1]
				if n, ok := s.issued[t]; ok {
					if dt := s.at.Sub(prev.at).Seconds(); dt > 0 {
						rates[t] = append(rates[t], point{s.at, float64(n-prev.issued[t]) / dt})
					}
				}
			}
			if n, ok := s.left[t]; ok {
				left[t] = append(left[t], point{s.at, float64(n)})
			}
		}
		if s.locks {
			hold = append(hold, point{s.at, s.hold})
			wait = append(wait, point{s.at, s.wait})
		}
		losses = append(losses, point{s.at, float64(s.losses)})
	}
	var from, to time.Time
	if len(samples) > 0 {
		from, to = samples[0].at, samples[len(samples)-1].at
	}
	named := func(m map[string][]point) []namedPoints {
		var out []namedPoints
		for i, t := range tags {
			out = append(out, namedPoints{t, palette[i%len(palette)], m[t]})
		}
		return out
	}
	return []chart{
		draw("ids", "IDs issued per second, per tag", from, to, named(rates), "no tag has issued an ID yet"),
		draw("left", "IDs left in memory (segments reserved, not served), per tag", from, to, named(left), "no tag has issued an ID yet"),
		draw("locks", "Locks: longest current hold and wait (s)", from, to,
			[]namedPoints{{"hold", palette[0], hold}, {"wait", palette[1], wait}}, "no lock scan has answered yet"),
		draw("leases", "Worker leases lost (since start)", from, to, []namedPoints{{"lost", palette[6], losses}}, ""),
	}
}

type namedPoints struct {
	name, color string
	points      []point
}

// draw lays the series out on the x axis from..to and a y axis from 0 to
// a round maximum above every value.
func draw(id, title string, from, to time.Time, series []namedPoints, none string) chart {
	c := chart{ID: id, Title: title, W: chartW, H: chartH, PlotL: plotL, PlotR: plotR, PlotT: plotT, PlotB: plotB,
		PlotMid: float64(plotT+plotB) / 2, Span: span(to.Sub(from))}
	top := 0.0
	drawn := 0
	for _, s := range series {
		for _, p := range s.points {
			top = max(top, p.v)
		}
		if len(s.points) >= 2 {
			drawn++
		}
	}
	if drawn == 0 {
		c.Empty = "collecting samples"
		if none != "" && top == 0 {
			c.Empty = none
		}
		return c
	}
	top = niceCeil(top)
	c.YMax, c.YMid = label(top), label(top/2)
	dt := to.Sub(from).Seconds()
	for _, s := range series {
		cs := chartSeries{Name: s.name, Color: s.color, N: len(s.points)}
		var b strings.Builder
		for i, p := range s.points {
			x := float64(plotR)
			if dt > 0 {
				x = plotL + p.at.Sub(from).Seconds()/dt*(plotR-plotL)
			}
			y := plotB - p.v/top*(plotB-plotT)
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", x, y)
		}
		cs.Points = b.String()
		if n := len(s.points); n > 0 {
			cs.Last = label(s.points[n-1].v)
		}
		c.Series = append(c.Series, cs)
	}
	return c
}

// niceCeil returns 1, 2 or 5 times a power of ten at or above v (1 for 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// label writes an axis or legend value: 3 significant digits with k or M
// from 10,000 on, whole numbers from 10 on, else 2 significant digits.
func label(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	case v >= 10 || v == math.Trunc(v):
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
}

// span writes how far back the x axis goes: "4 min 58 s", "12 s".
func span(d time.Duration) string {
	d = d.Round(time.Second)
	if d >= time.Minute {
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%d s", int(d.Seconds()))
}
