package hashlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/redisfn"
)

// Node is the reentrant hash lock's protocol on one Redis server, without a
// lock.Client around it: no waiting loop, no watchdog, no Pub/Sub. It is
// for callers that coordinate several independent servers themselves
// (package redlock runs it on every master). It uses the key schema and the
// wake-up channels of package lock's documentation and this package's
// scripts, so a Node and a lock.Client with the same prefix see the same
// locks.
//
// A Node is a small value, safe for concurrent use. The zero value uses
// DefaultPrefix.
type Node struct {
	prefix string
	wake   string // WakePrefix(prefix), set by NewNode
}

// NewNode returns a Node whose keys and channels start with prefix
// ("" means DefaultPrefix). It returns an error wrapping ErrInvalid if
// prefix contains '{' or '}' (they would break the hash tag).
func NewNode(prefix string) (Node, error) {
	if strings.ContainsAny(prefix, "{}") {
		return Node{}, fmt.Errorf("%w: key prefix %q contains a brace", ErrInvalid, prefix)
	}
	n := Node{prefix: prefix}
	n.wake = n.wakePfx()
	return n, nil
}

func (n Node) pfx() string {
	if n.prefix == "" {
		return DefaultPrefix
	}
	return n.prefix
}

// wakePfx returns the prefix of the wake-up channels, made once by NewNode.
func (n Node) wakePfx() string {
	if n.wake == "" {
		return WakePrefix(n.pfx())
	}
	return n.wake
}

// NodeKeys are the Redis keys of one lock (see the key schema in package
// lock's documentation).
type NodeKeys struct {
	Lock      string // hash owner -> hold count
	Fence     string // fencing counter, never deleted by a release
	Queue     string // list of queued waiter ids
	Deadlines string // zset waiter id -> deadline
	Metas     string // hash waiter id -> holder metadata (NodeAcquire.Meta)
}

// Keys returns the keys of the lock named key.
func (n Node) Keys(key string) NodeKeys {
	k := LockKeys(n.pfx(), key)
	return NodeKeys{Lock: k[0], Fence: k[1], Queue: k[2], Deadlines: k[3], Metas: k[4]}
}

// WakeChannel returns the Pub/Sub channel on which releases wake the
// waiters of the client with id clientID. Subscribe to it before queueing
// any waiter made by WaiterID(clientID, …).
func (n Node) WakeChannel(clientID string) string { return n.wakePfx() + clientID }

// WaiterID returns the id of a client's seq-th waiter: "<clientID>:<seq>".
// A release that frees the lock publishes this id on
// WakeChannel(clientID). clientID must not be empty nor contain ':' or '|'.
func (n Node) WaiterID(clientID string, seq uint64) string {
	return clientID + ":" + strconv.FormatUint(seq, 10)
}

// NodeAcquire describes one acquisition attempt on one server.
type NodeAcquire struct {
	// Owner is the lock owner (see lock.WithOwner). Required.
	Owner string
	// TTL is the hold's time to live, at least a millisecond.
	TTL time.Duration
	// Waiter, if not empty, is queued (or has its deadline refreshed) when
	// the lock is held by another owner. Make it with WaiterID.
	Waiter string
	// Fair makes a free lock go to the first live waiter only.
	Fair bool
	// WaiterTimeout is how long a queued waiter keeps its place without
	// calling in. Default: DefaultWaiterTimeout.
	WaiterTimeout time.Duration
	// Request, if not empty, identifies this acquisition (unique per call,
	// e.g. a WaiterID): the same acquisition sent again (its reply was
	// lost, and go-redis or the caller retried) answers as the first did
	// and takes no second level. It is also the level's id (NodeRelease's
	// Level). Default: none (a repeated acquisition re-enters).
	Request string
	// Floor, if positive, is the lowest fencing token a fresh acquisition
	// takes, in microseconds since the Unix epoch, used instead of the
	// server's clock (see Fencing in package lock's documentation): a
	// caller that acquires on several servers passes one clock reading to
	// all of them so that their tokens agree. Default: the server's clock.
	Floor int64
	// Meta, if not empty, is stored with a fresh hold (and with a waiter's
	// queue entry, so that a release that grants it the lock stores it
	// too), for operators: see lock.WithHolderMeta. At most MaxMeta bytes.
	Meta string
}

// MaxMeta is the largest holder metadata (NodeAcquire.Meta) in bytes.
const MaxMeta = 512

// NodeResult is the answer of one acquisition attempt.
type NodeResult struct {
	// Held: the owner holds the lock now.
	Held bool
	// Fresh: a new acquisition (false on re-entry). Only with Held.
	Fresh bool
	// Token is the hold's fencing token on this server (re-entry answers
	// the token of the fresh acquisition). Only with Held.
	Token int64
	// Wait is how long the other owner's hold lasts at most (its PTTL), or
	// how long to wait before trying again. Only without Held.
	Wait time.Duration
}

// Server is one Redis server (or Cluster) as a Node runs its scripts
// there: the Runner that chose FCALL or EVALSHA for it, and what sends the
// calls (its client, or a pipeliner of it).
type Server struct {
	Run *redisfn.Runner
	C   redisfn.Caller
}

// NewServer returns the Server of rdb: its calls go straight to rdb, by
// FCALL or EVALSHA as a new Runner of rdb chooses.
func NewServer(rdb redis.UniversalClient) Server {
	return Server{Run: redisfn.NewRunner(rdb, nil), C: rdb}
}

// AsyncServer is a Server whose calls can run without waiting: fn gets
// the answer, once, from any goroutine, and does not block. (Package
// redlock passes its per-master pipeliners.)
type AsyncServer struct {
	Run *redisfn.Runner
	C   redisfn.AsyncCaller
}

// Acquire runs one acquisition (acquire.lua) of key on rdb, in one round
// trip. It returns the Redis error, wrapped, if the script failed; a lock
// held by another owner is a NodeResult without Held, not an error.
func (n Node) Acquire(ctx context.Context, rdb Server, key string, a NodeAcquire) (NodeResult, error) {
	keys, args, err := n.acquireArgs(key, a)
	if err != nil {
		return NodeResult{}, err
	}
	return parseAcquire(keys[0], rdb.Run.Run(ctx, rdb.C, redisfn.Acquire, keys, args...))
}

// AcquireGo is Acquire without waiting: fn gets its result.
func (n Node) AcquireGo(ctx context.Context, rdb AsyncServer, key string, a NodeAcquire, fn func(NodeResult, error)) {
	keys, args, err := n.acquireArgs(key, a)
	if err != nil {
		fn(NodeResult{}, err)
		return
	}
	rdb.Run.Go(ctx, rdb.C, redisfn.Acquire, keys, args, func(cmd *redis.Cmd) { fn(parseAcquire(keys[0], cmd)) })
}

func (n Node) acquireArgs(key string, a NodeAcquire) ([]string, []any, error) {
	if a.WaiterTimeout <= 0 {
		a.WaiterTimeout = DefaultWaiterTimeout
	}
	fair := "0"
	if a.Fair {
		fair = "1"
	}
	if strings.Contains(a.Waiter, "|") || strings.HasPrefix(a.Owner, "\x00") {
		return nil, nil, fmt.Errorf("%w: waiter %q contains '|' or owner %q starts with NUL", ErrInvalid, a.Waiter, a.Owner)
	}
	if len(a.Meta) > MaxMeta {
		return nil, nil, fmt.Errorf("%w: holder metadata of %d bytes (at most %d)", ErrInvalid, len(a.Meta), MaxMeta)
	}
	return LockKeys(n.pfx(), key), []any{a.Owner, max(a.TTL.Milliseconds(), 1), a.Waiter, fair,
		a.WaiterTimeout.Milliseconds(), a.Request, max(a.Floor, 0), a.Meta}, nil
}

func parseAcquire(lockKey string, cmd *redis.Cmd) (NodeResult, error) {
	res, err := cmd.Slice()
	if err != nil {
		return NodeResult{}, fmt.Errorf("lock: obtain %q: %w", lockKey, err)
	}
	if len(res) < 2 {
		return NodeResult{}, fmt.Errorf("lock: obtain %q: unexpected reply %v", lockKey, res)
	}
	st, _ := res[0].(int64)
	v, _ := res[1].(int64)
	if st == 1 && len(res) >= 3 {
		f, _ := res[2].(int64)
		return NodeResult{Held: true, Fresh: f == 1, Token: v}, nil
	}
	return NodeResult{Wait: time.Duration(max(v, 1)) * time.Millisecond}, nil
}

// NodeRelease describes one release on one server.
type NodeRelease struct {
	// Owner is the lock owner. Required.
	Owner string
	// Request identifies this release: the same release sent again within
	// Window gets the first answer instead of dropping a second level.
	// Required, unique per release.
	Request string
	// Window is how long the answer is kept. Default: DefaultReleaseWindow.
	Window time.Duration
	// Level, if not empty, is the Request of the acquisition whose level
	// this drops: only that level is dropped, and not at all if the owner
	// holds the lock through another hold (one taken after this level's
	// was lost). Default: any level of the owner.
	Level string
}

// Release drops one hold level of key on rdb (release.lua); at zero it
// deletes the lock and passes it to the first live queued waiter: a
// lock.Client's waiter is granted it, a Node waiter (WaiterID) is woken on
// its client's wake-up channel. It returns the levels left (0: freed), or -1
// if the owner did not hold the lock.
func (n Node) Release(ctx context.Context, rdb Server, key string, r NodeRelease) (int64, error) {
	keys, args := n.releaseArgs(key, r)
	return parseRelease(keys[0], rdb.Run.Run(ctx, rdb.C, redisfn.Release, keys, args...))
}

// ReleaseGo is Release without waiting: fn gets its result.
func (n Node) ReleaseGo(ctx context.Context, rdb AsyncServer, key string, r NodeRelease, fn func(int64, error)) {
	keys, args := n.releaseArgs(key, r)
	rdb.Run.Go(ctx, rdb.C, redisfn.Release, keys, args, func(cmd *redis.Cmd) { fn(parseRelease(keys[0], cmd)) })
}

func (n Node) releaseArgs(key string, r NodeRelease) ([]string, []any) {
	if r.Window <= 0 {
		r.Window = DefaultReleaseWindow
	}
	k := LockKeys(n.pfx(), key)
	return []string{k[0], k[2], k[3], k[0] + ":r:" + r.Request, k[1], k[4]},
		[]any{r.Owner, r.Window.Milliseconds(), n.wakePfx(), r.Level}
}

func parseRelease(lockKey string, cmd *redis.Cmd) (int64, error) {
	left, err := cmd.Int64()
	if err != nil {
		return 0, fmt.Errorf("lock: release %q: %w", lockKey, err)
	}
	return left, nil
}

// Renew sets key's TTL on rdb again if owner holds it (renew.lua) and, if
// level is not empty, holds it through the hold that has that level (the
// Request of one of its acquisitions): a hold the owner took again after
// losing the one level belongs to is not renewed. It reports whether the
// hold was renewed.
func (n Node) Renew(ctx context.Context, rdb Server, key, owner, level string, ttl time.Duration) (bool, error) {
	k := LockKeys(n.pfx(), key)
	v, err := rdb.Run.Run(ctx, rdb.C, redisfn.Renew, k[:1], owner, max(ttl.Milliseconds(), 1), "", level).Int64()
	if err != nil {
		return false, fmt.Errorf("lock: renew %q: %w", k[0], err)
	}
	return v == 1, nil
}

// Leave takes a waiter out of key's queue on rdb (leave.lua) and, if the
// lock is free, passes it to the next live waiter as Release does. It reports whether
// the waiter was queued.
func (n Node) Leave(ctx context.Context, rdb Server, key, waiter string) (bool, error) {
	k := LockKeys(n.pfx(), key)
	v, err := rdb.Run.Run(ctx, rdb.C, redisfn.Leave, []string{k[0], k[2], k[3], k[1], k[4]}, waiter, n.wakePfx()).Int64()
	if err != nil {
		return false, fmt.Errorf("lock: leave %q: %w", k[0], err)
	}
	return v == 1, nil
}

// NodeHandoff describes the outermost release of a hold that gives the lock
// to another owner in the same step.
type NodeHandoff struct {
	// Owner is the releasing owner. Required.
	Owner string
	// NewOwner is the owner that holds the lock afterwards. Required.
	NewOwner string
	// TTL is the new owner's hold TTL, at least a millisecond.
	TTL time.Duration
	// Level, if not empty, is the Request of the releasing level's
	// acquisition (as NodeRelease's Level).
	Level string
	// NewLevel, if not empty, identifies the new owner's level (as
	// NodeAcquire's Request): a hand-off sent again finds it and answers
	// HandedOver again, and the new owner's acquisition with that Request
	// finds the lock held.
	NewLevel string
	// Request, if not empty, identifies this hand-off as NodeRelease's
	// Request does: its release is remembered for Window, so that the
	// hand-off or a Release with the same Request sent again answers
	// "released" instead of "not held".
	Request string
	// Window is how long the answer is kept. Default: DefaultReleaseWindow.
	Window time.Duration
	// Floor is the new owner's lowest fencing token (NodeAcquire's Floor).
	Floor int64
	// NewMeta is the new owner's holder metadata (NodeAcquire's Meta).
	NewMeta string
}

// Outcomes of a hand-off (NodeHandoffResult.Outcome).
const (
	// HandedOver: NewOwner holds the lock (one level, a fresh token).
	HandedOver = 1
	// HandoffReleased: a waiter of another client was queued, so the lock
	// was released and passed to it instead, as Release does.
	HandoffReleased = 0
	// HandoffNotHeld: Owner did not hold the lock; nothing was done.
	HandoffNotHeld = -1
	// HandoffReentered: Owner holds more than one level; nothing was done.
	HandoffReentered = -2
)

// NodeHandoffResult is the answer of one hand-off.
type NodeHandoffResult struct {
	// Outcome is one of HandedOver, HandoffReleased, HandoffNotHeld,
	// HandoffReentered.
	Outcome int
	// Token is NewOwner's fencing token. Only with HandedOver.
	Token int64
}

// Handoff releases Owner's single hold level on key on rdb and makes
// NewOwner the holder in the same script (handoff.lua): the lock is never
// free in between, and no waiter is woken. When a live waiter is queued
// for the key, the lock goes to that waiter instead (HandoffReleased), so
// hand-offs between one caller's owners never starve the queue.
func (n Node) Handoff(ctx context.Context, rdb Server, key string, h NodeHandoff) (NodeHandoffResult, error) {
	keys, args, err := n.handoffArgs(key, h)
	if err != nil {
		return NodeHandoffResult{}, err
	}
	return parseHandoff(keys[0], rdb.Run.Run(ctx, rdb.C, redisfn.Handoff, keys, args...))
}

// HandoffGo is Handoff without waiting: fn gets its result.
func (n Node) HandoffGo(ctx context.Context, rdb AsyncServer, key string, h NodeHandoff, fn func(NodeHandoffResult, error)) {
	keys, args, err := n.handoffArgs(key, h)
	if err != nil {
		fn(NodeHandoffResult{}, err)
		return
	}
	rdb.Run.Go(ctx, rdb.C, redisfn.Handoff, keys, args, func(cmd *redis.Cmd) { fn(parseHandoff(keys[0], cmd)) })
}

func (n Node) handoffArgs(key string, h NodeHandoff) ([]string, []any, error) {
	if h.Owner == "" || h.NewOwner == "" || strings.HasPrefix(h.NewOwner, "\x00") {
		return nil, nil, fmt.Errorf("%w: hand-off from owner %q to owner %q", ErrInvalid, h.Owner, h.NewOwner)
	}
	if len(h.NewMeta) > MaxMeta {
		return nil, nil, fmt.Errorf("%w: holder metadata of %d bytes (at most %d)", ErrInvalid, len(h.NewMeta), MaxMeta)
	}
	if h.Window <= 0 {
		h.Window = DefaultReleaseWindow
	}
	keys := LockKeys(n.pfx(), key)
	if h.Request != "" {
		keys = append(keys, keys[0]+":r:"+h.Request)
	}
	return keys, []any{h.Owner, h.NewOwner, max(h.TTL.Milliseconds(), 1), n.wakePfx(), h.Level, h.NewLevel,
		max(h.Floor, 0), h.Window.Milliseconds(), h.NewMeta}, nil
}

func parseHandoff(lockKey string, cmd *redis.Cmd) (NodeHandoffResult, error) {
	res, err := cmd.Int64Slice()
	if err != nil {
		return NodeHandoffResult{}, fmt.Errorf("lock: hand off %q: %w", lockKey, err)
	}
	switch {
	case len(res) == 2 && res[0] == HandedOver:
		return NodeHandoffResult{Outcome: HandedOver, Token: res[1]}, nil
	case len(res) == 1 && res[0] >= HandoffReentered && res[0] <= HandoffReleased:
		return NodeHandoffResult{Outcome: int(res[0])}, nil
	}
	return NodeHandoffResult{}, fmt.Errorf("lock: hand off %q: unexpected reply %v", lockKey, res)
}
