package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/coordkit/coordkit/etcd/etcdlock"
)

// kindEtcd is --kind etcd: etcdlock.Client, hold keys on etcd leases.
const kindEtcd = "etcd"

// addEtcd adds --etcd, the endpoints of the etcd cluster.
func (c *conn) addEtcd(fs *flag.FlagSet, e *env) {
	fs.StringVar(&c.etcd, "etcd", envOr(e, "COORDKIT_ETCD", "127.0.0.1:2379"),
		"etcd endpoints, comma-separated (env COORDKIT_ETCD)")
	c.addTimeout(fs)
}

// etcdClient connects to the --etcd endpoints.
func (c *conn) etcdClient() (*clientv3.Client, error) {
	eps := splitList(c.etcd)
	if len(eps) == 0 {
		return nil, usagef("--etcd is empty")
	}
	for _, ep := range eps {
		if err := checkAddr(strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://"), true); err != nil {
			return nil, usagef("--etcd %q: %v", ep, err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: c.timeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", c.etcd, err)
	}
	return cli, nil
}

// etcdLocks returns an etcdlock.Client over the --etcd endpoints with the
// --etcd-prefix; it grants no lease (Inspect and ForceRelease need none).
func etcdLocks(f *lockFlags) (*etcdlock.Client, func(), error) {
	cli, err := f.c.etcdClient()
	if err != nil {
		return nil, nil, err
	}
	lc, err := etcdlock.New(cli, etcdlock.WithPrefix(*f.etcdPrefix), etcdlock.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		cli.Close()
		return nil, nil, usagef("%v", err)
	}
	return lc, func() { lc.Close(); cli.Close() }, nil
}

// etcdView is the state of an etcd lock (etcdlock.Info), for text and JSON.
type etcdView struct {
	Kind    string      `json:"kind"`
	Key     string      `json:"key"`
	Prefix  string      `json:"prefix"` // the hold keys are under "<prefix>/<key>/"
	Held    bool        `json:"held"`
	Holder  *etcdHold   `json:"holder,omitempty"`
	TTLms   int64       `json:"ttl_ms"` // what remains of the holder's lease, by the server
	Waiters []*etcdHold `json:"waiters"`
}

// etcdHold is one hold key: its owner, etcd lease, token (create revision)
// and etcd key.
type etcdHold struct {
	Owner string `json:"owner"`
	Lease string `json:"lease"` // hex, as etcdctl prints it
	Token int64  `json:"token"`
	Path  string `json:"path"`
}

func etcdHoldOf(e etcdlock.Entry) *etcdHold {
	return &etcdHold{Owner: e.Owner, Lease: strconv.FormatInt(e.Lease, 16), Token: e.Token, Path: e.Path}
}

func inspectEtcd(e *env, f *lockFlags, key string) (*etcdView, error) {
	lc, done, err := etcdLocks(f)
	if err != nil {
		return nil, err
	}
	defer done()
	ctx, cancel := context.WithTimeout(e.ctx, f.c.timeout)
	defer cancel()
	info, err := lc.Inspect(ctx, key)
	if err != nil {
		return nil, etcdErr(f, err)
	}
	v := &etcdView{Kind: kindEtcd, Key: key, Prefix: *f.etcdPrefix, Held: info.Held(), TTLms: info.TTL.Milliseconds(), Waiters: []*etcdHold{}}
	if info.Held() {
		v.Holder = etcdHoldOf(info.Holder)
	}
	for _, w := range info.Waiters {
		v.Waiters = append(v.Waiters, etcdHoldOf(w))
	}
	return v, nil
}

// etcdErr turns a bad key into a usage error, and a deadline into the
// unreachable cluster it means.
func etcdErr(f *lockFlags, err error) error {
	switch {
	case errors.Is(err, etcdlock.ErrInvalidKey):
		return usagef("%v", err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("etcd at %s is unreachable (no answer after %v): %w", f.c.etcd, f.c.timeout, err)
	}
	return err
}

func (v *etcdView) print(w io.Writer) {
	fmt.Fprintf(w, "key:     %s\n", v.Key)
	fmt.Fprintf(w, "kind:    etcd lock (etcdlock), hold keys under %s/%s/\n", v.Prefix, v.Key)
	if !v.Held {
		fmt.Fprintf(w, "state:   free\n")
		return
	}
	fmt.Fprintf(w, "state:   held by %s (lease %s, token %d)\n", ownerOrNone(v.Holder.Owner), v.Holder.Lease, v.Holder.Token)
	fmt.Fprintf(w, "ttl:     %d ms (the holder's lease, by the server)\n", v.TTLms)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tSTATE\tOWNER\tLEASE\tTOKEN")
	for i, h := range append([]*etcdHold{v.Holder}, v.Waiters...) {
		st := "waits"
		if i == 0 {
			st = "holds"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\n", i+1, st, ownerOrNone(h.Owner), h.Lease, h.Token)
	}
	tw.Flush()
}

func releaseEtcd(e *env, f *lockFlags, key string) error {
	lc, done, err := etcdLocks(f)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(e.ctx, f.c.timeout)
	defer cancel()
	v, err := inspectEtcd(e, f, key)
	if err != nil {
		return err
	}
	ok, err := lc.ForceRelease(ctx, key)
	if err != nil {
		return etcdErr(f, err)
	}
	if ok && v.Holder != nil {
		// As read just before: ForceRelease deletes the first hold key it
		// finds, the same unless the lock changed hands in between.
		fmt.Fprintf(e.out, "deleted the holder's key (just before: %s, owner %s, lease %s, token %d)\n", v.Holder.Path, ownerOrNone(v.Holder.Owner), v.Holder.Lease, v.Holder.Token)
	}
	printReleased(e.out, key, ok)
	if ok {
		fmt.Fprintln(e.out, "the former holder is not told: its Release returns lock.ErrNotHeld")
	}
	return nil
}

// etcdPageLock is one etcd lock on the operator page: its holder and
// waiters in line, the holder's lease TTL.
type etcdPageLock struct {
	Key     string      `json:"key"`
	Holder  *etcdHold   `json:"holder"`
	TTLms   int64       `json:"ttl_ms"`
	Waiters []*etcdHold `json:"waiters"`
}

// etcdLockList is the page's list of etcd locks under a prefix.
type etcdLockList struct {
	Prefix    string         `json:"prefix"`
	Locks     []etcdPageLock `json:"locks"`
	Truncated bool           `json:"truncated"`
	Error     string         `json:"error,omitempty"`
}

// etcdScanKeys bounds the hold keys one page scan reads.
const etcdScanKeys = 10000

// scanEtcdLocks lists the etcdlock locks under the page's etcd prefix: one
// range read of "<prefix>/" in create revision order (the first hold key
// of each lock holds it, the others wait in that order), then the
// holder's lease's TTL per lock (TimeToLive), at most pageLocks locks.
// The read-write locks ("<prefix>.rw/") are not listed.
func (s *server) scanEtcdLocks(ctx context.Context) etcdLockList {
	prefix := s.cfg.etcdPrefix
	ll := etcdLockList{Prefix: prefix, Locks: []etcdPageLock{}}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := s.cfg.etcd.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithLimit(etcdScanKeys),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		s.logLimited("etcd scan", "the page's etcd lock scan failed", "prefix", prefix, "err", err)
		ll.Error = "etcd unavailable"
		return ll
	}
	ll.Truncated = resp.More
	byKey := map[string]*etcdPageLock{}
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), prefix+"/")
		key, _, ok := strings.Cut(rest, "/")
		if !ok || key == "" {
			continue
		}
		h := etcdHoldOf(etcdlock.Entry{Owner: string(kv.Value), Lease: kv.Lease, Token: kv.CreateRevision, Path: string(kv.Key)})
		if l := byKey[key]; l != nil {
			l.Waiters = append(l.Waiters, h)
			continue
		}
		if len(ll.Locks) >= s.cfg.pageLocks {
			ll.Truncated = true
			continue
		}
		ll.Locks = append(ll.Locks, etcdPageLock{Key: key, Holder: h, Waiters: []*etcdHold{}})
		byKey[key] = &ll.Locks[len(ll.Locks)-1]
	}
	for i := range ll.Locks {
		l := &ll.Locks[i]
		lease, _ := strconv.ParseInt(l.Holder.Lease, 16, 64)
		if ttl, err := s.cfg.etcd.TimeToLive(ctx, clientv3.LeaseID(lease)); err == nil && ttl.TTL > 0 {
			l.TTLms = ttl.TTL * 1000
		} else {
			l.TTLms = -1 // unknown
		}
	}
	sort.Slice(ll.Locks, func(i, j int) bool { return ll.Locks[i].Key < ll.Locks[j].Key })
	return ll
}
