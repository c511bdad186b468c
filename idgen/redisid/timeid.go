package redisid

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The TIME layout: 1 unused sign bit, 41 bits of milliseconds since
// 1970-01-01 UTC, 12 bits of logical shard, 10 bits of sequence.
const (
	TimeBits     = 41
	ShardBits    = 12
	SequenceBits = 10

	MaxShard    = 1<<ShardBits - 1    // 4095
	MaxSequence = 1<<SequenceBits - 1 // 1023
	MaxNodes    = 1 << SequenceBits   // 1024: every node needs at least one sequence value
	MaxMillis   = 1<<TimeBits - 1     // 2039-09-07T15:47:35.551Z
)

// End is the last instant the TIME layout can represent:
// 2039-09-07T15:47:35.551Z. From then on Time.Next returns ErrTimeOverflow.
var End = time.UnixMilli(MaxMillis).UTC()

// TimeParts are the fields of an ID of the TIME layout.
type TimeParts struct {
	Time     time.Time // the Redis server's clock, to the millisecond (UTC)
	Millis   int64     // milliseconds since 1970-01-01 UTC
	Shard    int64     // logical shard, 0..4095
	Sequence int64     // sequence within the millisecond, 0..1023
}

// Parse splits an ID of the TIME layout into its fields. It returns ErrBadID
// for a negative id.
func Parse(id int64) (TimeParts, error) {
	if id < 0 {
		return TimeParts{}, fmt.Errorf("%w: %d is negative", ErrBadID, id)
	}
	ms := id >> (ShardBits + SequenceBits)
	return TimeParts{
		Time:     time.UnixMilli(ms).UTC(),
		Millis:   ms,
		Shard:    id >> SequenceBits & MaxShard,
		Sequence: id & MaxSequence,
	}, nil
}

// FromReply turns the 4-tuple a TIME script answers — Redis TIME's seconds
// and microseconds, the shard and the sequence — into the ID
// (seconds*1000 + microseconds/1000) << 22 | shard << 10 | sequence.
// It is the client half of any script of that shape (hengyunabc's
// redis-id-generator returns the same tuple). It returns ErrBadID if a field
// is out of range and ErrTimeOverflow past End.
func FromReply(seconds, microseconds, shard, sequence int64) (int64, error) {
	switch {
	case seconds < 0 || microseconds < 0 || microseconds >= 1_000_000:
		return 0, fmt.Errorf("%w: time %d s %d µs", ErrBadID, seconds, microseconds)
	case shard < 0 || shard > MaxShard:
		return 0, fmt.Errorf("%w: %w: %d", ErrBadID, ErrBadShard, shard)
	case sequence < 0 || sequence > MaxSequence:
		return 0, fmt.Errorf("%w: sequence %d", ErrBadID, sequence)
	case seconds > MaxMillis/1000:
		return 0, ErrTimeOverflow
	}
	ms := seconds*1000 + microseconds/1000
	if ms > MaxMillis {
		return 0, ErrTimeOverflow
	}
	return ms<<(ShardBits+SequenceBits) | shard<<SequenceBits | sequence, nil
}

// TimeNode is one Redis node of the TIME scheme. Every client must give each
// node the same Index: node Index issues the sequence values congruent to
// Index modulo the node count.
type TimeNode struct {
	Client redis.UniversalClient
	Index  int
}

// Nodes numbers clients 0, 1, … in order, for NewTime.
func Nodes(clients ...redis.UniversalClient) []TimeNode {
	ns := make([]TimeNode, len(clients))
	for i, c := range clients {
		ns[i] = TimeNode{Client: c, Index: i}
	}
	return ns
}

// TimeOption configures a Time client.
type TimeOption func(*timeOptions)

type timeOptions struct {
	prefix       string
	maxClockBack time.Duration
	count        int
}

// DefaultTimePrefix and LegacyTimePrefix start the TIME scheme's keys: tag
// t uses DefaultTimePrefix+"{t}:seq" and DefaultTimePrefix+"{t}:last", or the
// keys under LegacyTimePrefix (those of coordkit versions before the
// "coordkit:" key prefix) while LegacyTimePrefix+"{t}:last" exists. See
// "Redis keys" in the package documentation.
const (
	DefaultTimePrefix = "coordkit:id:time:"
	LegacyTimePrefix  = "redisid:time:"
)

// WithTimeKeyPrefix sets the prefix of the TIME scheme's keys: tag t uses
// prefix+"{t}:seq" and prefix+"{t}:last", and no other keys. Default:
// DefaultTimePrefix (with the legacy keys kept for the tags that have them).
// It must not be empty or contain a brace.
func WithTimeKeyPrefix(prefix string) TimeOption {
	return func(o *timeOptions) { o.prefix = prefix }
}

// WithMaxClockBack sets how far a node's clock may be behind its last
// millisecond for the tag before the node counts as failed: up to d, Next
// tries the other nodes and then waits for the clock to catch up. Default:
// 10ms.
func WithMaxClockBack(d time.Duration) TimeOption {
	return func(o *timeOptions) { o.maxClockBack = d }
}

// WithNodeCount sets the total number of nodes N of the deployment when this
// client knows only some of them (indexes must still be in [0, N)). Default:
// the number of nodes given to NewTime.
func WithNodeCount(n int) TimeOption { return func(o *timeOptions) { o.count = n } }

// Time issues IDs of the TIME layout with one Lua script per ID on one of
// several Redis nodes; it moves to the next node when one fails, is busy or
// its clock went back. It is safe for concurrent use.
type Time struct {
	nodes []TimeNode
	o     timeOptions
	cur   atomic.Int64 // position in nodes of the node tried first
}

// NewTime returns a client over nodes. It does no I/O. It returns ErrBadNode
// for no nodes, more than MaxNodes, or an index outside [0, count) or used
// twice, and ErrBadOption for a negative WithMaxClockBack.
func NewTime(nodes []TimeNode, opts ...TimeOption) (*Time, error) {
	o := timeOptions{prefix: DefaultTimePrefix, maxClockBack: 10 * time.Millisecond, count: len(nodes)}
	for _, opt := range opts {
		opt(&o)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no nodes", ErrBadNode)
	}
	if o.count < len(nodes) || o.count > MaxNodes {
		return nil, fmt.Errorf("%w: node count %d (have %d nodes, at most %d)", ErrBadNode, o.count, len(nodes), MaxNodes)
	}
	if o.prefix == "" || strings.ContainsAny(o.prefix, "{}") {
		return nil, fmt.Errorf("%w: key prefix %q (empty, or with a brace)", ErrBadOption, o.prefix)
	}
	if o.maxClockBack < 0 {
		return nil, fmt.Errorf("%w: max clock back %v", ErrBadOption, o.maxClockBack)
	}
	seen := make(map[int]bool, len(nodes))
	for _, n := range nodes {
		if n.Index < 0 || n.Index >= o.count || seen[n.Index] {
			return nil, fmt.Errorf("%w: index %d of %d nodes", ErrBadNode, n.Index, o.count)
		}
		if n.Client == nil {
			return nil, fmt.Errorf("%w: node %d has no client", ErrBadNode, n.Index)
		}
		seen[n.Index] = true
	}
	return &Time{nodes: append([]TimeNode(nil), nodes...), o: o}, nil
}

// For returns a Generator of IDs for tag and shard. It returns ErrEmptyTag,
// ErrBadTag or ErrBadShard.
func (c *Time) For(tag string, shard int64) (*TimeGen, error) {
	if err := checkTag(tag); err != nil {
		return nil, err
	}
	if shard < 0 || shard > MaxShard {
		return nil, fmt.Errorf("%w: %d", ErrBadShard, shard)
	}
	return &TimeGen{c: c, keys: c.keys(tag), shard: shard}, nil
}

// TimeGen is a Time client bound to one tag and shard.
type TimeGen struct {
	c     *Time
	keys  []string
	shard int64
}

// Next returns the next ID; see Time.Next.
func (g *TimeGen) Next(ctx context.Context) (int64, error) { return g.c.next(ctx, g.keys, g.shard) }

func checkTag(tag string) error {
	if tag == "" {
		return ErrEmptyTag
	}
	if strings.ContainsAny(tag, "{}") {
		return fmt.Errorf("%w: %q", ErrBadTag, tag)
	}
	return nil
}

// keys returns the script's KEYS for tag: the sequence hash and the mark,
// then their legacy names (the same keys again under another prefix).
func (c *Time) keys(tag string) []string {
	base := c.o.prefix + "{" + tag + "}"
	keys := []string{base + ":seq", base + ":last", base + ":seq", base + ":last"}
	if c.o.prefix == DefaultTimePrefix {
		old := LegacyTimePrefix + "{" + tag + "}"
		keys[2], keys[3] = old+":seq", old+":last"
	}
	return keys
}

// Next returns an ID for tag and shard (for instance a user ID modulo 4096,
// so that a user's records share a shard): unique across every node and
// client of the deployment as long as each node index is used by one Redis
// only. It tries the node that last worked, then the others in turn. A busy
// node (its sequence values of this millisecond are taken) or a node whose
// clock is slightly behind (up to WithMaxClockBack) makes it try the others
// and, if all are busy, wait for the next millisecond. It returns ErrEmptyTag,
// ErrBadTag, ErrBadShard, ErrTimeOverflow, ctx's error joined with the last
// node errors, or, when every node failed, errors.Join of one *NodeError per
// node (wrapping ErrClockBackwards, ErrCorrupt or Redis's error).
func (c *Time) Next(ctx context.Context, tag string, shard int64) (int64, error) {
	if err := checkTag(tag); err != nil {
		return 0, err
	}
	if shard < 0 || shard > MaxShard {
		return 0, fmt.Errorf("%w: %d", ErrBadShard, shard)
	}
	return c.next(ctx, c.keys(tag), shard)
}

func (c *Time) next(ctx context.Context, keys []string, shard int64) (int64, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		start := c.cur.Load()
		var errs []error
		wait := time.Duration(-1) // how long until a busy or slightly-behind node can answer
		for i := range int64(len(c.nodes)) {
			pos := (start + i) % int64(len(c.nodes))
			node := c.nodes[pos]
			id, retryIn, err := c.try(ctx, node, keys, shard)
			if err == nil {
				if i > 0 {
					c.cur.CompareAndSwap(start, pos) // stay on the node that works
				}
				return id, nil
			}
			if errors.Is(err, ErrTimeOverflow) {
				return 0, err
			}
			errs = append(errs, &NodeError{Index: node.Index, Err: err})
			if retryIn >= 0 && (wait < 0 || retryIn < wait) {
				wait = retryIn
			}
			if ctx.Err() != nil {
				return 0, errors.Join(append(errs, ctx.Err())...)
			}
		}
		if wait < 0 { // every node failed for good
			return 0, errors.Join(errs...)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return 0, errors.Join(append(errs, ctx.Err())...)
		}
	}
}

// try runs the script on one node. retryIn >= 0 says the node may succeed
// after that long (busy, or clock slightly behind).
func (c *Time) try(ctx context.Context, node TimeNode, keys []string, shard int64) (id int64, retryIn time.Duration, err error) {
	res, err := timeScript.Run(ctx, node.Client, keys, shard, node.Index, c.o.count).Int64Slice()
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) {
			msg := rerr.Error()
			switch {
			case strings.HasPrefix(msg, replyBusy):
				us, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(msg, replyBusy)), 10, 64)
				return 0, time.Duration(max(us, 1)) * time.Microsecond, ErrBusy
			case strings.HasPrefix(msg, replyBackwards):
				ms, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(msg, replyBackwards)), 10, 64)
				behind := time.Duration(ms) * time.Millisecond
				err := fmt.Errorf("%w: %v behind the last millisecond of %s", ErrClockBackwards, behind, keys[1])
				if behind <= c.o.maxClockBack {
					return 0, behind + time.Millisecond, err
				}
				return 0, -1, err
			}
		}
		return 0, -1, classify(keys[0], err)
	}
	if len(res) != 4 {
		return 0, -1, fmt.Errorf("%w: script answered %d values", ErrCorrupt, len(res))
	}
	id, err = FromReply(res[0], res[1], res[2], res[3])
	return id, -1, err
}
