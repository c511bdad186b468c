package workerid

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/observe"
	"github.com/coordkit/coordkit/watchdog"
)

// RedisLeaser leases worker IDs through Redis: one key per worker ID, taken
// with SET NX PX and kept by the watchdog. It is safe for concurrent use.
type RedisLeaser struct {
	rdb  redis.UniversalClient
	opts options
	obs  *observe.IDs
}

// NewRedis returns a leaser over rdb (a single node, Sentinel or Cluster
// client). It returns an error wrapping ErrInvalid for a nil client or bad
// options.
func NewRedis(rdb redis.UniversalClient, opts ...Option) (*RedisLeaser, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalid)
	}
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &RedisLeaser{rdb: rdb, opts: o, obs: observe.NewIDs("coordkit/workerid", o.logger, o.metrics)}, nil
}

// Close does nothing and returns nil: a RedisLeaser has no background work
// of its own (each Lease's watchdog belongs to the Lease, and Release stops
// it). It is there so that RedisLeaser implements Leaser, whose ZooKeeper
// implementation has background work to stop. It does not close the Redis
// client.
func (r *RedisLeaser) Close() error { return nil }

// Holder describes who holds a worker ID.
type Holder struct {
	ID    int64         `json:"id"`
	Owner string        `json:"owner"`
	Host  string        `json:"host"`
	PID   int           `json:"pid"`
	Since time.Time     `json:"since"`
	TTL   time.Duration `json:"ttl,omitempty"` // Redis: the key's remaining TTL; SQL: the row's, by the database's clock
}

func checkService(service string) error {
	if service == "" {
		return fmt.Errorf("%w: empty service name", ErrInvalid)
	}
	if strings.ContainsAny(service, "{}/ \t\r\n") {
		return fmt.Errorf("%w: service name %q contains one of {}/ or a space", ErrInvalid, service)
	}
	return nil
}

// All keys of a service share the hash tag {service}, so a Cluster serves
// them from one slot and MGET works.
func (r *RedisLeaser) key(service string, id int64) string {
	return r.opts.prefix + "{" + service + "}:" + strconv.FormatInt(id, 10)
}

func (r *RedisLeaser) hwKey(service string, id int64) string {
	return r.opts.prefix + "{" + service + "}:hw:" + strconv.FormatInt(id, 10)
}

// mgetChunk bounds the keys read by one MGET.
const mgetChunk = 1024

// Lease takes the lowest free worker ID in [0, max] for service: it reads
// which IDs are taken (one MGET per 1024 IDs) and takes the lowest free one
// with SET NX PX, moving on to the next free one if another process took it
// first. The watchdog renews it every TTL/3. It returns *ExhaustedError when
// every ID is taken, an error wrapping ErrInvalid for a bad service name,
// and Redis errors wrapped.
func (r *RedisLeaser) Lease(ctx context.Context, service string) (*Lease, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	owner, err := idgen.NewUUIDv4()
	if err != nil {
		return nil, fmt.Errorf("workerid: owner id: %w", err)
	}
	rec, _ := json.Marshal(Holder{Owner: owner.String(), Host: r.opts.host, PID: os.Getpid(), Since: r.opts.now().UTC()})
	record := string(rec)

	for lo := int64(0); lo <= r.opts.max; lo += mgetChunk {
		hi := min(lo+mgetChunk-1, r.opts.max)
		keys := make([]string, 0, hi-lo+1)
		for id := lo; id <= hi; id++ {
			keys = append(keys, r.key(service, id))
		}
		vals, err := r.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, fmt.Errorf("workerid: read leases of %q: %w", service, err)
		}
		for i, v := range vals {
			if v != nil {
				continue
			}
			id := lo + int64(i)
			sent := time.Now()
			ok, err := r.rdb.SetNX(ctx, keys[i], record, r.opts.ttl).Result()
			if err != nil {
				return nil, fmt.Errorf("workerid: lease %q/%d: %w", service, id, err)
			}
			if ok {
				return r.keep(service, id, keys[i], record, sent)
			}
		}
	}
	return nil, &ExhaustedError{Service: service, Max: r.opts.max}
}

// keep starts the watchdog of a freshly taken ID. The local deadline is 90 %
// of the TTL from the moment the SET was sent, so that generators stop before
// Redis can expire the key and hand the ID to another process, with a margin
// for clock-rate drift and scheduling delay.
func (r *RedisLeaser) keep(service string, id int64, key, record string, sent time.Time) (*Lease, error) {
	ttl := r.opts.ttl
	wd, err := watchdog.Start(watchdog.Config{
		Observer:    &leaseEvents{obs: r.obs, service: service, id: id},
		TTL:         ttl - ttl/10,
		Interval:    ttl / 3,
		LastRenewed: sent,
		Renew: func(ctx context.Context) error {
			n, err := renewScript.Run(ctx, r.rdb, []string{key}, record, ttl.Milliseconds()).Int()
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("workerid: %s: %w", key, watchdog.ErrNotHeld)
			}
			return nil
		},
	})
	if err != nil {
		// Only a bad configuration fails here; give the ID back.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		releaseScript.Run(ctx, r.rdb, []string{key}, record)
		return nil, err
	}
	return &Lease{
		service:    service,
		id:         id,
		max:        r.opts.max,
		lost:       wd.Lost(),
		held:       wd.Held,
		cause:      wd.Err,
		hw:         &redisHighWater{rdb: r.rdb, key: r.hwKey(service, id)},
		checkpoint: r.opts.checkpoint,
		free: func(ctx context.Context) error {
			wd.Lose(ErrReleased) // generators stop before the key goes
			if err := releaseScript.Run(ctx, r.rdb, []string{key}, record).Err(); err != nil {
				return fmt.Errorf("workerid: release %s: %w", key, err)
			}
			return nil
		},
	}, nil
}

// List returns the current holders of service's worker IDs, lowest ID first.
// A key whose value is not a holder record is reported with only its ID.
func (r *RedisLeaser) List(ctx context.Context, service string) ([]Holder, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	var out []Holder
	for lo := int64(0); lo <= r.opts.max; lo += mgetChunk {
		hi := min(lo+mgetChunk-1, r.opts.max)
		keys := make([]string, 0, hi-lo+1)
		for id := lo; id <= hi; id++ {
			keys = append(keys, r.key(service, id))
		}
		vals, err := r.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, fmt.Errorf("workerid: list %q: %w", service, err)
		}
		pipe := r.rdb.Pipeline()
		var ttls []*redis.DurationCmd
		start := len(out)
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				continue
			}
			h := Holder{}
			json.Unmarshal([]byte(s), &h) // a foreign value leaves the fields empty
			h.ID = lo + int64(i)
			out = append(out, h)
			ttls = append(ttls, pipe.PTTL(ctx, keys[i]))
		}
		if len(ttls) > 0 {
			pipe.Exec(ctx) // TTLs are informative; a failure leaves them 0
			for i, c := range ttls {
				if d, err := c.Result(); err == nil && d > 0 {
					out[start+i].TTL = d
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b Holder) int { return int(a.ID - b.ID) })
	return out, nil
}

// HighWater returns the high-water store of one worker ID of service, e.g.
// for an operator tool; a lease's own store is Lease.HighWater.
func (r *RedisLeaser) HighWater(service string, id int64) (idgen.HighWaterStore, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	if id < 0 || id > r.opts.max {
		return nil, fmt.Errorf("%w: worker ID %d outside [0, %d]", ErrInvalid, id, r.opts.max)
	}
	return &redisHighWater{rdb: r.rdb, key: r.hwKey(service, id)}, nil
}

// redisHighWater keeps a mark as Unix milliseconds in a string key, raised
// by a Lua max so a late Store from a stale process cannot lower it.
type redisHighWater struct {
	rdb redis.UniversalClient
	key string
}

func (h *redisHighWater) Load(ctx context.Context) (time.Time, error) {
	s, err := h.rdb.Get(ctx, h.key).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("workerid: load %s: %w", h.key, err)
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("workerid: high-water mark at %s is not a number: %q", h.key, s)
	}
	return time.UnixMilli(ms), nil
}

func (h *redisHighWater) Store(ctx context.Context, mark time.Time) error {
	if mark.IsZero() {
		return nil
	}
	if err := highwaterScript.Run(ctx, h.rdb, []string{h.key}, ceilMilli(mark)).Err(); err != nil {
		return fmt.Errorf("workerid: store %s: %w", h.key, err)
	}
	return nil
}

// ceilMilli rounds up: the mark is an instant before which every ID lies, so
// rounding down could let a new generator reissue the last millisecond.
func ceilMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}
