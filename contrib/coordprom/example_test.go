package coordprom_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/contrib/coordprom"
	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/redisid"
	"github.com/coordkit/coordkit/lock"
)

func ExampleNewLockMetrics() {
	reg := prometheus.NewRegistry()
	metrics, err := coordprom.NewLockMetrics(reg, coordprom.WithBackend("redis"))
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locker := lock.New(rdb, lock.WithMetrics(metrics),
		// Report "orders" for "orders:1042": one series per kind of lock,
		// not one per lock.
		lock.WithMetricsKey(func(key string) string {
			kind, _, _ := strings.Cut(key, ":")
			return kind
		}))
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.Obtain(ctx, "orders:1042")
	if err != nil {
		panic(err)
	}
	if err := lease.Release(ctx); err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// http.ListenAndServe(":9090", mux)

	// What a scrape of /metrics gets, less the histograms' buckets and sums
	// (durations vary from run to run).
	printScrape(mux, "coordkit_lock_")
	// Output:
	// coordkit_lock_held_seconds_count{backend="redis",key="orders"} 1
	// coordkit_lock_obtain_seconds_count{backend="redis",key="orders",result="ok"} 1
	// coordkit_lock_releases_total{backend="redis",key="orders",result="ok"} 1
}

func ExampleNewIDMetrics() {
	reg := prometheus.NewRegistry()
	metrics, err := coordprom.NewIDMetrics(reg)
	if err != nil {
		panic(err)
	}
	// One IDMetrics serves every generator: a Snowflake reports the tag "",
	// Segments their own tags.
	sf, err := idgen.NewSnowflake(idgen.Layout{}, 7, idgen.WithMetrics(metrics))
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	segments, err := redisid.NewSegments(rdb, redisid.WithMetrics(metrics))
	if err != nil {
		panic(err)
	}
	defer segments.Close()

	ctx := context.Background()
	for range 3 {
		if _, err := sf.Next(); err != nil {
			panic(err)
		}
		if _, err := segments.Next(ctx, "invoice"); err != nil {
			panic(err)
		}
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	printScrape(mux, "coordkit_ids_issued_total", "coordkit_ids_segment_fetches_total")
	// Output:
	// coordkit_ids_issued_total{tag=""} 3
	// coordkit_ids_issued_total{tag="invoice"} 3
	// coordkit_ids_segment_fetches_total{result="ok",tag="invoice"} 1
}

// printScrape gets /metrics from h and prints its samples whose names start
// with one of prefixes, except histogram buckets and sums.
func printScrape(h http.Handler, prefixes ...string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, "{")
		if strings.HasPrefix(line, "#") || strings.HasSuffix(name, "_bucket") || strings.HasSuffix(name, "_sum") {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				fmt.Println(line)
			}
		}
	}
}
