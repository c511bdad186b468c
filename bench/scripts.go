package main

// The scripts suite: the ablation behind issue 35's script-time target.
// What Redis spends inside the hash lock's acquire and release (INFO
// commandstats: the µs of FCALL, EVALSHA and EVAL, the commands the
// scripts run included) per uncontended lock+release pair, one pair after
// another on one connection, for the library as shipped and for copies of
// it with one guarantee taken out, against bsm/redislock's two scripts.
// The copies are loaded as libraries of their own ("coordkit_ablate_<n>",
// functions "ab<n>_<name>"); they exist only in this measurement.

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/redisfn"
)

func init() { register(Suite{Name: "scripts", Run: runScriptsSuite}) }

// ablation is one variant of the hash lock's scripts: its library code
// (made from the shipped one by edit) and how a pair calls it.
type ablation struct {
	name, what string
	edit       func(lua string) string // nil: the library as shipped
	evalsha    bool                    // run the shipped scripts by EVALSHA
	levels     bool                    // the acquisition records its level (a request id)
	fewKeys    bool                    // acquire gets the two keys its uncontended path touches, not four
	empty      bool                    // functions that answer at once: the cost of the calls alone
}

var ablations = []ablation{
	{name: "coordkit (FCALL)", what: "as shipped: fencing token with its clock floor, level recorded, release answer stored", levels: true},
	{name: "coordkit (EVALSHA)", what: "the same code by EVALSHA: its helpers defined on every call", evalsha: true, levels: true},
	{name: "no level", what: "no request id: no LEVEL field, a resent acquire could take a second level", levels: false},
	{name: "no clock floor", what: "token = INCR of the counter (no TIME, no SET .. GET): a counter restored from older data repeats tokens", levels: true, edit: noClockFloor},
	{name: "no stored answer", what: "release stores no answer: a resent release answers \"not held\" for a lock it freed", levels: true, edit: noMarker},
	{name: "none of the three", what: "all three taken out", levels: false, edit: func(s string) string { return noMarker(noClockFloor(s)) }},
	{name: "none, and 2 keys", what: "and acquire gets only the hash and the counter (the queue's keys undeclared: a contended call could not queue)", levels: false, fewKeys: true, edit: func(s string) string { return noMarker(noClockFloor(s)) }},
	{name: "calls alone", what: "functions that answer at once, with the shipped keys and arguments: the floor of two FCALLs", levels: true, empty: true},
}

// emptyLibrary is the "calls alone" row's library: its acquire and
// release answer as a free lock's would, running no command.
func emptyLibrary(i int) string {
	return fmt.Sprintf("#!lua name=coordkit_ablate_%d\n"+
		"redis.register_function('%sacquire', function(KEYS, ARGV) return {1, 1, 1} end)\n"+
		"redis.register_function('%srelease', function(KEYS, ARGV) return 0 end)\n", i, ablationName(i), ablationName(i))
}

// noClockFloor replaces fence.lua's new_token by an INCR of the counter.
func noClockFloor(lua string) string {
	re := regexp.MustCompile(`(?s)local function new_token\(fence, floor\)\n.*?\nend\n`)
	if !re.MatchString(lua) {
		panic("scripts suite: new_token not found")
	}
	return re.ReplaceAllLiteralString(lua, "local function new_token(fence, floor)\n  local n = redis.call('incr', fence)\n  return n, tostring(n)\nend\n")
}

// noMarker drops release.lua's stored answers.
func noMarker(lua string) string {
	re := regexp.MustCompile(`(?m)^\s*redis\.call\('set', marker, [^\n]*\n`)
	if !re.MatchString(lua) {
		panic("scripts suite: release marker not found")
	}
	return re.ReplaceAllLiteralString(lua, "")
}

func runScriptsSuite(env *Env) error {
	srv, err := env.Redis()
	if err != nil {
		return err
	}
	rdb := srv.NewClient()
	defer rdb.Close()
	ctx := context.Background()
	const pairs = 20000
	us := map[string][]float64{}
	names := []string{}
	for i, a := range ablations {
		names = append(names, a.name)
		if err := loadAblation(ctx, rdb, i, a); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
	}
	names = append(names, "bsm/redislock")
	for round := range env.Rounds {
		for j := range names {
			k := (j + round) % len(names)
			v, err := measurePairs(ctx, rdb, k, pairs)
			if err != nil {
				return fmt.Errorf("%s: %w", names[k], err)
			}
			us[names[k]] = append(us[names[k]], v)
		}
	}
	base := Median(us["bsm/redislock"])
	t := Table{
		Title: fmt.Sprintf("Redis µs inside the scripts per uncontended lock+release pair (INFO commandstats; %d pairs in a row on one connection, median of %d interleaved rounds)", pairs, env.Rounds),
		Cols:  []string{"variant", "script µs/pair", "vs redislock", "what it gives up"},
	}
	for i, n := range names {
		what := "SET NX PX, then GET + DEL: no token, no re-entry, no stored answer"
		if i < len(ablations) {
			what = ablations[i].what
		}
		t.Row(n, Median(us[n]), Ratio(Median(us[n]), base), what)
	}
	t.Print(env.Out)
	return nil
}

// ablationName is the function-name prefix of ablation i's library.
func ablationName(i int) string { return fmt.Sprintf("ab%d_", i) }

// loadAblation loads the shipped library and, but for the shipped FCALL
// and EVALSHA rows, ablation i's copy.
func loadAblation(ctx context.Context, rdb redis.UniversalClient, i int, a ablation) error {
	if err := redisfn.Load(ctx, rdb); err != nil {
		return err
	}
	if a.empty {
		return rdb.FunctionLoadReplace(ctx, emptyLibrary(i)).Err()
	}
	if a.edit == nil && a.levels {
		return nil
	}
	code := redisfn.Code()
	code = strings.Replace(code, "#!lua name="+redisfn.Library, fmt.Sprintf("#!lua name=coordkit_ablate_%d", i), 1)
	code = strings.ReplaceAll(code, fmt.Sprintf("'ck%d_", redisfn.Version), "'"+ablationName(i))
	if a.edit != nil {
		code = a.edit(code)
	}
	return rdb.FunctionLoadReplace(ctx, code).Err()
}

// redislock's scripts (bsm/redislock v0.9.4's luaObtain in its common
// case, and luaRelease).
var (
	rlObtain  = redis.NewScript(`return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`)
	rlRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
)

// measurePairs runs n pairs of variant k (an index of ablations, or
// len(ablations) for redislock) and returns the scripts' Redis µs per
// pair.
func measurePairs(ctx context.Context, rdb redis.UniversalClient, k, n int) (float64, error) {
	_, u0, err := commandstatsUsec(ctx, rdb)
	if err != nil {
		return 0, err
	}
	key := lkKey("bench:abl")
	for i := range n {
		if err := onePair(ctx, rdb, k, key, i); err != nil {
			return 0, err
		}
	}
	_, u1, err := commandstatsUsec(ctx, rdb)
	if err != nil {
		return 0, err
	}
	var d int64
	for _, c := range scriptCommands {
		d += u1[c] - u0[c]
	}
	return float64(d) / float64(n), nil
}

func onePair(ctx context.Context, rdb redis.UniversalClient, k int, key string, i int) error {
	if k == len(ablations) {
		if err := rlObtain.Run(ctx, rdb, []string{key}, "token", 10000).Err(); err != nil {
			return err
		}
		return rlRelease.Run(ctx, rdb, []string{key}, "token").Err()
	}
	a := ablations[k]
	keys := hashlock.LockKeys("bench:abl:", key)
	req := ""
	if a.levels {
		req = fmt.Sprintf("r%d", i)
	}
	acqArgs := []any{"owner", "-10000", "", "0", 20000, req}
	relKeys := []string{keys[0], keys[2], keys[3], keys[0] + ":r:" + fmt.Sprintf("x%d", i), keys[1]}
	relArgs := []any{"owner", 5000, "bench:abl:wake:", req}
	acqKeys := keys[:4]
	if a.fewKeys {
		acqKeys = keys[:2]
	}
	var acq, rel *redis.Cmd
	switch {
	case a.evalsha:
		acq = redisfn.Acquire.Eval().Run(ctx, rdb, keys[:4], acqArgs...)
		if acq.Err() == nil {
			rel = redisfn.Release.Eval().Run(ctx, rdb, relKeys, relArgs...)
		}
	default:
		prefix := fmt.Sprintf("ck%d_", redisfn.Version)
		if a.edit != nil || !a.levels || a.empty {
			prefix = ablationName(k)
		}
		acq = rdb.FCall(ctx, prefix+"acquire", acqKeys, acqArgs...)
		if acq.Err() == nil {
			rel = rdb.FCall(ctx, prefix+"release", relKeys, relArgs...)
		}
	}
	if err := acq.Err(); err != nil {
		return err
	}
	if v, _ := acq.Slice(); len(v) == 0 || v[0] != int64(1) {
		return fmt.Errorf("acquire: %v, want held", v)
	}
	if left, err := rel.Int64(); err != nil || left != 0 {
		return fmt.Errorf("release: %d %v", left, err)
	}
	return nil
}
