package coordprom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordkit/coordkit/idgen"
)

var _ idgen.Metrics = (*IDMetrics)(nil)

// IDMetrics implements idgen.Metrics: it records the hooks of ID generators
// and worker leasers in Prometheus metrics (see the package documentation
// for their names and labels). Pass it to idgen.WithMetrics,
// redisid.WithMetrics or workerid.WithMetrics; one IDMetrics serves any
// number of generators. Create it with NewIDMetrics (the zero value is not
// usable); its methods are safe
// for concurrent use and do not allocate once a series exists: Issued, on
// the hot path of every ID, is a map read and an atomic add.
type IDMetrics struct {
	idgen.NopMetrics

	issued     *series[prometheus.Counter] // {tag}
	backwards  prometheus.Counter
	behind     prometheus.Observer
	fetches    *series[prometheus.Counter]  // {tag, result}
	fetchTime  *series[prometheus.Observer] // {tag}
	reserved   *series[prometheus.Counter]  // {tag}
	waits      *series[prometheus.Counter]  // {tag}
	waitTime   *series[prometheus.Observer] // {tag}
	leasesLost *series[prometheus.Counter]  // {service}
}

// NewIDMetrics creates the ID metrics and registers them on reg. It returns
// an error wrapping ErrInvalid for a nil reg or invalid buckets, and the
// error of reg.Register otherwise (a prometheus.AlreadyRegisteredError when
// reg already has them); then nothing stays registered. To register two
// (which one process rarely needs: tags tell generators apart), give each a
// constant label of its own with prometheus.WrapRegistererWith.
func NewIDMetrics(reg prometheus.Registerer, opts ...Option) (*IDMetrics, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	issued := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coordkit_ids_issued_total",
		Help: "IDs handed out, by tag (\"\" for a Snowflake).",
	}, []string{"tag"})
	backwards := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "coordkit_ids_clock_backwards_total",
		Help: "ID requests refused because the clock was behind the last ID by more than the tolerance.",
	})
	behind := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "coordkit_ids_clock_backwards_seconds",
		Help:    "How far behind the last ID the clock was when a request was refused.",
		Buckets: behindBuckets,
	})
	fetches := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coordkit_ids_segment_fetches_total",
		Help: "Segments fetched from the store, by tag and result (ok, error).",
	}, []string{"tag", "result"})
	fetchTime := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "coordkit_ids_segment_fetch_seconds",
		Help:    "Round trip of a segment fetch, failed ones included, by tag.",
		Buckets: fetchBuckets,
	}, []string{"tag"})
	reserved := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coordkit_ids_segment_reserved_total",
		Help: "IDs reserved by the segments fetched, by tag (reserved minus issued: IDs in memory or skipped by a restart).",
	}, []string{"tag"})
	waits := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coordkit_ids_segment_waits_total",
		Help: "Calls that waited for a segment to arrive, by tag.",
	}, []string{"tag"})
	waitTime := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "coordkit_ids_segment_wait_seconds",
		Help:    "How long calls waited for a segment to arrive, by tag.",
		Buckets: o.waitBuckets,
	}, []string{"tag"})
	leasesLost := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coordkit_worker_leases_lost_total",
		Help: "Worker-ID leases lost (not released), by service: their generators stopped.",
	}, []string{"service"})
	if err := register(reg, issued, backwards, behind, fetches, fetchTime, reserved, waits, waitTime, leasesLost); err != nil {
		return nil, err
	}
	return &IDMetrics{
		issued:     counters(issued, false),
		backwards:  backwards,
		behind:     behind,
		fetches:    counters(fetches, true),
		fetchTime:  observers(fetchTime, false),
		reserved:   counters(reserved, false),
		waits:      counters(waits, false),
		waitTime:   observers(waitTime, false),
		leasesLost: counters(leasesLost, false),
	}, nil
}

// Issued adds n to coordkit_ids_issued_total{tag}.
func (m *IDMetrics) Issued(tag string, n int) {
	if n > 0 {
		m.issued.with(labels{tag, ""}).Add(float64(n))
	}
}

// ClockBackwards counts coordkit_ids_clock_backwards_total and observes
// behind in coordkit_ids_clock_backwards_seconds.
func (m *IDMetrics) ClockBackwards(behind time.Duration, _ error) {
	m.backwards.Inc()
	m.behind.Observe(behind.Seconds())
}

// SegmentFetched counts coordkit_ids_segment_fetches_total{tag, result},
// observes took in coordkit_ids_segment_fetch_seconds{tag} and, for a
// segment reserved, adds its size to coordkit_ids_segment_reserved_total{tag}.
func (m *IDMetrics) SegmentFetched(tag string, size int64, took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	} else if size > 0 {
		m.reserved.with(labels{tag, ""}).Add(float64(size))
	}
	m.fetches.with(labels{tag, result}).Inc()
	m.fetchTime.with(labels{tag, ""}).Observe(took.Seconds())
}

// SegmentWaited counts coordkit_ids_segment_waits_total{tag} and observes
// wait in coordkit_ids_segment_wait_seconds{tag}.
func (m *IDMetrics) SegmentWaited(tag string, wait time.Duration) {
	m.waits.with(labels{tag, ""}).Inc()
	m.waitTime.with(labels{tag, ""}).Observe(wait.Seconds())
}

// LeaseLost counts coordkit_worker_leases_lost_total{service}.
func (m *IDMetrics) LeaseLost(service string, _ int64, _ error) {
	m.leasesLost.with(labels{service, ""}).Inc()
}
