package main

import (
	"context"
	_ "embed"
	"errors"
	"html/template"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/idgen"
)

// The operator page: server-rendered HTML, no external resource (it works
// offline), and a few lines of JavaScript that fetch its live part again
// every 2 seconds (?part=live: relative, so that the page works behind a
// reverse proxy under a path too) and swap it in. Without JavaScript the
// page still shows everything, as of its loading.

//go:embed page.html
var pageHTML string

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"ms": func(d int64) string { return formatMs(d) },
}).Parse(pageHTML))

// status is what the page shows, and what /api/status answers.
type status struct {
	Service  string            `json:"service"`
	Version  string            `json:"version"`
	Now      string            `json:"now"`
	UptimeS  int64             `json:"uptime_s"`
	Ready    bool              `json:"ready"`
	Problems map[string]string `json:"problems"`
	Worker   workerStatus      `json:"worker"`
	Tags     []tagStatus       `json:"tags"`
	Locks    lockList          `json:"locks"`
	// EtcdLocks are the etcdlock locks, when serve was given --etcd.
	EtcdLocks *etcdLockList `json:"etcd_locks,omitempty"`
}

type workerStatus struct {
	ID        int64  `json:"id"`
	Service   string `json:"service"`
	Layout    string `json:"layout"`
	Backend   string `json:"backend"`
	Since     string `json:"since"`
	HeldForS  int64  `json:"held_for_s"`
	HighWater string `json:"high_water"`
	Held      bool   `json:"held"`
	Losses    int64  `json:"losses"`
	Issued    int64  `json:"issued"`
}

type tagStatus struct {
	Tag string `json:"tag"`
	// Current is the last ID served, End the last ID of the last segment
	// reserved (the next segment's, when it is ready).
	Current   int64   `json:"current,string"`
	End       int64   `json:"end,string"`
	Step      int64   `json:"step"`
	NextReady bool    `json:"next_ready"`
	Rate      float64 `json:"rate"` // IDs/s over the last second or more
	Issued    int64   `json:"issued"`
	Fetches   int64   `json:"fetches"`
	Waits     int64   `json:"waits"`
	Rollbacks int64   `json:"rollbacks"`
}

type lockList struct {
	Prefix    string    `json:"prefix"`
	Locks     []lockRow `json:"locks"`
	Truncated bool      `json:"truncated"`
	Error     string    `json:"error,omitempty"`
}

// lockRow is one held lock under the page's prefix.
type lockRow struct {
	Kind    string       `json:"kind"` // hash or simple
	Key     string       `json:"key"`
	Owners  []ownerView  `json:"owners"`
	Meta    string       `json:"meta,omitempty"` // the holder's metadata (lock.WithHolderMeta)
	TTLms   int64        `json:"ttl_ms"`
	Token   int64        `json:"token"`
	Waiters []waiterView `json:"waiters"`
	Granted *waiterView  `json:"granted,omitempty"`
}

// rateSample is a tag's issued count at an instant, and the rate measured
// up to it.
type rateSample struct {
	at     time.Time
	issued int64
	rate   float64
}

// rate returns the tag's IDs/s since the last sample at least a second old.
func (s *server) rate(t *tagState, now time.Time) float64 {
	s.rateMu.Lock()
	defer s.rateMu.Unlock()
	n := t.issued.Load()
	prev, ok := s.rates[t.name]
	if !ok {
		s.rates[t.name] = rateSample{at: now, issued: n}
		return 0
	}
	if el := now.Sub(prev.at); el >= time.Second {
		prev = rateSample{at: now, issued: n, rate: float64(n-prev.issued) / el.Seconds()}
		s.rates[t.name] = prev
	}
	return prev.rate
}

func (s *server) status(ctx context.Context) status {
	now := s.cfg.now()
	wk := s.worker.Load()
	problems := s.readiness(ctx)
	st := status{
		Service: s.cfg.service, Version: version(), Now: now.UTC().Format(time.RFC3339),
		UptimeS: int64(now.Sub(s.started).Seconds()), Ready: len(problems) == 0, Problems: problems,
		Worker: workerStatus{
			ID: wk.lease.ID(), Service: s.cfg.service, Layout: s.cfg.layout.Name, Backend: s.cfg.backend,
			Since: wk.since.UTC().Format(time.RFC3339), HeldForS: int64(now.Sub(wk.since).Seconds()),
			HighWater: wk.sf.HighWater().UTC().Format(msTime),
			Held:      problems["worker_lease"] == "", Losses: s.m.leaseLosses.Load(), Issued: s.m.issuedSnowflake.Load(),
		},
		Tags: []tagStatus{},
	}
	for _, t := range s.tagStates() {
		ss := t.seg.Stats()
		st.Tags = append(st.Tags, tagStatus{Tag: t.name, Current: t.last.Load(), End: ss.High, Step: ss.Step, NextReady: ss.Ready,
			Rate: s.rate(t, now), Issued: t.issued.Load(), Fetches: ss.Fetches, Waits: ss.Waits, Rollbacks: ss.Rollbacks})
	}
	// The registered tags nobody has asked for yet have no state here:
	// listed all the same, with nothing issued.
	for _, name := range s.idleTags(ctx) {
		st.Tags = append(st.Tags, tagStatus{Tag: name})
	}
	sort.Slice(st.Tags, func(i, j int) bool { return st.Tags[i].Tag < st.Tags[j].Tag })
	st.Locks = s.scanLocks(ctx)
	if s.cfg.etcd != nil {
		ll := s.scanEtcdLocks(ctx)
		st.EtcdLocks = &ll
	}
	return st
}

// idleTags returns the registered tags (registry mode) that have no state
// yet, sorted: no request has asked for them since the process started.
// It reads the registry if the last read is older than registryMiss.
func (s *server) idleTags(ctx context.Context) []string {
	if s.cfg.tags != nil {
		return nil // every tag of --tags has its state from the start
	}
	s.tagMu.Lock()
	defer s.tagMu.Unlock()
	if time.Since(s.loaded) >= registryMiss {
		if err := s.loadRegistryLocked(ctx); err != nil {
			s.logLimited("registry", "reading the tag registry failed", "key", s.cfg.tagsKey, "err", err)
		}
	}
	in := *s.tags.Load()
	var idle []string
	for name := range s.registry {
		if in[name] == nil {
			idle = append(idle, name)
		}
	}
	sort.Strings(idle)
	return idle
}

// Bounds of the page's lock scan: SCAN calls of scanCount keys each.
const (
	scanCount = 1000
	scanCalls = 50
)

// scanLocks lists the held locks under the page's prefix: a SCAN of the
// prefix (on every master of a Cluster), then lock.Client.Inspect of each
// hash lock and a read of each lock.Simple key.
func (s *server) scanLocks(ctx context.Context) lockList {
	prefix := s.cfg.lockPrefix
	ll := lockList{Prefix: prefix, Locks: []lockRow{}}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var mu sync.Mutex // protects hashes, simples and ll.Truncated (ForEachMaster scans at once)
	var hashes, simples []string
	scan := func(ctx context.Context, node redis.Cmdable) error {
		var cursor uint64
		for range scanCalls {
			keys, next, err := node.Scan(ctx, cursor, globEscape(prefix)+"*", scanCount).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, k := range keys {
				rest := k[len(prefix):]
				switch {
				case strings.HasPrefix(rest, "simple:{") && strings.HasSuffix(rest, "}"):
					simples = append(simples, rest[len("simple:{"):len(rest)-1])
				case strings.HasPrefix(rest, "{") && strings.HasSuffix(rest, "}"):
					hashes = append(hashes, rest[1:len(rest)-1])
				}
			}
			full := len(hashes)+len(simples) >= s.cfg.pageLocks
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
			if full {
				break
			}
		}
		mu.Lock()
		ll.Truncated = true
		mu.Unlock()
		return nil
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, s.rdb)
	}
	if err != nil {
		s.logLimited("scan", "the page's lock scan failed", "prefix", prefix, "err", err)
		ll.Error = "Redis unavailable"
		return ll
	}
	sort.Strings(hashes)
	sort.Strings(simples)
	for _, k := range hashes {
		if len(ll.Locks) >= s.cfg.pageLocks {
			ll.Truncated = true
			break
		}
		info, err := s.locks.Inspect(ctx, k)
		if err != nil {
			continue // not a lock hash, or released meanwhile
		}
		v := newHashView(info, "")
		if !v.Held && len(v.Waiters) == 0 {
			continue
		}
		ll.Locks = append(ll.Locks, lockRow{Kind: kindHash, Key: k, Owners: v.Owners, Meta: v.Meta, TTLms: v.TTLms,
			Token: v.HoldToken, Waiters: v.Waiters, Granted: v.Granted})
	}
	for _, k := range simples {
		if len(ll.Locks) >= s.cfg.pageLocks {
			ll.Truncated = true
			break
		}
		v, err := readSimple(ctx, s.rdb, prefix, k)
		if err != nil || !v.Held {
			continue
		}
		ll.Locks = append(ll.Locks, lockRow{Kind: kindSimple, Key: k, Owners: []ownerView{{v.Holder, 1}}, TTLms: v.TTLms,
			Token: v.Fence, Waiters: []waiterView{}})
	}
	return ll
}

func (s *server) apiStatus(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, s.status(r.Context()))
}

// decodeKinds are the page's and /api/decode's choices of layout.
func decodeKinds() []string {
	var k []string
	for _, l := range idgen.Presets() {
		k = append(k, l.Name)
	}
	return append(k, "objectid", "serial", "uuid")
}

func (s *server) decode(id, layout string) (*decoded, string) {
	if layout == "" {
		layout = s.cfg.layout.Name
	}
	d, err := decodeID(layout, strings.TrimSpace(id), idgen.SerialFormat{}, s.cfg.now())
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return nil, ue.msg
		}
		return nil, "cannot decode this ID"
	}
	return &d, ""
}

func (s *server) apiDecode(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d, msg := s.decode(q.Get("id"), q.Get("layout"))
	if d == nil {
		s.fail(w, r, http.StatusBadRequest, reasonBadRequest, msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	writeJSON(w, d)
}

// pageData is the template's input.
type pageData struct {
	status
	Kinds       []string
	DecodeID    string
	DecodeAs    string
	Decoded     *decoded
	DecodeError string
	Refresh     int // seconds between refreshes of the live part
	Charts      []chart
}

func (s *server) page(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := pageData{status: s.status(r.Context()), Kinds: decodeKinds(), DecodeID: q.Get("id"), DecodeAs: q.Get("layout"), Refresh: 2}
	if s.cfg.chartEvery >= 0 {
		d.Charts = charts(s.hist.snapshot())
	}
	if d.DecodeAs == "" {
		d.DecodeAs = s.cfg.layout.Name
	}
	if d.DecodeID != "" {
		d.Decoded, d.DecodeError = s.decode(d.DecodeID, d.DecodeAs)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline' 'self'; style-src 'unsafe-inline'")
	name := "page"
	switch q.Get("part") {
	case "live":
		name = "live"
	case "charts": // the charts alone, laid out at fixed places
		name = "charts-page"
	}
	if err := pageTmpl.ExecuteTemplate(w, name, d); err != nil {
		s.logLimited("page", "rendering the page failed", "err", err)
	}
}

// formatMs writes a duration in ms, with thousands grouped.
func formatMs(ms int64) string {
	if ms < 0 {
		return "-"
	}
	s := formatFloat(float64(ms))
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s + " ms"
}

// formatFloat writes v without exponent when it is an integer.
func formatFloat(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
