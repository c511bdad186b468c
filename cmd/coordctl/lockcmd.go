package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/etcd/etcdlock"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
	"github.com/coordkit/coordkit/zklock"
)

func init() {
	register(command{name: "lock inspect", summary: "show a lock's holder, TTL, fencing token and waiters (hash, simple, redlock, zk, etcd)", run: lockInspect})
	register(command{name: "lock release", summary: "force-release a lock of any kind (with --force)", run: lockRelease})
}

// Lock kinds, as --kind names them.
const (
	kindHash    = "hash"    // lock.Client: the reentrant hash lock
	kindSimple  = "simple"  // lock.Simple: SET NX PX
	kindRedlock = "redlock" // redlock.Client: the hash lock on N masters
	kindZK      = "zk"      // zklock.Client: ephemeral sequential znodes
)

const kindUsage = "the lock's kind: hash (lock.Client), simple (lock.Simple), redlock (redlock.Client; --redis lists its masters), zk (zklock.Client) or etcd (etcdlock.Client)"

// lockFlags are the flags of both lock commands.
type lockFlags struct {
	c          conn
	kind       *string
	prefix     *string
	root       *string
	etcdPrefix *string
}

func addLockFlags(fs *flag.FlagSet, e *env) *lockFlags {
	f := &lockFlags{}
	f.kind = fs.String("kind", kindHash, kindUsage)
	f.c.addRedis(fs, e)
	f.c.addZK(fs, e)
	f.c.addEtcd(fs, e)
	f.prefix = fs.String("prefix", "", "the lock clients' Redis key prefix (default "+lock.DefaultPrefix+", for redlock "+redlock.DefaultPrefix+")")
	f.root = fs.String("zk-root", zklock.DefaultRoot, "zklock's root path (--kind zk)")
	f.etcdPrefix = fs.String("etcd-prefix", etcdlock.DefaultPrefix, "etcdlock's key prefix (--kind etcd; etcdlock.WithPrefix)")
	return f
}

// check validates the flags and the one positional KEY.
func (f *lockFlags) check(pos []string) (string, error) {
	if len(pos) != 1 || pos[0] == "" {
		return "", usagef("want exactly one non-empty KEY")
	}
	switch *f.kind {
	case kindHash, kindSimple:
		if *f.prefix == "" {
			*f.prefix = lock.DefaultPrefix
		}
	case kindRedlock:
		if *f.prefix == "" {
			*f.prefix = redlock.DefaultPrefix
		}
	case kindZK:
		if _, err := escapeZKKey(pos[0]); err != nil {
			return "", usagef("%v", err)
		}
	case kindEtcd:
		if strings.Contains(pos[0], "/") || len(pos[0]) > etcdlock.MaxKeyLen {
			return "", usagef("an etcd lock's key may not hold '/' nor be longer than %d bytes", etcdlock.MaxKeyLen)
		}
		if *f.etcdPrefix == "" || strings.HasSuffix(*f.etcdPrefix, "/") {
			return "", usagef("--etcd-prefix %q: empty, or ending with '/'", *f.etcdPrefix)
		}
	default:
		return "", usagef("unknown --kind %q: want hash, simple, redlock, zk or etcd", *f.kind)
	}
	if *f.kind != kindZK && *f.kind != kindEtcd && (strings.ContainsAny(*f.prefix, "{}") || strings.HasPrefix(pos[0], "}")) {
		return "", usagef("a prefix may not contain braces, nor a key begin with '}'")
	}
	return pos[0], nil
}

func lockInspect(e *env, args []string) error {
	fs := newFlags(e, "lock inspect", "KEY", "Shows the state of the lock KEY: for a Redis hash lock (lock.Client) its owners\n"+
		"and hold counts, TTL, the hold's fencing token and the fencing counter, the\n"+
		"queued waiters with how long each keeps its place, and a grant in flight; for\n"+
		"lock.Simple its holder value, TTL and token; for Redlock every master side by\n"+
		"side and whether an owner holds a quorum; for zklock the znodes in line, each\n"+
		"with its session and owner; for etcdlock the hold keys in line, each with its\n"+
		"owner, etcd lease and token, and the holder's lease's TTL. TTLs are in\n"+
		"milliseconds.")
	f := addLockFlags(fs, e)
	asJSON := addJSON(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	key, err := f.check(pos)
	if err != nil {
		return err
	}
	var v interface{ print(io.Writer) }
	switch *f.kind {
	case kindHash:
		v, err = view(inspectHash(e, f, key))
	case kindSimple:
		v, err = view(inspectSimple(e, f, key))
	case kindRedlock:
		v, err = view(inspectRedlock(e, f, key))
	case kindZK:
		v, err = view(inspectZK(e, f, key))
	case kindEtcd:
		v, err = view(inspectEtcd(e, f, key))
	}
	if v == nil {
		return err
	}
	if *asJSON {
		if jerr := writeJSON(e.out, v); jerr != nil {
			return jerr
		}
	} else {
		v.print(e.out)
	}
	return err // a Redlock whose quorum did not answer prints what did, then fails
}

// view returns v as a printable view, or nil if there is none (no typed nil).
func view[V interface {
	*hashView | *simpleView | *redlockView | *zkView | *etcdView
	print(io.Writer)
}](v V, err error) (interface{ print(io.Writer) }, error) {
	if v == nil {
		return nil, err
	}
	return v, err
}

func lockRelease(e *env, args []string) error {
	fs := newFlags(e, "lock release", "KEY --force",
		"Releases the lock KEY whoever holds it. The fencing counter is kept, so the next\n"+
			"holder's token is still larger.\n"+
			"  hash:    deletes the hold and grants the lock to the next queued waiter;\n"+
			"           the former holder learns at its next renewal (TTL/3).\n"+
			"  simple:  deletes the key; the holder learns at its next renewal.\n"+
			"  redlock: the hash release on every master; the holder learns at its next renewal.\n"+
			"  zk:      deletes the holder's znode; the next in line holds the lock. The holder\n"+
			"           is not told: its Release returns lock.ErrNotHeld.\n"+
			"  etcd:    deletes the holder's hold key; the next in line holds the lock. The\n"+
			"           holder is not told: its Release returns lock.ErrNotHeld.\n"+
			"A holder that is still running loses mutual exclusion: only fencing tokens\n"+
			"checked by the protected resource stop its writes.")
	f := addLockFlags(fs, e)
	force := fs.Bool("force", false, "required: confirm that the holder may still be running")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	key, err := f.check(pos)
	if err != nil {
		return err
	}
	if !*force {
		return usagef("refusing without --force: the holder, if alive, would lose mutual exclusion")
	}
	switch *f.kind {
	case kindHash:
		return releaseHash(e, f, key)
	case kindSimple:
		return releaseSimple(e, f, key)
	case kindRedlock:
		return releaseRedlock(e, f, key)
	case kindEtcd:
		return releaseEtcd(e, f, key)
	default:
		return releaseZK(e, f, key)
	}
}

// --- the Redis hash lock (lock.Client) ---

func lockClient(e *env, c *conn, prefix string) (*lock.Client, redis.UniversalClient, func(), error) {
	ctx, cancel := context.WithTimeout(e.ctx, c.timeout)
	defer cancel()
	rdb, err := c.redisClient(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	lc := lock.New(rdb, lock.WithPrefix(prefix))
	if err := lc.Err(); err != nil {
		lc.Close()
		rdb.Close()
		return nil, nil, nil, usagef("%v", err)
	}
	return lc, rdb, func() { lc.Close(); rdb.Close() }, nil
}

// hashView is the state of a hash lock (lock.Info), for text and JSON.
type hashView struct {
	Kind      string       `json:"kind"`
	Key       string       `json:"key"`
	RedisKey  string       `json:"redis_key"`
	Held      bool         `json:"held"`
	Owners    []ownerView  `json:"owners"`
	Meta      string       `json:"meta,omitempty"` // the holder's metadata (lock.WithHolderMeta)
	TTLms     int64        `json:"ttl_ms"`
	HoldToken int64        `json:"hold_token"`
	Fence     int64        `json:"fence"`
	Granted   *waiterView  `json:"granted"`
	Waiters   []waiterView `json:"waiters"`
}

type ownerView struct {
	Owner string `json:"owner"`
	Holds int64  `json:"holds"`
}

// waiterView is one queued waiter, parsed from its queue entry
// ("<client id>:<seq>", with "|<grant ms>|<owner>" for a lock.Client
// waiter; a Redlock waiter has only the id), whose encoding stays inside.
type waiterView struct {
	// Client is the id of the client the waiter waits in (one per
	// lock.Client or redlock.Client), Seq its number among that client's
	// waiters.
	Client     string `json:"client"`
	Seq        uint64 `json:"seq"`
	Owner      string `json:"owner,omitempty"`
	GrantTTLms int64  `json:"grant_ttl_ms,omitempty"`
	Meta       string `json:"meta,omitempty"`
	// ExpiresMs is how long the waiter keeps its place without calling in
	// again (its deadline in Redis time, less now); -1: unknown.
	ExpiresMs int64 `json:"expires_in_ms"`
}

func parseEntry(entry string) waiterView {
	w := waiterView{ExpiresMs: -1}
	id := entry
	if parts := strings.SplitN(entry, "|", 3); len(parts) == 3 {
		id, w.Owner = parts[0], parts[2]
		w.GrantTTLms, _ = strconv.ParseInt(parts[1], 10, 64)
	}
	w.Client = id
	if i := strings.LastIndexByte(id, ':'); i > 0 {
		if seq, err := strconv.ParseUint(id[i+1:], 10, 64); err == nil {
			w.Client, w.Seq = id[:i], seq
		}
	}
	return w
}

// Name is how the text output and the page name the waiter.
func (w waiterView) Name() string {
	if w.Seq == 0 {
		return "client " + w.Client
	}
	return fmt.Sprintf("client %s #%d", w.Client, w.Seq)
}

func newHashView(info lock.Info, redisKey string) *hashView {
	v := &hashView{Kind: kindHash, Key: info.Key, RedisKey: redisKey, Held: info.Held(),
		TTLms: info.TTL.Milliseconds(), HoldToken: info.HoldToken, Fence: info.Token,
		Owners: []ownerView{}, Waiters: []waiterView{}, Meta: info.Meta}
	for o, n := range info.Owners {
		v.Owners = append(v.Owners, ownerView{o, n})
	}
	sort.Slice(v.Owners, func(i, j int) bool { return v.Owners[i].Owner < v.Owners[j].Owner })
	for i, entry := range info.Waiters {
		w := parseEntry(entry)
		if i < len(info.WaiterTTLs) {
			w.ExpiresMs = info.WaiterTTLs[i].Milliseconds()
		}
		if i < len(info.WaiterMetas) {
			w.Meta = info.WaiterMetas[i]
		}
		v.Waiters = append(v.Waiters, w)
	}
	if info.Granted != "" {
		g := parseEntry(info.Granted)
		v.Granted = &g
	}
	return v
}

func (v *hashView) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "key:\t%s\n", v.Key)
	fmt.Fprintf(tw, "kind:\thash lock (lock.Client), Redis key %s\n", v.RedisKey)
	fmt.Fprintf(tw, "state:\t%s\n", heldWord(v.Held))
	for _, o := range v.Owners {
		fmt.Fprintf(tw, "owner:\t%s (hold count %d)\n", o.Owner, o.Holds)
	}
	if v.Meta != "" {
		fmt.Fprintf(tw, "holder:\t%s\n", v.Meta)
	}
	if v.Held {
		fmt.Fprintf(tw, "ttl:\t%d ms\n", v.TTLms)
		fmt.Fprintf(tw, "hold token:\t%d\n", v.HoldToken)
	}
	fmt.Fprintf(tw, "fencing token:\t%d (last issued)\n", v.Fence)
	if v.Granted != nil {
		fmt.Fprintf(tw, "grant in flight:\t%s, to owner %s: not yet taken by its waiter\n", v.Granted.Name(), v.Granted.Owner)
	}
	printWaiters(tw, v.Waiters)
	tw.Flush()
}

func printWaiters(tw io.Writer, ws []waiterView) {
	if len(ws) == 0 {
		fmt.Fprintf(tw, "waiters:\tnone\n")
	}
	for i, w := range ws {
		fmt.Fprintf(tw, "waiter %d:\t%s", i+1, w.Name())
		if w.Owner != "" {
			fmt.Fprintf(tw, ", owner %s, grant TTL %d ms", w.Owner, w.GrantTTLms)
		}
		if w.Meta != "" {
			fmt.Fprintf(tw, ", holder %q", w.Meta)
		}
		if w.ExpiresMs >= 0 {
			fmt.Fprintf(tw, ", keeps its place for %d ms\n", w.ExpiresMs)
		} else {
			fmt.Fprintf(tw, ", deadline unknown\n")
		}
	}
}

func heldWord(held bool) string {
	if held {
		return "held"
	}
	return "free"
}

func inspectHash(e *env, f *lockFlags, key string) (*hashView, error) {
	lc, rdb, closeAll, err := lockClient(e, &f.c, *f.prefix)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(e.ctx, f.c.timeout)
	defer cancel()
	info, err := lc.Inspect(ctx, key)
	if err != nil {
		return nil, err
	}
	v := newHashView(info, *f.prefix+"{"+key+"}")
	if !v.Held {
		// A lock.Simple hold of the same name lives under another key.
		if n, _ := rdb.Exists(ctx, simpleKey(*f.prefix, key)).Result(); n == 1 {
			fmt.Fprintf(e.errOut, "coordctl lock inspect: note: a lock.Simple holds %q: see --kind simple\n", key)
		}
	}
	return v, nil
}

func releaseHash(e *env, f *lockFlags, key string) error {
	lc, _, closeAll, err := lockClient(e, &f.c, *f.prefix)
	if err != nil {
		return err
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(e.ctx, f.c.timeout)
	defer cancel()
	held, err := lc.ForceRelease(ctx, key)
	if err != nil {
		return err
	}
	printReleased(e.out, key, held)
	return nil
}

func printReleased(w io.Writer, key string, held bool) {
	if held {
		fmt.Fprintf(w, "released %s\n", key)
	} else {
		fmt.Fprintf(w, "%s was not held\n", key)
	}
}

// --- lock.Simple ---

// simpleKey is lock.Simple's key for key (package lock's doc: P simple:{key}).
func simpleKey(prefix, key string) string { return prefix + "simple:{" + key + "}" }

// simpleView is the state of a lock.Simple lock.
type simpleView struct {
	Kind     string `json:"kind"`
	Key      string `json:"key"`
	RedisKey string `json:"redis_key"`
	Held     bool   `json:"held"`
	// Holder is the random value its Obtain call set (one per call).
	Holder string `json:"holder,omitempty"`
	TTLms  int64  `json:"ttl_ms"`
	// Fence is the fencing counter: while held, the hold's token (a release
	// moves it on by one).
	Fence int64 `json:"fence"`
}

func (v *simpleView) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "key:\t%s\n", v.Key)
	fmt.Fprintf(tw, "kind:\tsimple lock (lock.Simple), Redis key %s\n", v.RedisKey)
	fmt.Fprintf(tw, "state:\t%s\n", heldWord(v.Held))
	if v.Held {
		fmt.Fprintf(tw, "holder:\t%s (the value of its Obtain call)\n", v.Holder)
		fmt.Fprintf(tw, "ttl:\t%d ms\n", v.TTLms)
		fmt.Fprintf(tw, "hold token:\t%d\n", v.Fence)
	} else {
		fmt.Fprintf(tw, "fencing token:\t%d (last issued, or one past it after a release)\n", v.Fence)
	}
	fmt.Fprintf(tw, "waiters:\tnot queued (lock.Simple waiters poll)\n")
	tw.Flush()
}

func readSimple(ctx context.Context, rdb redis.UniversalClient, prefix, key string) (*simpleView, error) {
	k := simpleKey(prefix, key)
	pipe := rdb.Pipeline()
	val := pipe.Get(ctx, k)
	ttl := pipe.PTTL(ctx, k)
	fence := pipe.Get(ctx, k+":fence")
	pipe.Exec(ctx) // each reply is checked below
	v := &simpleView{Kind: kindSimple, Key: key, RedisKey: k}
	switch s, err := val.Result(); {
	case err == nil:
		v.Held, v.Holder = true, s
	case !errors.Is(err, redis.Nil):
		return nil, fmt.Errorf("read %s: %w", k, err)
	}
	if d, err := ttl.Result(); err == nil && d > 0 {
		v.TTLms = d.Milliseconds()
	}
	if n, err := fence.Int64(); err == nil {
		v.Fence = n
	} else if !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read %s:fence: %w", k, err)
	}
	return v, nil
}

func inspectSimple(e *env, f *lockFlags, key string) (*simpleView, error) {
	ctx, cancel := context.WithTimeout(e.ctx, f.c.timeout)
	defer cancel()
	rdb, err := f.c.redisClient(ctx)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	return readSimple(ctx, rdb, *f.prefix, key)
}

// simpleForceRelease deletes a lock.Simple key if it is one (a string):
// the fencing counter is kept, and the holder's own release, which finds
// neither its value nor a release marker of its own, answers "not held".
var simpleForceRelease = redis.NewScript(`
if redis.call('type', KEYS[1])['ok'] ~= 'string' then
  if redis.call('exists', KEYS[1]) == 1 then return redis.error_reply(KEYS[1] .. ' is not a lock.Simple key') end
  return 0
end
return redis.call('del', KEYS[1])`)

func releaseSimple(e *env, f *lockFlags, key string) error {
	ctx, cancel := context.WithTimeout(e.ctx, f.c.timeout)
	defer cancel()
	rdb, err := f.c.redisClient(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	n, err := simpleForceRelease.Run(ctx, rdb, []string{simpleKey(*f.prefix, key)}).Int()
	if err != nil {
		return fmt.Errorf("force-release %q: %w", key, err)
	}
	printReleased(e.out, key, n == 1)
	return nil
}

// --- Redlock ---

// redlockView is a Redlock key on every master, and the quorum's answer.
type redlockView struct {
	Kind     string `json:"kind"`
	Key      string `json:"key"`
	RedisKey string `json:"redis_key"`
	Quorum   int    `json:"quorum"`
	// Holder is the owner holding the lock on a quorum of masters ("" if
	// none), Token the largest hold token those masters recorded, On how
	// many masters it holds.
	Holder  string         `json:"holder"`
	Token   int64          `json:"token"`
	On      int            `json:"on"`
	Masters []redlockEntry `json:"masters"`
}

type redlockEntry struct {
	Addr  string    `json:"addr"`
	Error string    `json:"error,omitempty"`
	State *hashView `json:"state,omitempty"`
}

func (v *redlockView) print(w io.Writer) {
	fmt.Fprintf(w, "key:      %s\n", v.Key)
	fmt.Fprintf(w, "kind:     Redlock over %d masters (quorum %d), Redis key %s on each\n", len(v.Masters), v.Quorum, v.RedisKey)
	if v.Holder != "" {
		fmt.Fprintf(w, "state:    held by %s on %d of %d masters (a quorum), token %d\n", v.Holder, v.On, len(v.Masters), v.Token)
	} else {
		fmt.Fprintf(w, "state:    free: no owner holds a quorum\n")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MASTER\tSTATE\tOWNER\tTTL\tHOLD TOKEN\tFENCE\tWAITERS")
	for _, m := range v.Masters {
		if m.State == nil {
			fmt.Fprintf(tw, "%s\tunreachable\t-\t-\t-\t-\t-\n", m.Addr)
			continue
		}
		s := m.State
		owner, ttl, tok := "-", "-", "-"
		if s.Held {
			var os []string
			for _, o := range s.Owners {
				os = append(os, fmt.Sprintf("%s (%d)", o.Owner, o.Holds))
			}
			owner, ttl, tok = strings.Join(os, ", "), fmt.Sprintf("%d ms", s.TTLms), fmt.Sprint(s.HoldToken)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", m.Addr, heldWord(s.Held), owner, ttl, tok, s.Fence, len(s.Waiters))
	}
	tw.Flush()
}

// redlockMasters connects to each --redis address as an independent master
// (no PING: a master that does not answer is reported as such).
func redlockMasters(f *lockFlags) ([]string, []*redis.Client, error) {
	addrs, err := f.c.redisAddrs()
	if err != nil {
		return nil, nil, err
	}
	f.c.logRedis()
	var ms []*redis.Client
	for _, a := range addrs {
		o := &redis.Options{Addr: a, Password: f.c.password, DialTimeout: f.c.timeout, ReadTimeout: f.c.timeout,
			MaxRetries: -1, ContextTimeoutEnabled: true}
		ms = append(ms, redis.NewClient(o))
	}
	return addrs, ms, nil
}

// onMasters runs fn on every master at once, each bounded by the timeout.
func onMasters[T any](e *env, f *lockFlags, ms []*redis.Client, fn func(ctx context.Context, lc *lock.Client) (T, error)) ([]T, []error) {
	out, errs := make([]T, len(ms)), make([]error, len(ms))
	done := make(chan int, len(ms))
	for i, m := range ms {
		go func() { // owned here: every one sends on done, which is buffered to N
			ctx, cancel := context.WithTimeout(e.ctx, f.c.timeout)
			defer cancel()
			lc := lock.New(m, lock.WithPrefix(*f.prefix))
			defer lc.Close()
			if err := m.Ping(ctx).Err(); err != nil {
				errs[i] = fmt.Errorf("unreachable: %w", err)
			} else {
				out[i], errs[i] = fn(ctx, lc)
			}
			done <- i
		}()
	}
	for range ms {
		<-done
	}
	return out, errs
}

func inspectRedlock(e *env, f *lockFlags, key string) (*redlockView, error) {
	addrs, ms, err := redlockMasters(f)
	if err != nil {
		return nil, err
	}
	defer closeAll(ms)
	infos, errs := onMasters(e, f, ms, func(ctx context.Context, lc *lock.Client) (lock.Info, error) {
		return lc.Inspect(ctx, key)
	})
	v := &redlockView{Kind: kindRedlock, Key: key, RedisKey: *f.prefix + "{" + key + "}", Quorum: len(ms)/2 + 1}
	votes, tokens := map[string]int{}, map[string]int64{}
	answered := 0
	for i, a := range addrs {
		m := redlockEntry{Addr: a}
		if errs[i] != nil {
			m.Error = errs[i].Error()
		} else {
			answered++
			m.State = newHashView(infos[i], v.RedisKey)
			for o := range infos[i].Owners {
				votes[o]++
				tokens[o] = max(tokens[o], infos[i].HoldToken)
			}
		}
		v.Masters = append(v.Masters, m)
	}
	for o, n := range votes {
		if n >= v.Quorum {
			v.Holder, v.On, v.Token = o, n, tokens[o]
		}
	}
	if v.Holder == "" && answered < v.Quorum {
		return v, fmt.Errorf("only %d of %d masters answered: too few to say the lock is free", answered, len(ms))
	}
	return v, nil
}

func releaseRedlock(e *env, f *lockFlags, key string) error {
	addrs, ms, err := redlockMasters(f)
	if err != nil {
		return err
	}
	defer closeAll(ms)
	held, errs := onMasters(e, f, ms, func(ctx context.Context, lc *lock.Client) (bool, error) {
		return lc.ForceRelease(ctx, key)
	})
	n, failed := 0, 0
	for i, a := range addrs {
		switch {
		case errs[i] != nil:
			failed++
			fmt.Fprintf(e.out, "%s: %v\n", a, errs[i])
		case held[i]:
			n++
			fmt.Fprintf(e.out, "%s: released\n", a)
		default:
			fmt.Fprintf(e.out, "%s: not held\n", a)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%s: %d of %d masters could not be reached: they may still hold it", key, failed, len(ms))
	}
	if n > 0 {
		fmt.Fprintf(e.out, "released %s on %d of %d masters\n", key, n, len(ms))
	} else {
		fmt.Fprintf(e.out, "%s was not held\n", key)
	}
	return nil
}

func closeAll(ms []*redis.Client) {
	for _, m := range ms {
		m.Close()
	}
}

// --- zklock ---

// escapeZKKey is zklock's escaping of a key into one znode name (zklock's
// doc: url.PathEscape, with "." and ".." escaped as well).
func escapeZKKey(key string) (string, error) {
	if key == "" || len(key) > zklock.MaxKeyLen {
		return "", fmt.Errorf("zklock keys are 1 to %d bytes", zklock.MaxKeyLen)
	}
	switch key {
	case ".":
		return "%2E", nil
	case "..":
		return "%2E%2E", nil
	}
	return url.PathEscape(key), nil
}

// zkView is a zklock key's line of znodes.
type zkView struct {
	Kind   string   `json:"kind"`
	Key    string   `json:"key"`
	Path   string   `json:"path"`
	Held   bool     `json:"held"`
	Nodes  []zkNode `json:"nodes"`
	Holder string   `json:"holder,omitempty"` // the first holder's owner
}

// zkNode is one lock node: its kind (lock, write, read), sequence, whether
// it holds the lock, its session (ephemeralOwner), its data (the owner its
// Obtain's ctx carried) and its creation zxid (the fencing token).
type zkNode struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Seq     int64  `json:"seq"`
	Holds   bool   `json:"holds"`
	Session string `json:"session"`
	Owner   string `json:"owner"`
	Token   int64  `json:"token"`
}

func (v *zkView) print(w io.Writer) {
	fmt.Fprintf(w, "key:     %s\n", v.Key)
	fmt.Fprintf(w, "kind:    ZooKeeper lock (zklock), znode %s\n", v.Path)
	switch {
	case !v.Held:
		fmt.Fprintf(w, "state:   free\n")
	default:
		var hs []string
		for _, n := range v.Nodes {
			if n.Holds {
				hs = append(hs, fmt.Sprintf("%s (session %s, token %d)", ownerOrNone(n.Owner), n.Session, n.Token))
			}
		}
		fmt.Fprintf(w, "state:   held by %s\n", strings.Join(hs, ", "))
	}
	if len(v.Nodes) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tNODE\tKIND\tSTATE\tSESSION\tOWNER\tTOKEN")
	for i, n := range v.Nodes {
		st := "waits"
		if n.Holds {
			st = "holds"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\n", i+1, n.Name, n.Kind, st, n.Session, ownerOrNone(n.Owner), n.Token)
	}
	tw.Flush()
}

func ownerOrNone(o string) string {
	if o == "" {
		return "(no owner)"
	}
	return o
}

// readZK lists the key's lock nodes in sequence order and marks the holders:
// the first node if it is exclusive (lock, write, or a kind zklock does not
// know), else every reader before the first exclusive node.
func readZK(zc *zk.Conn, root, key string) (*zkView, error) {
	esc, err := escapeZKKey(key)
	if err != nil {
		return nil, err
	}
	parent := root + "/" + esc
	v := &zkView{Kind: kindZK, Key: key, Path: parent, Nodes: []zkNode{}}
	names, _, err := zc.Children(parent)
	if errors.Is(err, zk.ErrNoNode) {
		return v, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", parent, err)
	}
	for _, name := range names {
		n, ok := parseZKNode(name)
		if !ok {
			continue
		}
		data, st, err := zc.Get(parent + "/" + name)
		if errors.Is(err, zk.ErrNoNode) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read %s/%s: %w", parent, name, err)
		}
		n.Owner, n.Token, n.Session = string(data), st.Czxid, fmt.Sprintf("0x%x", st.EphemeralOwner)
		v.Nodes = append(v.Nodes, n)
	}
	sort.Slice(v.Nodes, func(i, j int) bool { return v.Nodes[i].Seq < v.Nodes[j].Seq })
	for i := range v.Nodes {
		if v.Nodes[i].Kind != "read" {
			v.Nodes[i].Holds = i == 0
			break
		}
		v.Nodes[i].Holds = true // a reader with no exclusive node before it
	}
	for _, n := range v.Nodes {
		if n.Holds {
			v.Held = true
			if v.Holder == "" {
				v.Holder = ownerOrNone(n.Owner)
			}
		}
	}
	return v, nil
}

// parseZKNode parses "<prefix><kind>-<10-digit sequence>" (zklock's
// "_c_<uuid>-<kind>-<seq>", or another client's node).
func parseZKNode(name string) (zkNode, bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || len(name)-i-1 < 10 {
		return zkNode{}, false
	}
	var seq int64
	if _, err := fmt.Sscan(name[i+1:], &seq); err != nil {
		return zkNode{}, false
	}
	rest := name[:i]
	return zkNode{Name: name, Seq: seq, Kind: rest[strings.LastIndexByte(rest, '-')+1:]}, true
}

func zkFor(e *env, f *lockFlags) (*zk.Conn, error) {
	ctx, cancel := context.WithTimeout(e.ctx, f.c.timeout+time.Second)
	defer cancel()
	return f.c.zkConn(ctx)
}

func inspectZK(e *env, f *lockFlags, key string) (*zkView, error) {
	zc, err := zkFor(e, f)
	if err != nil {
		return nil, err
	}
	defer zc.Close()
	return readZK(zc, *f.root, key)
}

func releaseZK(e *env, f *lockFlags, key string) error {
	zc, err := zkFor(e, f)
	if err != nil {
		return err
	}
	defer zc.Close()
	v, err := readZK(zc, *f.root, key)
	if err != nil {
		return err
	}
	n := 0
	for _, node := range v.Nodes {
		if !node.Holds {
			continue
		}
		switch err := zc.Delete(v.Path+"/"+node.Name, -1); {
		case err == nil:
			n++
			fmt.Fprintf(e.out, "deleted %s (owner %s, session %s, token %d)\n", node.Name, ownerOrNone(node.Owner), node.Session, node.Token)
		case errors.Is(err, zk.ErrNoNode): // released meanwhile
		default:
			return fmt.Errorf("delete %s/%s: %w", v.Path, node.Name, err)
		}
	}
	printReleased(e.out, key, n > 0)
	if n > 0 {
		fmt.Fprintln(e.out, "the former holder is not told: its Release returns lock.ErrNotHeld")
	}
	return nil
}
