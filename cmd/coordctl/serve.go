package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordkit/coordkit/etcd/etcdlock"
	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/redisid"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/lock"
)

func init() {
	register(command{name: "serve", summary: "serve IDs over HTTP (Redis segments, a leased Snowflake worker), with an operator page", run: serve})
}

// maxBatch bounds n of /ids/{tag}?n= and /snowflake?n=.
const maxBatch = 10000

// validTag reports whether tag is 1 to 64 of A-Z a-z 0-9 _ . : - (it
// becomes part of a Redis key).
func validTag(tag string) bool {
	if len(tag) == 0 || len(tag) > 64 {
		return false
	}
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

const serveAbout = `Serves IDs over HTTP:

  GET /id/{tag}             one ID of a registered tag (Redis segments), as text
  GET /ids/{tag}?n=100      n IDs of the tag (1 to 10000), one per line
  GET /snowflake?n=1        n Snowflake IDs (1 to 10000) of the leased worker ID
  GET /livez                200 while the process answers HTTP
  GET /readyz               200 when Redis answers and the worker lease is held,
                            else 503 saying which is not (/healthz: the same)
  GET /metrics              Prometheus metrics (coordkit_idserver_*, the library's
                            coordkit_ids_* through contrib/coordprom, go_*, process_*)
  GET /                     the operator page: charts of the last minutes, tags,
                            the worker lease, locks, an ID decoder; refreshed
                            every 2 s (/?part=charts: the charts alone)
  GET /api/status           what the page shows, as JSON
  GET /api/decode?id=&layout=   an ID's parts, as JSON

Any other route answers 404 with the routes that exist (405 for another
method than GET on a route above).

Only registered tags are served: those of --tags, or else the members of the
Redis set --tags-key, which "coordctl tags add|list|remove" edit (as Leaf's
leaf_alloc table registers biz tags). An unknown tag answers 404 and creates
nothing, in Redis or in memory.

With "Accept: application/json" IDs are JSON strings ({"id":"..."} or
{"ids":["..."]}: IDs above 2^53 lose precision as JSON numbers) and errors
are {"error":"...","status":N}. A bad tag or n answers 400. With Redis
unreachable, /id and /ids serve what is left in memory, then answer 503.

When the worker lease is lost (its Redis key gone, renewals failing for its
TTL, the ZooKeeper session expired), the loss is logged and /snowflake
answers 503 until a new worker ID is leased; its generator starts above
every ID the old one issued. Segment IDs are served all along. With
--exit-on-lease-loss the process exits with status 1 instead.
SIGTERM or SIGINT shut it down gracefully and give the worker ID back.`

func serve(e *env, args []string) error {
	fs := newFlags(e, "serve", "", serveAbout)
	var c conn
	c.addRedis(fs, e)
	c.addZK(fs, e)
	listen := fs.String("listen", envOr(e, "COORDKIT_LISTEN", "127.0.0.1:8080"), "address to listen on (env COORDKIT_LISTEN)")
	service := fs.String("service", "coordctl", "service name the Snowflake worker ID is leased for")
	backend := fs.String("lease-backend", "redis", "where the worker ID is leased: redis or zk")
	layoutName := fs.String("layout", "twitter", "Snowflake layout: "+layoutNames())
	step := fs.Int64("segment-step", 1000, "first segment size per tag; it adapts to the draw rate")
	tags := fs.String("tags", e.getenv("COORDKIT_TAGS"), "the tags served, comma-separated (env COORDKIT_TAGS); empty: the members of --tags-key")
	tagsKey := fs.String("tags-key", defaultTagsKey, "the Redis set of registered tags, read when --tags is empty")
	exitOnLoss := fs.Bool("exit-on-lease-loss", false, "exit with status 1 when the worker lease is lost, instead of leasing a new worker ID")
	leaseTTL := fs.Duration("lease-ttl", 10*time.Second, "the Redis worker lease's TTL (--lease-backend redis)")
	lockPrefix := fs.String("lock-prefix", lock.DefaultPrefix, "the page lists the locks under this prefix")
	pageLocks := fs.Int("page-locks", 100, "the most locks the page lists")
	fs.StringVar(&c.etcd, "etcd", e.getenv("COORDKIT_ETCD"), "etcd endpoints, comma-separated (env COORDKIT_ETCD): the page also lists the etcdlock locks under --etcd-prefix; empty: none")
	etcdPrefix := fs.String("etcd-prefix", etcdlock.DefaultPrefix, "the page lists the etcd locks under this prefix (etcdlock.WithPrefix)")
	chartEvery := fs.Duration("chart-interval", defaultChart, "how often the page's charts sample the tags, the locks (a SCAN of --lock-prefix) and the lease; 0: no charts")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	layout, ok := layoutByName(*layoutName)
	if !ok {
		return usagef("unknown --layout %q: want one of %s", *layoutName, layoutNames())
	}
	if *chartEvery < 0 {
		return usagef("--chart-interval %v must not be negative", *chartEvery)
	} else if *chartEvery == 0 {
		*chartEvery = -1 // no charts
	}
	if *step < 1 {
		return usagef("--segment-step %d must be positive", *step)
	}
	if host, port, err := net.SplitHostPort(*listen); err != nil || checkAddr(net.JoinHostPort(host, "1"), true) != nil {
		return usagef("--listen %q: want host:port, such as 127.0.0.1:8080 (port 0: any free port)", *listen)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return usagef("--listen %q: port %q is not a number from 0 to 65535", *listen, port)
	}
	var tagList []string
	if *tags != "" {
		tagList = splitList(*tags)
		for _, t := range tagList {
			if !validTag(t) {
				return usagef("--tags: %q is not 1 to 64 of A-Z a-z 0-9 _ . : -", t)
			}
		}
	} else if *tagsKey == "" {
		return usagef("give --tags, or a --tags-key to read them from")
	}
	if *backend != "redis" && *backend != "zk" {
		return usagef("unknown --lease-backend %q: want redis or zk", *backend)
	}
	if *backend == "zk" {
		if _, err := c.zkServers(); err != nil {
			return err
		}
	}

	var etcdCli *clientv3.Client
	if c.etcd != "" {
		if *etcdPrefix == "" || strings.HasSuffix(*etcdPrefix, "/") {
			return usagef("--etcd-prefix %q: empty, or ending with '/'", *etcdPrefix)
		}
		cli, err := c.etcdClient()
		if err != nil {
			return err
		}
		defer cli.Close()
		etcdCli = cli
	}

	ctx := e.ctx
	rdb, err := c.redisClient(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	log := slog.New(slog.NewTextHandler(e.errOut, nil))
	s, err := newServer(ctx, serverConfig{
		rdb: rdb, conn: &c, etcd: etcdCli, etcdPrefix: *etcdPrefix, service: *service, backend: *backend, layout: layout, step: *step,
		tags: tagList, tagsKey: *tagsKey, exitOnLeaseLoss: *exitOnLoss, leaseTTL: *leaseTTL,
		lockPrefix: *lockPrefix, pageLocks: *pageLocks, chartEvery: *chartEvery, logger: log,
	})
	if err != nil {
		return err
	}
	defer s.close()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(e.out, "serving IDs on http://%s (worker %d of %s)\n", ln.Addr(), s.worker.Load().lease.ID(), *service)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }() // owned here: Shutdown ends it and we wait on errc
	var fatal error
	select {
	case err := <-errc:
		return err
	case fatal = <-s.fatal:
		log.Error("shutting down", "err", fatal)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-errc
	fmt.Fprintln(e.out, "shut down")
	return errors.Join(fatal, err)
}

type serverConfig struct {
	rdb     redis.UniversalClient
	conn    *conn
	zc      *zk.Conn // the ZooKeeper connection of the zk lease backend; nil: dial conn.zk
	service string
	backend string
	layout  idgen.Layout
	step    int64

	tags    []string // the tags served; nil: the members of the set tagsKey
	tagsKey string

	exitOnLeaseLoss bool
	leaseTTL        time.Duration // Redis lease TTL; 0: workerid's default
	releaseRetry    time.Duration // pause between attempts to lease a new worker ID; 0: 1 s

	// etcd, if set, is the cluster whose etcdlock locks under etcdPrefix
	// the page also lists.
	etcd       *clientv3.Client
	etcdPrefix string

	lockPrefix string        // the page's locks; "": lock.DefaultPrefix
	pageLocks  int           // 0: 100
	chartEvery time.Duration // the charts' sampling interval; 0: 2 s, negative: no charts

	logger *slog.Logger // nil: discard
	now    func() time.Time
}

// server is the HTTP ID service.
type server struct {
	cfg     serverConfig
	rdb     redis.UniversalClient
	segs    *redisid.Segments
	lease   func(context.Context, string) (*workerid.Lease, error) // the leaser's Lease
	log     *slog.Logger
	m       *serveMetrics
	started time.Time
	locks   *lock.Client // the page's Inspect

	// tags maps each registered tag in use to its state: copy-on-write,
	// read without a lock on the hot path; replaced under tagMu.
	tags     atomic.Pointer[map[string]*tagState]
	tagMu    sync.Mutex      // protects the replacement of tags, registry and loaded
	registry map[string]bool // the last read of the tag set (registry mode)
	loaded   time.Time       // when registry was read

	worker  atomic.Pointer[worker] // the current worker lease; never nil after newServer
	leasing atomic.Bool            // the lease is lost and a new one is being taken

	fatal   chan error // buffered 1: the lease was lost with --exit-on-lease-loss
	stop    context.CancelFunc
	wg      sync.WaitGroup // the lease keeper and the tag refresher
	closers []func()

	logMu   sync.Mutex // protects lastLog
	lastLog map[string]time.Time

	rateMu sync.Mutex // protects rates
	rates  map[string]rateSample

	hist history // the charts' samples
}

// tagState is one registered tag being served.
type tagState struct {
	name   string
	seg    *redisid.Segment
	issued atomic.Int64 // IDs served
	last   atomic.Int64 // the last ID of the last response (the segment's current position)
}

// worker is one leased worker ID and its Snowflake.
type worker struct {
	lease *workerid.Lease
	sf    *idgen.Snowflake
	since time.Time
}

func newServer(ctx context.Context, cfg serverConfig) (*server, error) {
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.etcdPrefix == "" {
		cfg.etcdPrefix = etcdlock.DefaultPrefix
	}
	if cfg.lockPrefix == "" {
		cfg.lockPrefix = lock.DefaultPrefix
	}
	if cfg.pageLocks <= 0 {
		cfg.pageLocks = 100
	}
	if cfg.releaseRetry <= 0 {
		cfg.releaseRetry = time.Second
	}
	s := &server{cfg: cfg, rdb: cfg.rdb, log: cfg.logger, started: cfg.now(), fatal: make(chan error, 1),
		lastLog: map[string]time.Time{}, rates: map[string]rateSample{}}
	empty := map[string]*tagState{}
	s.tags.Store(&empty)
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()
	var err error
	if s.m, err = newServeMetrics(s); err != nil {
		return nil, err
	}
	// A request waits for a segment at most fetchTimeout: the fetch fails
	// then, and so does the request (no timer per request).
	if s.segs, err = redisid.NewSegments(cfg.rdb, redisid.WithStep(cfg.step),
		redisid.WithStepBounds(cfg.step, max(cfg.step, 1_000_000)), redisid.WithFetchTimeout(fetchTimeout),
		redisid.WithMetrics(s.m.ids), redisid.WithLogger(s.log)); err != nil {
		return nil, usagef("%v", err)
	}
	s.closers = append(s.closers, func() { s.segs.Close() })
	s.locks = lock.New(cfg.rdb, lock.WithPrefix(cfg.lockPrefix))
	s.closers = append(s.closers, func() { s.locks.Close() })
	if err := s.locks.Err(); err != nil {
		return nil, usagef("--lock-prefix: %v", err)
	}
	if cfg.tags != nil {
		m := map[string]*tagState{}
		for _, t := range cfg.tags {
			g, err := s.segs.For(t)
			if err != nil {
				return nil, usagef("tag %q: %v", t, err)
			}
			m[t] = &tagState{name: t, seg: g}
		}
		s.tags.Store(&m)
	}

	var leaser workerid.Leaser
	maxID := int64(1)<<cfg.layout.WorkerBits - 1
	opts := []workerid.Option{workerid.WithMax(maxID), workerid.WithLogger(s.log), workerid.WithMetrics(s.m.ids)}
	switch cfg.backend {
	case "redis":
		if cfg.leaseTTL > 0 {
			opts = append(opts, workerid.WithTTL(cfg.leaseTTL), workerid.WithCheckpoint(max(cfg.leaseTTL/3, 100*time.Millisecond)))
		}
		if leaser, err = workerid.NewRedis(cfg.rdb, opts...); err != nil {
			return nil, usagef("%v", err)
		}
	case "zk":
		zc := cfg.zc
		if zc == nil {
			if zc, err = cfg.conn.zkConn(ctx); err != nil {
				return nil, err
			}
			s.closers = append(s.closers, zc.Close)
		}
		if leaser, err = workerid.NewZK(zc, append(opts, workerid.WithSessionTimeout(max(cfg.conn.timeout, 4*time.Second)))...); err != nil {
			return nil, usagef("%v", err)
		}
	default:
		return nil, usagef("unknown --lease-backend %q: want redis or zk", cfg.backend)
	}
	s.closers = append(s.closers, func() { leaser.Close() })
	s.lease = leaser.Lease
	w, err := s.leaseWorker(ctx, time.Time{})
	if err != nil {
		return nil, err
	}
	s.worker.Store(w)
	// Closed in reverse: the keeper stops before the lease it watches is
	// given back.
	s.closers = append(s.closers, func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.worker.Load().lease.Release(rctx)
	})
	bg, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.wg.Add(1)
	go s.keepWorker(bg) // owned by s: close cancels bg and waits
	if cfg.tags == nil {
		s.wg.Add(1)
		go s.refreshTags(bg) // owned by s, as above
	}
	if cfg.chartEvery >= 0 {
		s.wg.Add(1)
		go s.sampleCharts(bg, cmp.Or(cfg.chartEvery, defaultChart)) // owned by s, as above
	}
	s.closers = append(s.closers, func() { stop(); s.wg.Wait() })
	s.log.Info("worker ID leased", "service", cfg.service, "worker", w.lease.ID(), "layout", cfg.layout.Name, "backend", cfg.backend)
	ok = true
	return s, nil
}

// fetchTimeout bounds a segment fetch, and so a request's wait for Redis.
const fetchTimeout = 2 * time.Second

func (s *server) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// logLimited logs at most once per 5 s per key: a failing Redis under load
// would otherwise write a line per request.
func (s *server) logLimited(key, msg string, args ...any) {
	now := time.Now()
	s.logMu.Lock()
	if now.Sub(s.lastLog[key]) < 5*time.Second {
		s.logMu.Unlock()
		return
	}
	s.lastLog[key] = now
	s.logMu.Unlock()
	s.log.Warn(msg, args...)
}

// --- tags ---

// lookupTag returns the state of a registered tag, or nil and the status and
// message to answer: 400 for a malformed tag, 404 for an unknown one, 503 if
// the registry cannot be read. Nothing is created for an unknown tag.
func (s *server) lookupTag(ctx context.Context, name string) (*tagState, int, string) {
	if t := (*s.tags.Load())[name]; t != nil {
		return t, 0, ""
	}
	if !validTag(name) {
		return nil, http.StatusBadRequest, "tag must be 1 to 64 of A-Z a-z 0-9 _ . : -"
	}
	if s.cfg.tags != nil {
		return nil, http.StatusNotFound, fmt.Sprintf("unknown tag %q: the tags served are %s", name, strings.Join(s.cfg.tags, ", "))
	}
	// A tag added since the last read: read the registry again, at most
	// once per registryMiss, so that unknown tags cannot flood Redis.
	t, err := s.registered(ctx, name)
	if err != nil {
		s.logLimited("registry", "reading the tag registry failed", "key", s.cfg.tagsKey, "err", err)
		return nil, http.StatusServiceUnavailable, "the tag registry is unavailable"
	}
	if t == nil {
		return nil, http.StatusNotFound, fmt.Sprintf("unknown tag %q: register it with coordctl tags add %s", name, name)
	}
	return t, 0, ""
}

// registryMiss is how often a request for an unknown tag may read the
// registry again; registryEvery how often it is read in the background.
const (
	registryMiss  = time.Second
	registryEvery = 5 * time.Second
)

// registered returns the state of name if the registry lists it, reading
// the registry if the last read is older than registryMiss.
func (s *server) registered(ctx context.Context, name string) (*tagState, error) {
	s.tagMu.Lock()
	defer s.tagMu.Unlock()
	if t := (*s.tags.Load())[name]; t != nil {
		return t, nil
	}
	if time.Since(s.loaded) >= registryMiss {
		if err := s.loadRegistryLocked(ctx); err != nil {
			return nil, err
		}
	}
	if !s.registry[name] {
		return nil, nil
	}
	g, err := s.segs.For(name)
	if err != nil {
		return nil, err
	}
	t := &tagState{name: name, seg: g}
	old := *s.tags.Load()
	m := make(map[string]*tagState, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[name] = t
	s.tags.Store(&m)
	return t, nil
}

// loadRegistryLocked reads the tag set and stops serving the tags removed
// from it. s.tagMu is held.
func (s *server) loadRegistryLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	members, err := s.rdb.SMembers(ctx, s.cfg.tagsKey).Result()
	if err != nil {
		return err
	}
	reg := make(map[string]bool, len(members))
	for _, m := range members {
		reg[m] = true
	}
	s.registry, s.loaded = reg, time.Now()
	old := *s.tags.Load()
	for name := range old {
		if !reg[name] {
			m := make(map[string]*tagState, len(old))
			for k, v := range old {
				if reg[k] {
					m[k] = v
				}
			}
			s.tags.Store(&m)
			break
		}
	}
	return nil
}

// refreshTags reads the registry every registryEvery, so that a removed tag
// stops being served.
func (s *server) refreshTags(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(registryEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.tagMu.Lock()
			err := s.loadRegistryLocked(ctx)
			s.tagMu.Unlock()
			if err != nil && ctx.Err() == nil {
				s.logLimited("registry", "reading the tag registry failed", "key", s.cfg.tagsKey, "err", err)
			}
		}
	}
}

// --- the worker lease ---

// leaseWorker leases a worker ID and opens its Snowflake. A non-zero floor
// (the last generator's final mark) is stored as the new ID's high-water
// mark first, so that the new generator starts above every ID this process
// issued, whatever worker ID it gets and whatever Redis lost.
func (s *server) leaseWorker(ctx context.Context, floor time.Time) (*worker, error) {
	l, err := s.lease(ctx, s.cfg.service)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*worker, error) {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		l.Release(rctx)
		return nil, err
	}
	if !floor.IsZero() {
		if err := l.HighWater().Store(ctx, floor); err != nil {
			return fail(fmt.Errorf("store the high-water mark of worker %d: %w", l.ID(), err))
		}
	}
	sf, err := l.NewSnowflake(ctx, s.cfg.layout, idgen.WithMetrics(s.m.ids), idgen.WithLogger(s.log))
	if err != nil {
		return fail(err)
	}
	return &worker{lease: l, sf: sf, since: s.cfg.now()}, nil
}

// keepWorker waits for the lease's loss; then it logs it and either exits
// (--exit-on-lease-loss) or leases a new worker ID, retrying until it gets
// one or ctx ends.
func (s *server) keepWorker(ctx context.Context) {
	defer s.wg.Done()
	for {
		w := s.worker.Load()
		select {
		case <-ctx.Done():
			return
		case <-w.lease.Lost():
		}
		s.leasing.Store(true)
		s.m.leaseLosses.Add(1)
		s.log.Error("worker lease lost: /snowflake refuses until a new worker ID is leased",
			"service", s.cfg.service, "worker", w.lease.ID(), "cause", w.lease.Err())
		if s.cfg.exitOnLeaseLoss {
			s.fatal <- fmt.Errorf("worker lease %d of %s lost (--exit-on-lease-loss)", w.lease.ID(), s.cfg.service)
			return
		}
		floor := w.sf.Retire(idgen.ErrLeaseLost) // its final mark: it has stopped already
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		w.lease.Release(rctx) // stores the mark if it can, stops the lease's checkpoints
		cancel()
		timer := time.NewTimer(0)
		for attempt := 1; ; attempt++ {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			nw, err := s.leaseWorker(lctx, floor)
			cancel()
			if err == nil {
				s.worker.Store(nw)
				s.leasing.Store(false)
				s.log.Info("new worker ID leased: serving Snowflake IDs again",
					"service", s.cfg.service, "worker", nw.lease.ID(), "previous", w.lease.ID(), "attempts", attempt)
				break
			}
			if ctx.Err() != nil {
				return
			}
			s.logLimited("lease", "leasing a new worker ID failed: retrying", "service", s.cfg.service, "err", err)
			timer.Reset(min(time.Duration(attempt)*s.cfg.releaseRetry, 5*s.cfg.releaseRetry))
		}
	}
}

// --- HTTP ---

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	h := func(pattern string, ep prometheus.Observer, f http.HandlerFunc) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			f(w, r)
			ep.Observe(time.Since(start).Seconds())
		})
	}
	m := s.m
	h("GET /id/{tag}", m.ep("id"), func(w http.ResponseWriter, r *http.Request) { s.ids(w, r, 1, false) })
	h("GET /ids/{tag}", m.ep("ids"), func(w http.ResponseWriter, r *http.Request) {
		n, ok := s.batchSize(w, r, false)
		if ok {
			s.ids(w, r, n, true)
		}
	})
	h("GET /snowflake", m.ep("snowflake"), s.snowflake)
	h("GET /livez", m.ep("livez"), s.livez)
	h("GET /readyz", m.ep("readyz"), s.readyz)
	h("GET /healthz", m.ep("readyz"), s.readyz)
	h("GET /metrics", m.ep("metrics"), m.handler().ServeHTTP)
	h("GET /{$}", m.ep("page"), s.page)
	h("GET /api/status", m.ep("status"), s.apiStatus)
	h("GET /api/decode", m.ep("decode"), s.apiDecode)
	h("/", m.ep("unknown"), func(w http.ResponseWriter, r *http.Request) { s.noRoute(w, r, mux) })
	return mux
}

// routes are the routes served, as the answer to an unknown one lists them.
var routes = []string{"GET /id/{tag}", "GET /ids/{tag}?n=100", "GET /snowflake?n=1", "GET /livez", "GET /readyz", "GET /healthz",
	"GET /metrics", "GET /", "GET /api/status", "GET /api/decode?id=&layout="}

// noRoute answers a request no route matched: 404 naming the routes that
// start as its path does, then all of them; 405 for a route served under
// GET only.
func (s *server) noRoute(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		get := r.Clone(r.Context())
		get.Method = http.MethodGet
		if _, pattern := mux.Handler(get); pattern != "/" {
			w.Header().Set("Allow", "GET, HEAD")
			s.fail(w, r, http.StatusMethodNotAllowed, reasonNotFound, fmt.Sprintf("%s %s: only GET is served", r.Method, r.URL.Path))
			return
		}
	}
	first := func(p string) string {
		p = strings.TrimPrefix(p, "/")
		p, _, _ = strings.Cut(p, "?")
		p, _, _ = strings.Cut(p, "/")
		return p
	}
	var near []string
	if f := first(r.URL.Path); f != "" {
		for _, rt := range routes {
			if _, path, _ := strings.Cut(rt, " "); first(path) == f {
				near = append(near, rt)
			}
		}
	}
	msg := fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)
	if len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, " or ") + "?"
	} else {
		msg += "."
	}
	msg += " The routes are: " + strings.Join(routes, ", ") + "."
	s.fail(w, r, http.StatusNotFound, reasonNotFound, msg)
}

// batchSize reads n: 1 to maxBatch, or 1 when absent and optional.
func (s *server) batchSize(w http.ResponseWriter, r *http.Request, optional bool) (int, bool) {
	q := r.URL.Query().Get("n")
	if q == "" && optional {
		return 1, true
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > maxBatch {
		s.fail(w, r, http.StatusBadRequest, reasonBadRequest, fmt.Sprintf("n must be an integer from 1 to %d", maxBatch))
		return 0, false
	}
	return n, true
}

// bufs holds response buffers: a batch of 100 IDs is about 2 KB.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// idBufs holds the IDs of one request before they are written.
var idBufs = sync.Pool{New: func() any { b := make([]int64, 0, 128); return &b }}

var (
	textPlain = []string{"text/plain; charset=utf-8"}
	appJSON   = []string{"application/json"}
	nosniff   = []string{"nosniff"}
)

func (s *server) ids(w http.ResponseWriter, r *http.Request, n int, batch bool) {
	t, code, msg := s.lookupTag(r.Context(), r.PathValue("tag"))
	if t == nil {
		reason := reasonBadRequest
		switch code {
		case http.StatusNotFound:
			reason = reasonUnknownTag
		case http.StatusServiceUnavailable:
			reason = reasonUnavailable
		}
		s.fail(w, r, code, reason, msg)
		return
	}
	ctx := r.Context()
	js := wantsJSON(r)
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	ip := idBufs.Get().(*[]int64)
	defer idBufs.Put(ip)
	ids, err := t.seg.AppendNext(ctx, (*ip)[:0], n) // one atomic add per segment, not per ID
	*ip = ids
	if err != nil {
		s.logLimited("segment:"+t.name, "no segment ID: Redis unavailable", "tag", t.name, "err", err)
		s.fail(w, r, http.StatusServiceUnavailable, reasonUnavailable, "Redis unavailable: no ID left in memory for tag "+t.name)
		return
	}
	buf := openIDs((*bp)[:0], js, batch)
	for i, id := range ids {
		buf = appendID(buf, id, js, i)
	}
	t.issued.Add(int64(n))
	t.last.Store(ids[n-1])
	s.m.issuedSegment.Add(int64(n))
	*bp = closeIDs(buf, js, batch)
	writeBody(w, *bp, js)
}

// openIDs, appendID and closeIDs write IDs as text (one per line) or JSON
// ({"id":"..."} or {"ids":["...",...]}, as encoding/json would).
func openIDs(buf []byte, js, batch bool) []byte {
	switch {
	case !js:
		return buf
	case batch:
		return append(buf, `{"ids":[`...)
	default:
		return append(buf, `{"id":`...)
	}
}

func appendID(buf []byte, id int64, js bool, i int) []byte {
	if !js {
		return append(strconv.AppendInt(buf, id, 10), '\n')
	}
	if i > 0 {
		buf = append(buf, ',')
	}
	buf = append(buf, '"')
	return append(strconv.AppendInt(buf, id, 10), '"')
}

func closeIDs(buf []byte, js, batch bool) []byte {
	switch {
	case !js:
		return buf
	case batch:
		return append(buf, "]}\n"...)
	default:
		return append(buf, "}\n"...)
	}
}

func writeBody(w http.ResponseWriter, body []byte, js bool) {
	hdr := w.Header()
	if js {
		hdr["Content-Type"] = appJSON
	} else {
		hdr["Content-Type"] = textPlain
	}
	hdr["X-Content-Type-Options"] = nosniff
	w.Write(body)
}

func (s *server) snowflake(w http.ResponseWriter, r *http.Request) {
	n, ok := s.batchSize(w, r, true)
	if !ok {
		return
	}
	batch := r.URL.Query().Has("n")
	wk := s.worker.Load()
	ids := make([]int64, n)
	if _, err := wk.sf.NextN(ids); err != nil {
		var cb *idgen.ClockBackwardsError
		switch {
		case errors.Is(err, idgen.ErrLeaseLost):
			s.fail(w, r, http.StatusServiceUnavailable, reasonLeaseLost, "the worker lease is lost: a new worker ID is being leased")
		case errors.As(err, &cb):
			s.fail(w, r, http.StatusServiceUnavailable, reasonClock, "the clock is behind the last Snowflake ID issued: retry later")
		default:
			s.logLimited("snowflake", "no Snowflake ID", "err", err)
			s.fail(w, r, http.StatusServiceUnavailable, reasonUnavailable, "no Snowflake ID can be issued now")
		}
		return
	}
	s.m.issuedSnowflake.Add(int64(n))
	js := wantsJSON(r)
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	buf := openIDs((*bp)[:0], js, batch)
	for i, id := range ids {
		buf = appendID(buf, id, js, i)
	}
	*bp = closeIDs(buf, js, batch)
	writeBody(w, *bp, js)
}

func (s *server) livez(w http.ResponseWriter, r *http.Request) {
	writeBody(w, okBody, false)
}

var okBody = []byte("ok\n")

// readiness says whether every endpoint can serve now: Redis answers (the
// segments' refills, the tag registry, the Redis lease) and the worker lease
// is held. Its messages name no address.
func (s *server) readiness(ctx context.Context) (problems map[string]string) {
	problems = map[string]string{}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		s.logLimited("readyz", "readiness: Redis does not answer", "err", err)
		problems["redis"] = "unreachable"
	}
	if s.leasing.Load() || s.worker.Load().lease.Err() != nil {
		problems["worker_lease"] = "lost: a new worker ID is being leased"
	}
	return problems
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	problems := s.readiness(r.Context())
	if wantsJSON(r) {
		code := http.StatusOK
		if len(problems) > 0 {
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		writeJSON(w, struct {
			Ready    bool              `json:"ready"`
			Problems map[string]string `json:"problems"`
		}{len(problems) == 0, problems})
		return
	}
	if len(problems) > 0 {
		var lines []string
		for _, k := range []string{"redis", "worker_lease"} {
			if p, ok := problems[k]; ok {
				lines = append(lines, strings.ReplaceAll(k, "_", " ")+": "+p)
			}
		}
		http.Error(w, strings.Join(lines, "\n"), http.StatusServiceUnavailable)
		return
	}
	writeBody(w, okBody, false)
}

// fail answers an error: JSON when the client asks for it, text otherwise.
// msg must name no internal address: the details go to the log.
func (s *server) fail(w http.ResponseWriter, r *http.Request, code int, reason int, msg string) {
	s.m.errors[reason].Inc()
	if wantsJSON(r) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(code)
		writeJSON(w, struct {
			Error  string `json:"error"`
			Status int    `json:"status"`
		}{msg, code})
		return
	}
	http.Error(w, msg, code)
}

func wantsJSON(r *http.Request) bool {
	a := r.Header["Accept"]
	return len(a) > 0 && strings.Contains(a[0], "application/json")
}
