package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"syscall"
	"time"
)

// serveMetrics are the ID service's counters. /metrics writes them in
// Prometheus's text exposition format (version 0.0.4) by hand: coordctl
// lives in coordkit's module, and users who import only the library
// packages must not find a Prometheus client in their module graph (the
// adapter for the library's hooks is the module contrib/coordprom).
type serveMetrics struct {
	issuedSegment, issuedSnowflake atomic.Int64
	badRequest, unavailable        atomic.Int64
}

// processStart is when this process started serving, for
// process_start_time_seconds.
var processStart = time.Now()

// writeMetrics writes the service's metrics, then the Go runtime's and the
// process's usual few.
func (s *server) writeMetrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m := &s.m
	family(w, "coordctl_ids_issued_total", "counter", "IDs issued, by kind (segment, snowflake).",
		sample{`kind="segment"`, float64(m.issuedSegment.Load())},
		sample{`kind="snowflake"`, float64(m.issuedSnowflake.Load())})
	family(w, "coordctl_errors_total", "counter", "Requests that failed, by reason (bad_request, unavailable).",
		sample{`reason="bad_request"`, float64(m.badRequest.Load())},
		sample{`reason="unavailable"`, float64(m.unavailable.Load())})
	family(w, "coordctl_segment_refills_total", "counter", "Segments reserved in Redis, all tags.",
		sample{"", s.fetches()})
	held := 1.0
	if s.lease.Err() != nil {
		held = 0
	}
	family(w, "coordctl_lease_held", "gauge", "1 while the Snowflake worker lease is held, 0 once lost.", sample{"", held})
	family(w, "coordctl_worker_id", "gauge", "The leased Snowflake worker ID.", sample{"", float64(s.lease.ID())})

	family(w, "go_goroutines", "gauge", "Number of goroutines that currently exist.",
		sample{"", float64(runtime.NumGoroutine())})
	rm := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(rm)
	family(w, "go_memstats_heap_alloc_bytes", "gauge", "Bytes of allocated heap objects.",
		sample{"", float64(rm[0].Value.Uint64())})
	family(w, "go_gc_cycles_total", "counter", "Completed GC cycles.", sample{"", float64(rm[1].Value.Uint64())})
	family(w, "process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch in seconds.",
		sample{"", float64(processStart.UnixNano()) / 1e9})
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		family(w, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
			sample{"", cpu.Seconds()})
	}
	family(w, "process_pid", "gauge", "The process's PID.", sample{"", float64(os.Getpid())})
}

// sample is one line of a metric family: its labels ("" for none, else
// `name="value"` pairs) and its value.
type sample struct {
	labels string
	value  float64
}

// family writes one metric family in the text exposition format.
func family(w io.Writer, name, kind, help string, samples ...sample) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
	for _, s := range samples {
		if s.labels == "" {
			fmt.Fprintf(w, "%s %v\n", name, s.value)
		} else {
			fmt.Fprintf(w, "%s{%s} %v\n", name, s.labels, s.value)
		}
	}
}
