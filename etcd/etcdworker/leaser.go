package etcdworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/watchdog"
)

var _ workerid.Leaser = (*Leaser)(nil)

// opTimeout bounds the requests that run detached from the caller's ctx:
// the revocation of a lease whose Lease call failed.
const opTimeout = 5 * time.Second

// Leaser leases worker IDs through etcd: one key per worker ID, created
// by a transaction carrying an etcd lease of its own per Lease, kept alive
// by the Lease's keep-alives (see the package documentation). It is safe
// for concurrent use.
type Leaser struct {
	cli *clientv3.Client
	o   options
}

// New returns a leaser over cli, which it does not close. It does no I/O.
// It returns an error wrapping workerid.ErrInvalid for a nil client or bad
// options.
func New(cli *clientv3.Client, opts ...Option) (*Leaser, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: nil *clientv3.Client", workerid.ErrInvalid)
	}
	o := defaults()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	o.ttl = (o.ttl + time.Second - 1) / time.Second * time.Second // etcd counts whole seconds
	return &Leaser{cli: cli, o: o}, nil
}

// Close does nothing and returns nil: a Leaser has no background work of
// its own (each Lease's keeper belongs to the Lease, and Release stops it).
// It does not close the etcd client.
func (l *Leaser) Close() error { return nil }

func checkService(service string) error {
	if service == "" {
		return fmt.Errorf("%w: empty service name", workerid.ErrInvalid)
	}
	if strings.ContainsAny(service, "{}/ \t\r\n") {
		return fmt.Errorf("%w: service name %q contains one of {}/ or a space", workerid.ErrInvalid, service)
	}
	return nil
}

func (l *Leaser) idsPrefix(service string) string { return l.o.prefix + "/" + service + "/ids/" }

func (l *Leaser) key(service string, id int64) string {
	return l.idsPrefix(service) + strconv.FormatInt(id, 10)
}

func (l *Leaser) hwKey(service string, id int64) string {
	return l.o.prefix + "/" + service + "/hw/" + strconv.FormatInt(id, 10)
}

// Lease takes the lowest free worker ID in [0, max] for service: it grants
// an etcd lease, reads which IDs are taken (one range read of the keys),
// and creates the lowest free one's key with a transaction that carries the
// lease and succeeds only if the key does not exist; if another process
// took that ID first, it tries the next free one. It returns
// *workerid.ExhaustedError when every ID is taken, an error wrapping
// workerid.ErrInvalid for a bad service name, and etcd's errors wrapped.
// When it returns an error, the lease it granted is revoked.
func (l *Leaser) Lease(ctx context.Context, service string) (*workerid.Lease, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	owner, err := idgen.NewUUIDv4()
	if err != nil {
		return nil, fmt.Errorf("etcdworker: owner id: %w", err)
	}
	rec, _ := json.Marshal(workerid.Holder{Owner: owner.String(), Host: l.o.host, PID: os.Getpid(), Since: l.o.now().UTC()})
	sent := time.Now()
	g, err := l.cli.Grant(ctx, int64(l.o.ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("etcdworker: grant a lease: %w", err)
	}
	id, err := l.take(ctx, service, string(rec), g.ID)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		l.cli.Revoke(rctx, g.ID)
		cancel()
		return nil, err
	}
	return l.keep(service, id, g, sent)
}

// take creates the key of the lowest free ID of service with value rec on
// lease.
func (l *Leaser) take(ctx context.Context, service, rec string, lease clientv3.LeaseID) (int64, error) {
	resp, err := l.cli.Get(ctx, l.idsPrefix(service), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("etcdworker: read leases of %q: %w", service, err)
	}
	taken := map[int64]bool{}
	for _, kv := range resp.Kvs {
		if id, err := strconv.ParseInt(strings.TrimPrefix(string(kv.Key), l.idsPrefix(service)), 10, 64); err == nil {
			taken[id] = true
		}
	}
	for id := int64(0); id <= l.o.max; id++ {
		if taken[id] {
			continue
		}
		key := l.key(service, id)
		tx, err := l.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, rec, clientv3.WithLease(lease))).
			Commit()
		if err != nil {
			return 0, fmt.Errorf("etcdworker: lease %q/%d: %w", service, id, err)
		}
		if tx.Succeeded {
			return id, nil
		}
	}
	return 0, &workerid.ExhaustedError{Service: service, Max: l.o.max}
}

// keep starts the keeper of a freshly taken ID: a watchdog whose renewal
// is a keep-alive of the etcd lease followed by a read of the ID's key
// (gone, or on another lease: not held), every T/6, T the TTL the server
// granted; the lease's deadline is the send time of the last renewal that
// succeeded (of the Grant, at first) plus 2T/3, T/3 before the server,
// which renews the lease on receipt for T, can expire it.
func (l *Leaser) keep(service string, id int64, g *clientv3.LeaseGrantResponse, sent time.Time) (*workerid.Lease, error) {
	ttl := time.Duration(g.TTL) * time.Second
	key := l.key(service, id)
	wd, err := watchdog.Start(watchdog.Config{
		Observer:    &events{log: l.o.logger, service: service, id: id},
		TTL:         ttl * 2 / 3,
		Interval:    ttl / 6,
		LastRenewed: sent,
		Renew: func(ctx context.Context) error {
			if _, err := l.cli.KeepAliveOnce(ctx, g.ID); err != nil {
				if errors.Is(err, rpctypes.ErrLeaseNotFound) {
					return fmt.Errorf("etcdworker: lease %x of %s: %w", int64(g.ID), key, watchdog.ErrNotHeld)
				}
				return err
			}
			resp, err := l.cli.Get(ctx, key)
			if err != nil {
				return err
			}
			if len(resp.Kvs) == 0 || resp.Kvs[0].Lease != int64(g.ID) {
				return fmt.Errorf("etcdworker: %s gone or another's: %w", key, watchdog.ErrNotHeld)
			}
			return nil
		},
	})
	if err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		l.cli.Revoke(ctx, g.ID)
		return nil, err
	}
	lease, err := workerid.NewLease(workerid.LeaseConfig{
		Service:    service,
		ID:         id,
		Max:        l.o.max,
		Lost:       wd.Lost(),
		Held:       wd.Held,
		Err:        wd.Err,
		HighWater:  &highWater{cli: l.cli, key: l.hwKey(service, id)},
		Checkpoint: l.o.checkpoint,
		Free: func(ctx context.Context) error {
			wd.Lose(workerid.ErrReleased) // generators stop before the key goes
			if _, err := l.cli.Revoke(ctx, g.ID); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return fmt.Errorf("etcdworker: release %s (lease %x): %w", key, int64(g.ID), err)
			}
			return nil
		},
	})
	if err != nil {
		// Only a bad configuration fails here; give the ID back.
		wd.Lose(err)
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		l.cli.Revoke(ctx, g.ID)
		return nil, err
	}
	return lease, nil
}

// events logs a keeper's events (watchdog.Observer).
type events struct {
	log     *slog.Logger
	service string
	id      int64
}

// Renewed logs a renewal that failed without losing the lease.
func (e *events) Renewed(err error) {
	if err != nil && !errors.Is(err, watchdog.ErrNotHeld) {
		e.log.Warn("etcdworker: worker lease renewal failed", "service", e.service, "worker", e.id, "err", err)
	}
}

// Lost logs a lease lost; a release is not a loss.
func (e *events) Lost(cause error) {
	if !errors.Is(cause, workerid.ErrReleased) {
		e.log.Error("etcdworker: worker lease lost: its generators have stopped", "service", e.service, "worker", e.id, "cause", cause)
	}
}

// List returns the current holders of service's worker IDs, lowest ID
// first, with what remains of each one's etcd lease as the server sees it
// (TTL; one request per holder, 0 if it failed). A key whose value is not
// a holder record is reported with only its ID.
func (l *Leaser) List(ctx context.Context, service string) ([]workerid.Holder, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	resp, err := l.cli.Get(ctx, l.idsPrefix(service), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdworker: list %q: %w", service, err)
	}
	var out []workerid.Holder
	for _, kv := range resp.Kvs {
		id, err := strconv.ParseInt(strings.TrimPrefix(string(kv.Key), l.idsPrefix(service)), 10, 64)
		if err != nil {
			continue
		}
		h := workerid.Holder{}
		json.Unmarshal(kv.Value, &h) // a foreign value leaves the fields empty
		h.ID = id
		if kv.Lease != 0 {
			if ttl, err := l.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil && ttl.TTL > 0 {
				h.TTL = time.Duration(ttl.TTL) * time.Second
			}
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b workerid.Holder) int { return int(a.ID - b.ID) })
	return out, nil
}

// HighWater returns the high-water store of one worker ID of service, e.g.
// for an operator tool; a lease's own store is Lease.HighWater. It returns
// an error wrapping workerid.ErrInvalid for a bad service or ID.
func (l *Leaser) HighWater(service string, id int64) (idgen.HighWaterStore, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	if id < 0 || id > l.o.max {
		return nil, fmt.Errorf("%w: worker ID %d outside [0, %d]", workerid.ErrInvalid, id, l.o.max)
	}
	return &highWater{cli: l.cli, key: l.hwKey(service, id)}, nil
}

// highWater keeps a mark as decimal Unix milliseconds in a key without a
// lease, raised by a compare-and-swap on its mod revision, so that a late
// Store of a stale process cannot lower it.
type highWater struct {
	cli *clientv3.Client
	key string
}

func (h *highWater) Load(ctx context.Context) (time.Time, error) {
	resp, err := h.cli.Get(ctx, h.key)
	if err != nil {
		return time.Time{}, fmt.Errorf("etcdworker: load %s: %w", h.key, err)
	}
	if len(resp.Kvs) == 0 {
		return time.Time{}, nil
	}
	ms, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("etcdworker: high-water mark at %s is not a number: %q", h.key, resp.Kvs[0].Value)
	}
	return time.UnixMilli(ms), nil
}

// Store raises the mark to mark (rounded up to the millisecond): a read,
// and a transaction that writes only if the key is unchanged since, until
// the stored mark is at least mark.
func (h *highWater) Store(ctx context.Context, mark time.Time) error {
	if mark.IsZero() {
		return nil
	}
	ms := ceilMilli(mark)
	for {
		resp, err := h.cli.Get(ctx, h.key)
		if err != nil {
			return fmt.Errorf("etcdworker: store %s: %w", h.key, err)
		}
		var mod int64 // 0: absent, and the compare below is on its absence
		if len(resp.Kvs) > 0 {
			kv := resp.Kvs[0]
			if cur, err := strconv.ParseInt(string(kv.Value), 10, 64); err == nil && cur >= ms {
				return nil
			}
			mod = kv.ModRevision
		}
		tx, err := h.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(h.key), "=", mod)).
			Then(clientv3.OpPut(h.key, strconv.FormatInt(ms, 10))).
			Commit()
		if err != nil {
			return fmt.Errorf("etcdworker: store %s: %w", h.key, err)
		}
		if tx.Succeeded {
			return nil
		}
	}
}

// ceilMilli rounds up: the mark is an instant before which every ID lies,
// so rounding down could let a new generator reissue the last millisecond.
func ceilMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}
