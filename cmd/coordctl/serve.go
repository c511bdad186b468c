package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/redisid"
	"github.com/coordkit/coordkit/idgen/workerid"
)

func init() {
	register(command{name: "serve", summary: "serve IDs over HTTP (Redis segments, a leased Snowflake worker)", run: serve})
}

// maxBatch bounds n of /ids/{tag}?n=.
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

  GET /id/{tag}          one Redis-backed ID of tag (segment allocator), as text
  GET /ids/{tag}?n=100   n IDs of tag (1 to 10000), one per line
  GET /snowflake         one Snowflake ID from the leased worker ID
  GET /healthz           200 when Redis answers and the worker lease is held, else 503
  GET /metrics           Prometheus metrics

With "Accept: application/json" IDs are JSON strings: {"id":"..."} or
{"ids":["..."]} (IDs above 2^53 lose precision as JSON numbers). A bad tag or
n answers 400; Redis unreachable or the lease lost answers 503.
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
	if _, err := parse(fs, args); err != nil {
		return err
	}
	layout, ok := layoutByName(*layoutName)
	if !ok {
		return usagef("unknown --layout %q: want one of %s", *layoutName, layoutNames())
	}
	if *step < 1 {
		return usagef("--segment-step %d must be positive", *step)
	}

	ctx := e.ctx
	rdb, err := c.redisClient(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	s, err := newServer(ctx, serverConfig{
		rdb: rdb, conn: &c, service: *service, backend: *backend, layout: layout, step: *step,
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
	fmt.Fprintf(e.out, "serving IDs on http://%s (worker %d of %s)\n", ln.Addr(), s.lease.ID(), *service)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }() // owned here: Shutdown ends it and we wait on errc
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-errc
	fmt.Fprintln(e.out, "shut down")
	return err
}

type serverConfig struct {
	rdb     redis.UniversalClient
	conn    *conn
	service string
	backend string
	layout  idgen.Layout
	step    int64
}

// server is the HTTP ID service.
type server struct {
	rdb     redis.UniversalClient
	segs    *redisid.Segments
	lease   *workerid.Lease
	sf      *idgen.Snowflake
	closers []func()
	m       serveMetrics

	mu   sync.RWMutex // protects tags
	tags map[string]*redisid.Segment
}

func newServer(ctx context.Context, cfg serverConfig) (*server, error) {
	s := &server{rdb: cfg.rdb, tags: map[string]*redisid.Segment{}}
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()
	var err error
	if s.segs, err = redisid.NewSegments(cfg.rdb, redisid.WithStep(cfg.step),
		redisid.WithStepBounds(cfg.step, max(cfg.step, 1_000_000))); err != nil {
		return nil, usagef("%v", err)
	}
	s.closers = append(s.closers, func() { s.segs.Close() })

	var leaser workerid.Leaser
	width := cfg.layout.WorkerBits
	maxID := int64(1)<<width - 1
	switch cfg.backend {
	case "redis":
		if leaser, err = workerid.NewRedis(cfg.rdb, workerid.WithMax(maxID)); err != nil {
			return nil, err
		}
	case "zk":
		zc, err := cfg.conn.zkConn(ctx)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, zc.Close)
		if leaser, err = workerid.NewZK(zc, workerid.WithMax(maxID),
			workerid.WithSessionTimeout(max(cfg.conn.timeout, 4*time.Second))); err != nil {
			return nil, err
		}
	default:
		return nil, usagef("unknown --lease-backend %q: want redis or zk", cfg.backend)
	}
	s.closers = append(s.closers, func() { leaser.Close() })
	if s.lease, err = leaser.Lease(ctx, cfg.service); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.lease.Release(rctx)
	})
	if s.sf, err = s.lease.NewSnowflake(ctx, cfg.layout); err != nil {
		return nil, err
	}

	ok = true
	return s, nil
}

func (s *server) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

func (s *server) fetches() float64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var n int64
	for _, g := range s.tags {
		n += g.Stats().Fetches
	}
	return float64(n)
}

func (s *server) segment(tag string) (*redisid.Segment, error) {
	s.mu.RLock()
	g, ok := s.tags[tag]
	s.mu.RUnlock()
	if ok {
		return g, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.tags[tag]; ok {
		return g, nil
	}
	g, err := s.segs.For(tag)
	if err != nil {
		return nil, err
	}
	s.tags[tag] = g
	return g, nil
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /id/{tag}", func(w http.ResponseWriter, r *http.Request) { s.ids(w, r, 1, false) })
	mux.HandleFunc("GET /ids/{tag}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 1 || n > maxBatch {
			s.fail(w, http.StatusBadRequest, fmt.Sprintf("n must be an integer from 1 to %d", maxBatch))
			return
		}
		s.ids(w, r, n, true)
	})
	mux.HandleFunc("GET /snowflake", s.snowflake)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /metrics", s.writeMetrics)
	return mux
}

// requestTimeout bounds a request's wait for Redis (a segment fetch).
const requestTimeout = 2 * time.Second

func (s *server) ids(w http.ResponseWriter, r *http.Request, n int, batch bool) {
	tag := r.PathValue("tag")
	if !validTag(tag) {
		s.fail(w, http.StatusBadRequest, "tag must be 1 to 64 of A-Z a-z 0-9 _ . : -")
		return
	}
	g, err := s.segment(tag)
	if err != nil {
		s.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	ids := make([]int64, n)
	for i := range ids {
		if ids[i], err = g.Next(ctx); err != nil {
			s.fail(w, http.StatusServiceUnavailable, "Redis unavailable: "+err.Error())
			return
		}
	}
	s.m.issuedSegment.Add(int64(n))
	writeIDs(w, r, ids, batch)
}

func (s *server) snowflake(w http.ResponseWriter, r *http.Request) {
	id, err := s.sf.Next()
	if err != nil { // the lease is lost (or the clock far behind): refuse
		s.fail(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	s.m.issuedSnowflake.Add(1)
	writeIDs(w, r, []int64{id}, false)
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	var problems []string
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		problems = append(problems, "redis: "+err.Error())
	}
	if err := s.lease.Err(); err != nil {
		problems = append(problems, "worker lease: "+err.Error())
	}
	if len(problems) > 0 {
		http.Error(w, strings.Join(problems, "\n"), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

func (s *server) fail(w http.ResponseWriter, code int, msg string) {
	if code == http.StatusBadRequest {
		s.m.badRequest.Add(1)
	} else {
		s.m.unavailable.Add(1)
	}
	http.Error(w, msg, code)
}

func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

func writeIDs(w http.ResponseWriter, r *http.Request, ids []int64, batch bool) {
	if wantsJSON(r) {
		w.Header().Set("Content-Type", "application/json")
		strs := make([]string, len(ids))
		for i, id := range ids {
			strs[i] = strconv.FormatInt(id, 10)
		}
		if batch {
			json.NewEncoder(w).Encode(struct {
				IDs []string `json:"ids"`
			}{strs})
		} else {
			json.NewEncoder(w).Encode(struct {
				ID string `json:"id"`
			}{strs[0]})
		}
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	buf := make([]byte, 0, 20*len(ids))
	for _, id := range ids {
		buf = strconv.AppendInt(buf, id, 10)
		buf = append(buf, '\n')
	}
	w.Write(buf)
}
