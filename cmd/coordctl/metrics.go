package main

import (
	"net/http"
	"os"
	"runtime/metrics"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/coordkit/coordkit/contrib/coordprom"
	"github.com/coordkit/coordkit/idgen"
)

// serveMetrics are the ID service's measurements, served on /metrics by
// client_golang from a registry of the server's own:
//
//   - coordkit_idserver_*: the service's series (requests, errors, the
//     worker lease, each tag's segments), read from the server's state when
//     scraped (serveCollector) or counted by the handlers;
//   - coordkit_ids_* and coordkit_worker_leases_lost_total: the library's
//     idgen.Metrics hooks, recorded by contrib/coordprom's IDMetrics;
//   - go_* and process_*: client_golang's Go and process collectors.
type serveMetrics struct {
	reg *prometheus.Registry

	issuedSegment, issuedSnowflake atomic.Int64
	leaseLosses                    atomic.Int64
	errors                         [numReasons]prometheus.Counter
	durations                      *prometheus.HistogramVec // {endpoint}
	ids                            *idMetrics
}

// Error reasons, the label values of coordkit_idserver_errors_total.
const (
	reasonBadRequest  = iota // a malformed tag or n
	reasonUnknownTag         // a tag that is not registered
	reasonUnavailable        // Redis unreachable (or the tag registry)
	reasonLeaseLost          // /snowflake while a new worker ID is leased
	reasonClock              // /snowflake with the clock behind the last ID
	reasonNotFound           // a route that does not exist
	numReasons
)

var reasonNames = [numReasons]string{"bad_request", "unknown_tag", "unavailable", "lease_lost", "clock_backwards", "not_found"}

// endpointNames label the request duration histograms.
var endpointNames = []string{"id", "ids", "snowflake", "livez", "readyz", "metrics", "page", "status", "decode", "unknown"}

// buckets are the upper bounds, in seconds, of the request duration
// histograms: 50 µs to 2.5 s.
var buckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// newServeMetrics builds the registry; s's state is read when /metrics is
// scraped, once newServer has filled it.
func newServeMetrics(s *server) (*serveMetrics, error) {
	reg := prometheus.NewRegistry()
	prom, err := coordprom.NewIDMetrics(reg)
	if err != nil {
		return nil, err
	}
	m := &serveMetrics{reg: reg, ids: &idMetrics{prom: prom, tags: map[string]*tagMetrics{}}}
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coordkit_idserver_errors_total",
		Help: "Requests answered with an error, by reason (bad_request, unknown_tag, unavailable, lease_lost, clock_backwards, not_found).",
	}, []string{"reason"})
	for i, n := range reasonNames {
		m.errors[i] = errs.WithLabelValues(n) // every reason present from the start
	}
	m.durations = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "coordkit_idserver_request_duration_seconds",
		Help:    "Time to answer a request, by endpoint.",
		Buckets: buckets,
	}, []string{"endpoint"})
	for _, n := range endpointNames {
		m.durations.WithLabelValues(n)
	}
	rm := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	for _, c := range []prometheus.Collector{
		errs, m.durations, &serveCollector{s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "go_gc_cycles_total", Help: "Completed GC cycles."}, func() float64 {
			metrics.Read(rm)
			return float64(rm[0].Value.Uint64())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "process_pid", Help: "The process's PID."}, func() float64 {
			return float64(os.Getpid())
		}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ep returns the request duration histogram of an endpoint.
func (m *serveMetrics) ep(name string) prometheus.Observer { return m.durations.WithLabelValues(name) }

// handler serves the registry in the exposition format the scraper asks
// for (the text format by default).
func (m *serveMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// idMetrics is the idgen.Metrics of the Snowflake, the Segments and the
// worker leaser: it hands every hook to coordprom's IDMetrics, and keeps
// what the coordkit_idserver_* series and the page read (clock steps back,
// and per tag failed fetches, time spent fetching and waiting).
type idMetrics struct {
	idgen.NopMetrics
	prom           *coordprom.IDMetrics
	clockBackwards atomic.Int64

	mu   sync.Mutex // protects tags
	tags map[string]*tagMetrics
}

type tagMetrics struct {
	fetchErrors int64
	fetchNs     int64 // time spent in fetches, failed ones included
	waitNs      int64 // time Next calls waited for a segment
}

var _ idgen.Metrics = (*idMetrics)(nil)

func (m *idMetrics) Issued(tag string, n int) { m.prom.Issued(tag, n) }

func (m *idMetrics) ClockBackwards(behind time.Duration, err error) {
	m.clockBackwards.Add(1)
	m.prom.ClockBackwards(behind, err)
}

func (m *idMetrics) LeaseLost(service string, worker int64, cause error) {
	m.prom.LeaseLost(service, worker, cause)
}

func (m *idMetrics) tag(tag string) *tagMetrics {
	t := m.tags[tag]
	if t == nil {
		t = &tagMetrics{}
		m.tags[tag] = t
	}
	return t
}

func (m *idMetrics) SegmentFetched(tag string, size int64, took time.Duration, err error) {
	m.prom.SegmentFetched(tag, size, took, err)
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tag(tag)
	t.fetchNs += int64(took)
	if err != nil {
		t.fetchErrors++
	}
}

func (m *idMetrics) SegmentWaited(tag string, wait time.Duration) {
	m.prom.SegmentWaited(tag, wait)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tag(tag).waitNs += int64(wait)
}

func (m *idMetrics) snapshot(tag string) tagMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.tags[tag]; t != nil {
		return *t
	}
	return tagMetrics{}
}

// serveCollector writes the coordkit_idserver_* series that are read from
// the server's state when scraped: IDs issued, the worker lease, and one
// series per registered tag in use.
type serveCollector struct{ s *server }

// Descriptions of the series serveCollector writes.
var (
	descIssued         = desc("coordkit_idserver_ids_issued_total", "IDs issued, by kind (segment, snowflake).", "kind")
	descWorkerInfo     = desc("coordkit_idserver_worker_info", "The Snowflake worker ID leased (the worker label), its service, layout and lease backend; 1 while held.", "worker", "service", "layout", "backend")
	descLeaseHeld      = desc("coordkit_idserver_worker_lease_held", "1 while a worker lease is held, 0 while a new one is being leased.")
	descLeaseLosses    = desc("coordkit_idserver_worker_lease_losses_total", "Worker leases lost.")
	descLeaseStart     = desc("coordkit_idserver_worker_lease_start_time_seconds", "When the current worker ID was leased, since the Unix epoch.")
	descHighWater      = desc("coordkit_idserver_snowflake_high_water_seconds", "The Snowflake's high-water mark (every ID issued lies before it), since the Unix epoch.")
	descClockBackwards = desc("coordkit_idserver_clock_backwards_total", "Times the Snowflake found the clock behind its last ID by more than it tolerates.")
	descSegIssued      = desc("coordkit_idserver_segment_ids_issued_total", "Segment IDs issued, by tag.", "tag")
	descSegFetches     = desc("coordkit_idserver_segment_fetches_total", "Segments reserved in Redis, by tag.", "tag")
	descSegFetchErrs   = desc("coordkit_idserver_segment_fetch_errors_total", "Segment reservations that failed, by tag.", "tag")
	descSegFetchSec    = desc("coordkit_idserver_segment_fetch_seconds_total", "Time spent reserving segments, by tag.", "tag")
	descSegWaits       = desc("coordkit_idserver_segment_waits_total", "Requests that waited for a segment from Redis, by tag.", "tag")
	descSegWaitSec     = desc("coordkit_idserver_segment_wait_seconds_total", "Time requests waited for a segment, by tag.", "tag")
	descSegRollbacks   = desc("coordkit_idserver_segment_rollbacks_total", "Fetches that found the Redis counter at or below IDs already issued (Redis lost data) and raised it, by tag.", "tag")
	descSegStep        = desc("coordkit_idserver_segment_step", "Size of the next segment to reserve, by tag.", "tag")
	descSegHigh        = desc("coordkit_idserver_segment_high", "Last ID of the last segment reserved, by tag.", "tag")
	descSegLast        = desc("coordkit_idserver_segment_last_id", "Last segment ID served, by tag.", "tag")
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

func (c *serveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIssued, descWorkerInfo, descLeaseHeld, descLeaseLosses, descLeaseStart, descHighWater,
		descClockBackwards, descSegIssued, descSegFetches, descSegFetchErrs, descSegFetchSec, descSegWaits, descSegWaitSec,
		descSegRollbacks, descSegStep, descSegHigh, descSegLast} {
		ch <- d
	}
}

func (c *serveCollector) Collect(ch chan<- prometheus.Metric) {
	s, m := c.s, c.s.m
	counter := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, lv...)
	}
	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	counter(descIssued, float64(m.issuedSegment.Load()), "segment")
	counter(descIssued, float64(m.issuedSnowflake.Load()), "snowflake")
	counter(descClockBackwards, float64(m.ids.clockBackwards.Load()))
	counter(descLeaseLosses, float64(m.leaseLosses.Load()))
	if wk := s.worker.Load(); wk != nil {
		held := 1.0
		if s.leasing.Load() || wk.lease.Err() != nil {
			held = 0
		}
		gauge(descWorkerInfo, held, strconv.FormatInt(wk.lease.ID(), 10), s.cfg.service, s.cfg.layout.Name, s.cfg.backend)
		gauge(descLeaseHeld, held)
		gauge(descLeaseStart, float64(wk.since.UnixNano())/1e9)
		gauge(descHighWater, float64(wk.sf.HighWater().UnixNano())/1e9)
	}
	for _, t := range s.tagStates() {
		st, tm := t.seg.Stats(), m.ids.snapshot(t.name)
		counter(descSegIssued, float64(t.issued.Load()), t.name)
		counter(descSegFetches, float64(st.Fetches), t.name)
		counter(descSegFetchErrs, float64(tm.fetchErrors), t.name)
		counter(descSegFetchSec, float64(tm.fetchNs)/1e9, t.name)
		counter(descSegWaits, float64(st.Waits), t.name)
		counter(descSegWaitSec, float64(tm.waitNs)/1e9, t.name)
		counter(descSegRollbacks, float64(st.Rollbacks), t.name)
		gauge(descSegStep, float64(st.Step), t.name)
		gauge(descSegHigh, float64(st.High), t.name)
		gauge(descSegLast, float64(t.last.Load()), t.name)
	}
}

// tagStates returns the tags in use, sorted by name.
func (s *server) tagStates() []*tagState {
	m := *s.tags.Load()
	out := make([]*tagState, 0, len(m))
	for _, t := range m {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}
