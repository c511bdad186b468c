package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/etcd/etcdworker"
	"github.com/coordkit/coordkit/idgen/workerid"
)

func init() {
	register(command{name: "workers list", summary: "list the leased worker IDs of a service", run: workersList})
}

// maxWorkerID is the largest worker ID package workerid leases (22 bits).
const maxWorkerID = 1<<22 - 1

// workerView is one leased worker ID, for text and JSON.
type workerView struct {
	ID    int64  `json:"id"`
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Owner string `json:"owner,omitempty"` // Redis and etcd: the lease's random owner
	Since string `json:"since,omitempty"` // RFC 3339, UTC
	TTLms int64  `json:"ttl_ms,omitempty"`
}

func workersList(e *env, args []string) error {
	fs := newFlags(e, "workers list", "SERVICE", "Lists who holds each leased worker ID of SERVICE, whatever the range its\n"+
		"layout gives (a Redis lease is found by a SCAN of the service's keys, a\n"+
		"ZooKeeper lease by its node, an etcd lease by its key). --layout or --max\n"+
		"restrict the range.")
	var c conn
	backend := fs.String("backend", "redis", "where the leases are: redis, zk or etcd")
	c.addRedis(fs, e)
	c.addZK(fs, e)
	c.addEtcd(fs, e)
	maxID := fs.Int64("max", -1, "list worker IDs 0 to max only (default: every leased ID)")
	layoutName := fs.String("layout", "", "list the worker IDs of this Snowflake layout's range only: "+layoutNames())
	prefix := fs.String("prefix", "coordkit:worker:", "the Redis leaser's key prefix (workerid.WithPrefix)")
	root := fs.String("zk-root", "/coordkit/workers", "the ZooKeeper leaser's root path (workerid.WithRoot)")
	etcdPrefix := fs.String("etcd-prefix", etcdworker.DefaultPrefix, "the etcd leaser's key prefix (etcdworker.WithPrefix)")
	asJSON := addJSON(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one SERVICE, got %d arguments", len(pos))
	}
	service := pos[0]
	if err := checkServiceName(service); err != nil {
		return err
	}
	if *prefix == "" {
		return usagef("--prefix is empty")
	}
	limit := int64(-1) // -1: every leased ID
	switch {
	case *layoutName != "" && *maxID >= 0:
		return usagef("give --layout or --max, not both")
	case *layoutName != "":
		l, ok := layoutByName(*layoutName)
		if !ok {
			return usagef("unknown --layout %q: want one of %s", *layoutName, layoutNames())
		}
		limit = min(int64(1)<<l.WorkerBits-1, maxWorkerID)
	case *maxID > maxWorkerID:
		return usagef("--max %d above %d, the largest worker ID", *maxID, maxWorkerID)
	case *maxID >= 0:
		limit = *maxID
	}
	ctx, cancel := context.WithTimeout(e.ctx, c.timeout+5*time.Second)
	defer cancel()
	var holders []workerid.Holder
	switch *backend {
	case "redis":
		rdb, err := c.redisClient(ctx)
		if err != nil {
			return err
		}
		defer rdb.Close()
		if limit < 0 {
			// The highest ID leased, so that List's MGETs cover every lease
			// and no more.
			if limit, err = highestLeased(ctx, rdb, *prefix, service); err != nil {
				return err
			}
		}
		if limit >= 0 {
			l, err := workerid.NewRedis(rdb, workerid.WithMax(limit), workerid.WithPrefix(*prefix))
			if err != nil {
				return usagef("%v", err)
			}
			if holders, err = l.List(ctx, service); err != nil {
				return listErr(err)
			}
		}
	case "zk":
		zc, err := c.zkConn(ctx)
		if err != nil {
			return err
		}
		defer zc.Close()
		l, err := workerid.NewZK(zc, workerid.WithMax(maxWorkerID), workerid.WithRoot(*root))
		if err != nil {
			return usagef("%v", err)
		}
		defer l.Close()
		if holders, err = l.List(ctx, service); err != nil {
			return listErr(err)
		}
		if limit >= 0 {
			kept := holders[:0]
			for _, h := range holders {
				if h.ID <= limit {
					kept = append(kept, h)
				}
			}
			holders = kept
		}
	case "etcd":
		cli, err := c.etcdClient()
		if err != nil {
			return err
		}
		defer cli.Close()
		l, err := etcdworker.New(cli, etcdworker.WithMax(maxWorkerID), etcdworker.WithPrefix(*etcdPrefix))
		if err != nil {
			return usagef("%v", err)
		}
		if holders, err = l.List(ctx, service); err != nil {
			return listErr(err)
		}
		if limit >= 0 {
			kept := holders[:0]
			for _, h := range holders {
				if h.ID <= limit {
					kept = append(kept, h)
				}
			}
			holders = kept
		}
	default:
		return usagef("unknown --backend %q: want redis, zk or etcd", *backend)
	}
	views := make([]workerView, 0, len(holders))
	for _, h := range holders {
		v := workerView{ID: h.ID, Host: h.Host, PID: h.PID, Owner: h.Owner, TTLms: h.TTL.Milliseconds()}
		if !h.Since.IsZero() {
			v.Since = h.Since.UTC().Format(time.RFC3339)
		}
		views = append(views, v)
	}
	if *asJSON {
		return writeJSON(e.out, views)
	}
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tHOST\tPID\tSINCE\tTTL")
	for _, v := range views {
		ttl, since := "-", "-"
		if v.TTLms > 0 {
			ttl = fmt.Sprintf("%d ms", v.TTLms)
		}
		if v.Since != "" {
			since = v.Since
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", v.ID, v.Host, v.PID, since, ttl)
	}
	tw.Flush()
	if len(views) == 0 {
		fmt.Fprintf(e.out, "(no worker ID of %s is leased)\n", service)
	}
	return nil
}

// checkServiceName refuses what workerid refuses (it is part of a key).
func checkServiceName(service string) error {
	if service == "" || strings.ContainsAny(service, "{}/ \t\r\n") {
		return usagef("bad SERVICE %q: it may not be empty nor contain {}/ or a space", service)
	}
	return nil
}

// highestLeased returns the highest worker ID with a lease key of service
// (prefix{service}:<id>), or -1 if none: one SCAN of the keys that match, on
// the node that serves the service's hash slot.
func highestLeased(ctx context.Context, rdb redis.UniversalClient, prefix, service string) (int64, error) {
	head := prefix + "{" + service + "}:"
	var node redis.Cmdable = rdb
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, head)
		if err != nil {
			return 0, fmt.Errorf("find the node of %s: %w", head, err)
		}
		node = m
	}
	best := int64(-1)
	var cursor uint64
	for {
		keys, next, err := node.Scan(ctx, cursor, globEscape(head)+"*", 1000).Result()
		if err != nil {
			return 0, fmt.Errorf("scan %s*: %w", head, err)
		}
		for _, k := range keys {
			if id, err := strconv.ParseInt(k[len(head):], 10, 64); err == nil && id >= 0 {
				best = max(best, min(id, maxWorkerID))
			}
		}
		if cursor = next; cursor == 0 {
			return best, nil
		}
	}
}

// globEscape escapes the characters SCAN's MATCH pattern gives a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// listErr makes a bad service name a usage error.
func listErr(err error) error {
	if errors.Is(err, workerid.ErrInvalid) {
		return usagef("%v", err)
	}
	return err
}
