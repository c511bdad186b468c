package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

// serveMetrics are the ID service's measurements. /metrics writes them in
// Prometheus's text exposition format (version 0.0.4) by hand: coordctl
// lives in coordkit's module, and users who import only the library
// packages must not find a Prometheus client in their module graph (the
// adapter for the library's hooks is the module contrib/coordprom).
//
// Every series is named coordkit_idserver_*. The coordctl_* series of
// earlier versions are still written, marked deprecated in their HELP, and
// will be removed.
type serveMetrics struct {
	issuedSegment, issuedSnowflake atomic.Int64
	errors                         [numReasons]atomic.Int64
	leaseLosses                    atomic.Int64
	endpoints                      map[string]*endpoint // fixed at construction: read without a lock
	ids                            *idMetrics
}

// Error reasons, the label values of coordkit_idserver_errors_total.
const (
	reasonBadRequest  = iota // a malformed tag or n
	reasonUnknownTag         // a tag that is not registered
	reasonUnavailable        // Redis unreachable (or the tag registry)
	reasonLeaseLost          // /snowflake while a new worker ID is leased
	reasonClock              // /snowflake with the clock behind the last ID
	numReasons
)

var reasonNames = [numReasons]string{"bad_request", "unknown_tag", "unavailable", "lease_lost", "clock_backwards"}

// endpointNames label the request duration histograms.
var endpointNames = []string{"id", "ids", "snowflake", "livez", "readyz", "metrics", "page", "status", "decode"}

func newServeMetrics() *serveMetrics {
	m := &serveMetrics{endpoints: map[string]*endpoint{}, ids: &idMetrics{tags: map[string]*tagMetrics{}}}
	for _, n := range endpointNames {
		m.endpoints[n] = &endpoint{}
	}
	return m
}

func (m *serveMetrics) ep(name string) *endpoint { return m.endpoints[name] }

// buckets are the upper bounds, in seconds, of the request duration
// histograms: 50 µs to 2.5 s.
var buckets = [...]float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// endpoint is one endpoint's request duration histogram. Each bucket counts
// the requests that fell in it alone; /metrics adds them up.
type endpoint struct {
	counts [len(buckets) + 1]atomic.Int64 // the last one: above every bound (+Inf)
	sumNs  atomic.Int64
}

func (e *endpoint) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(buckets) && s > buckets[i] {
		i++
	}
	e.counts[i].Add(1)
	e.sumNs.Add(int64(d))
}

// idMetrics is the idgen.Metrics of the Snowflake and the Segments: clock
// steps back, segment fetches that failed, and the time Next waited for a
// segment. Issued is left to NopMetrics: the handlers count IDs per request.
type idMetrics struct {
	idgen.NopMetrics
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

func (m *idMetrics) ClockBackwards(time.Duration, error) { m.clockBackwards.Add(1) }

func (m *idMetrics) tag(tag string) *tagMetrics {
	t := m.tags[tag]
	if t == nil {
		t = &tagMetrics{}
		m.tags[tag] = t
	}
	return t
}

func (m *idMetrics) SegmentFetched(tag string, _ int64, took time.Duration, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tag(tag)
	t.fetchNs += int64(took)
	if err != nil {
		t.fetchErrors++
	}
}

func (m *idMetrics) SegmentWaited(tag string, wait time.Duration) {
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

// processStart is when this process started serving, for
// process_start_time_seconds.
var processStart = time.Now()

// writeMetrics writes the service's metrics, then the Go runtime's and the
// process's usual few.
func (s *server) writeMetrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m := s.m
	var b strings.Builder
	family(&b, "coordkit_idserver_ids_issued_total", "counter", "IDs issued, by kind (segment, snowflake).",
		sample{`kind="segment"`, float64(m.issuedSegment.Load())},
		sample{`kind="snowflake"`, float64(m.issuedSnowflake.Load())})
	var errs []sample
	for i, n := range reasonNames {
		errs = append(errs, sample{`reason="` + n + `"`, float64(m.errors[i].Load())})
	}
	family(&b, "coordkit_idserver_errors_total", "counter",
		"Requests answered with an error, by reason (bad_request, unknown_tag, unavailable, lease_lost, clock_backwards).", errs...)
	s.writeHistograms(&b)

	// The worker lease.
	wk := s.worker.Load()
	held := 1.0
	if s.leasing.Load() || wk.lease.Err() != nil {
		held = 0
	}
	family(&b, "coordkit_idserver_worker_info", "gauge", "The Snowflake worker ID leased (the worker label), its service, layout and lease backend; 1 while held.",
		sample{fmt.Sprintf(`worker="%d",service=%s,layout=%s,backend=%s`, wk.lease.ID(),
			quote(s.cfg.service), quote(s.cfg.layout.Name), quote(s.cfg.backend)), held})
	family(&b, "coordkit_idserver_worker_lease_held", "gauge", "1 while a worker lease is held, 0 while a new one is being leased.", sample{"", held})
	family(&b, "coordkit_idserver_worker_lease_losses_total", "counter", "Worker leases lost.", sample{"", float64(m.leaseLosses.Load())})
	family(&b, "coordkit_idserver_worker_lease_start_time_seconds", "gauge", "When the current worker ID was leased, since the Unix epoch.",
		sample{"", float64(wk.since.UnixNano()) / 1e9})
	family(&b, "coordkit_idserver_snowflake_high_water_seconds", "gauge",
		"The Snowflake's high-water mark (every ID issued lies before it), since the Unix epoch.",
		sample{"", float64(wk.sf.HighWater().UnixNano()) / 1e9})
	family(&b, "coordkit_idserver_clock_backwards_total", "counter",
		"Times the Snowflake found the clock behind its last ID by more than it tolerates.", sample{"", float64(m.ids.clockBackwards.Load())})

	// The segments, one series per registered tag in use.
	tags := s.tagStates()
	var issued, fetches, waits, waitSec, fetchErrs, fetchSec, rollbacks, step, high, last []sample
	for _, t := range tags {
		st, tm := t.seg.Stats(), m.ids.snapshot(t.name)
		l := "tag=" + quote(t.name)
		issued = append(issued, sample{l, float64(t.issued.Load())})
		fetches = append(fetches, sample{l, float64(st.Fetches)})
		fetchErrs = append(fetchErrs, sample{l, float64(tm.fetchErrors)})
		fetchSec = append(fetchSec, sample{l, float64(tm.fetchNs) / 1e9})
		waits = append(waits, sample{l, float64(st.Waits)})
		waitSec = append(waitSec, sample{l, float64(tm.waitNs) / 1e9})
		rollbacks = append(rollbacks, sample{l, float64(st.Rollbacks)})
		step = append(step, sample{l, float64(st.Step)})
		high = append(high, sample{l, float64(st.High)})
		last = append(last, sample{l, float64(t.last.Load())})
	}
	family(&b, "coordkit_idserver_segment_ids_issued_total", "counter", "Segment IDs issued, by tag.", issued...)
	family(&b, "coordkit_idserver_segment_fetches_total", "counter", "Segments reserved in Redis, by tag.", fetches...)
	family(&b, "coordkit_idserver_segment_fetch_errors_total", "counter", "Segment reservations that failed, by tag.", fetchErrs...)
	family(&b, "coordkit_idserver_segment_fetch_seconds_total", "counter", "Time spent reserving segments, by tag.", fetchSec...)
	family(&b, "coordkit_idserver_segment_waits_total", "counter", "Requests that waited for a segment from Redis, by tag.", waits...)
	family(&b, "coordkit_idserver_segment_wait_seconds_total", "counter", "Time requests waited for a segment, by tag.", waitSec...)
	family(&b, "coordkit_idserver_segment_rollbacks_total", "counter",
		"Fetches that found the Redis counter at or below IDs already issued (Redis lost data) and raised it, by tag.", rollbacks...)
	family(&b, "coordkit_idserver_segment_step", "gauge", "Size of the next segment to reserve, by tag.", step...)
	family(&b, "coordkit_idserver_segment_high", "gauge", "Last ID of the last segment reserved, by tag.", high...)
	family(&b, "coordkit_idserver_segment_last_id", "gauge", "Last segment ID served, by tag.", last...)

	// Deprecated: the coordctl_* names of earlier versions.
	var refills int64
	for _, t := range tags {
		refills += t.seg.Stats().Fetches
	}
	family(&b, "coordctl_ids_issued_total", "counter", "Deprecated: use coordkit_idserver_ids_issued_total.",
		sample{`kind="segment"`, float64(m.issuedSegment.Load())},
		sample{`kind="snowflake"`, float64(m.issuedSnowflake.Load())})
	family(&b, "coordctl_errors_total", "counter", "Deprecated: use coordkit_idserver_errors_total.",
		sample{`reason="bad_request"`, float64(m.errors[reasonBadRequest].Load() + m.errors[reasonUnknownTag].Load())},
		sample{`reason="unavailable"`, float64(m.errors[reasonUnavailable].Load() + m.errors[reasonLeaseLost].Load() + m.errors[reasonClock].Load())})
	family(&b, "coordctl_segment_refills_total", "counter", "Deprecated: use coordkit_idserver_segment_fetches_total.", sample{"", float64(refills)})
	family(&b, "coordctl_lease_held", "gauge", "Deprecated: use coordkit_idserver_worker_lease_held.", sample{"", held})
	family(&b, "coordctl_worker_id", "gauge", "Deprecated: use the worker label of coordkit_idserver_worker_info.", sample{"", float64(wk.lease.ID())})

	family(&b, "go_goroutines", "gauge", "Number of goroutines that currently exist.",
		sample{"", float64(runtime.NumGoroutine())})
	rm := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(rm)
	family(&b, "go_memstats_heap_alloc_bytes", "gauge", "Bytes of allocated heap objects.",
		sample{"", float64(rm[0].Value.Uint64())})
	family(&b, "go_gc_cycles_total", "counter", "Completed GC cycles.", sample{"", float64(rm[1].Value.Uint64())})
	family(&b, "process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch in seconds.",
		sample{"", float64(processStart.UnixNano()) / 1e9})
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		family(&b, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
			sample{"", cpu.Seconds()})
	}
	family(&b, "process_pid", "gauge", "The process's PID.", sample{"", float64(os.Getpid())})
	io.WriteString(w, b.String())
}

// writeHistograms writes coordkit_idserver_request_duration_seconds, one
// histogram per endpoint.
func (s *server) writeHistograms(w io.Writer) {
	const name = "coordkit_idserver_request_duration_seconds"
	fmt.Fprintf(w, "# HELP %s Time to answer a request, by endpoint.\n# TYPE %s histogram\n", name, name)
	for _, ep := range endpointNames {
		e := s.m.endpoints[ep]
		var cum int64
		for i := range e.counts {
			cum += e.counts[i].Load()
			le := "+Inf"
			if i < len(buckets) {
				le = strconv.FormatFloat(buckets[i], 'g', -1, 64)
			}
			fmt.Fprintf(w, "%s_bucket{endpoint=%q,le=%q} %d\n", name, ep, le, cum)
		}
		fmt.Fprintf(w, "%s_sum{endpoint=%q} %s\n", name, ep, formatFloat(float64(e.sumNs.Load())/1e9))
		fmt.Fprintf(w, "%s_count{endpoint=%q} %d\n", name, ep, cum)
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

// quote is a label value in the exposition format: a double-quoted string
// with \, " and newline escaped.
func quote(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v) + `"`
}

// sample is one line of a metric family: its labels ("" for none, else
// `name="value"` pairs) and its value.
type sample struct {
	labels string
	value  float64
}

// family writes one metric family in the text exposition format. A family
// with no samples gets its HELP and TYPE only.
func family(w io.Writer, name, kind, help string, samples ...sample) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
	for _, s := range samples {
		if s.labels == "" {
			fmt.Fprintf(w, "%s %s\n", name, formatFloat(s.value))
		} else {
			fmt.Fprintf(w, "%s{%s} %s\n", name, s.labels, formatFloat(s.value))
		}
	}
}

// formatFloat writes v as Prometheus reads it: integers without exponent.
func formatFloat(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
