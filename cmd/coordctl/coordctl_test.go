package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
	"github.com/coordkit/coordkit/zklock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ (and docs/coordctl-page.png)")

// testNow is the clock of the CLI in tests: the decode warnings depend on it.
var testNow = time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)

// runCLI runs one command line with the given environment.
func runCLI(t *testing.T, envv map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = runEnv(&env{ctx: context.Background(), out: &out, errOut: &errOut,
		getenv: func(k string) string { return envv[k] }, now: func() time.Time { return testNow }}, args)
	return code, out.String(), errOut.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("%s: output differs from %s\n--- got\n%s--- want\n%s", name, path, got, want)
	}
}

// mask replaces what differs from run to run (each pattern's first group
// is kept, the rest becomes the replacement).
func mask(s string, pairs ...string) string {
	for i := 0; i+1 < len(pairs); i += 2 {
		s = regexp.MustCompile(pairs[i]).ReplaceAllString(s, pairs[i+1])
	}
	return s
}

// waitFor polls f every 50 ms until it returns true, or fails the test
// after d.
func waitFor(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// maskSpaces collapses runs of spaces: column widths follow the values.
func maskSpaces(s string) string { return regexp.MustCompile(` +`).ReplaceAllString(s, " ") }

func TestIDDecodeGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		// The tweet ID from Twitter's Snowflake announcement era.
		{"decode_twitter", []string{"id", "decode", "1541815603606036480", "--layout", "twitter"}},
		{"decode_worker10", []string{"id", "decode", "--layout", "worker10", "1541815603606036480"}},
		{"decode_sonyflake", []string{"id", "decode", "--layout", "sonyflake", "298528864133259265"}},
		{"decode_objectid", []string{"id", "decode", "--layout", "objectid", "507f1f77bcf86cd799439011"}},
		{"decode_serial", []string{"id", "decode", "--layout", "serial", "20261123091530123000700000000042"}},
		{"decode_uuid7", []string{"id", "decode", "--layout", "uuid", "0190163d-8694-739b-aea5-966c26f8ad91"}},
		{"decode_two", []string{"id", "decode", "--layout", "js53", "1", "123456789012345"}},
		{"decode_twitter_json", []string{"id", "decode", "--json", "1541815603606036480", "1"}},
		{"decode_objectid_json", []string{"id", "decode", "--json", "--layout", "objectid", "507f1f77bcf86cd799439011"}},
		{"decode_serial_json", []string{"id", "decode", "--json", "--layout", "serial", "20261123091530123000700000000042"}},
		{"decode_uuid7_json", []string{"id", "decode", "--layout", "uuid", "--json", "0190163d-8694-739b-aea5-966c26f8ad91"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, tc.args...)
			if code != exitOK || errOut != "" {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			golden(t, tc.name, out)
		})
	}
}

// TestIDDecodeAbsurdTime: an ID read with the wrong layout decodes to a time
// decades ahead, or before any such ID was made: a warning on stderr.
func TestIDDecodeAbsurdTime(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		// A Twitter ID read as a Sonyflake: 10 ms ticks put it in 2043.
		{[]string{"id", "decode", "--layout", "sonyflake", "1541815603606036480"}, "16 years ahead of the clock: is the layout right?"},
		{[]string{"id", "decode", "--layout", "twitter", "--json", "9223372036854775807"}, "years ahead of the clock"},
		{[]string{"id", "decode", "--layout", "uuid", "00000000-0001-7000-8000-000000000000"}, "before 2000-01-01T00:00:00.000Z"},
		{[]string{"id", "decode", "--layout", "objectid", "000000010000000000000000"}, "before 2000"},
	} {
		code, out, errOut := runCLI(t, nil, tc.args...)
		if code != exitOK || !strings.Contains(errOut, "coordctl id decode: warning: ") || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want a warning with %q", tc.args, code, errOut, tc.want)
		}
		if strings.Contains(tc.args[len(tc.args)-2], "json") && !strings.Contains(out, `"warnings"`) {
			t.Errorf("%q: JSON without the warning: %s", tc.args, out)
		}
	}
	// Within a day ahead: no warning (clock skew, borrowed ticks).
	if _, _, errOut := runCLI(t, nil, "id", "decode", "--layout", "serial", "20261125120000000000700000000042"); errOut != "" {
		t.Errorf("warning for a time 12 h ahead: %q", errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"id"}, "a subcommand is needed"},
		{[]string{"id", "decode"}, "no ID to decode"},
		{[]string{"id", "decode", "abc"}, "not a decimal, base32 or base58"},
		{[]string{"id", "decode", "--layout", "nope", "1"}, `unknown --layout "nope"`},
		{[]string{"id", "decode", "--layout", "objectid", "zz"}, "objectid"},
		{[]string{"id", "next", "-n", "0"}, "outside [1, 100000]"},
		{[]string{"id", "next", "--worker", "5000"}, "worker"},
		{[]string{"id", "next", "--bogus"}, "flag provided but not defined"},
		// Malformed addresses are usage errors, with what was expected.
		{[]string{"lock", "inspect", "k", "--redis", "localhost"}, `--redis "localhost": want host:port`},
		{[]string{"lock", "inspect", "k", "--redis", "127.0.0.1:99999"}, `port "99999" is not a number from 1 to 65535`},
		{[]string{"lock", "inspect", "k", "--redis", "redis://127.0.0.1:6379"}, "not a URL"},
		{[]string{"lock", "inspect", "k", "--redis", "127.0.0.1:6379,:x"}, `--redis ":x"`},
		{[]string{"lock", "inspect", "k", "--kind", "zk", "--zk", "a:b:c"}, `--zk "a:b:c"`},
		{[]string{"lock", "inspect", "k", "--kind", "nope"}, `unknown --kind "nope"`},
		{[]string{"lock", "inspect", "a/b", "--kind", "etcd"}, "may not hold '/'"},
		{[]string{"lock", "inspect", "k", "--kind", "etcd", "--etcd", "localhost"}, `--etcd "localhost": want host:port`},
		{[]string{"lock", "release", "k", "--kind", "etcd", "--etcd-prefix", "/a/"}, "--etcd-prefix"},
		{[]string{"serve", "--tags", "a", "--etcd", "localhost"}, `--etcd "localhost": want host:port`},
		{[]string{"serve", "--tags", "a", "--etcd", "127.0.0.1:2379", "--etcd-prefix", ""}, "--etcd-prefix"},
		{[]string{"lock", "inspect", "k", "--prefix", "a{"}, "braces"},
		{[]string{"lock", "release", "k", "--kind", "zk"}, "--force"},
		{[]string{"workers", "list", "svc", "--layout", "twitter", "--max", "3"}, "not both"},
		{[]string{"workers", "list", "svc", "--redis", "nohost"}, "want host:port"},
		{[]string{"tags", "add"}, "at least one TAG"},
		{[]string{"tags", "list", "--redis", "x:0"}, "port"},
	} {
		code, _, errOut := runCLI(t, nil, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestHelpEverywhere(t *testing.T) {
	code, out, _ := runCLI(t, nil, "--help")
	if code != exitOK || !strings.Contains(out, "Commands:") {
		t.Fatalf("top help: %d %q", code, out)
	}
	golden(t, "help", out)
	for _, c := range commands {
		for _, h := range []string{"--help", "-h"} {
			args := append(strings.Fields(c.name), h)
			code, out, errOut := runCLI(t, nil, args...)
			if n := strings.Count(out, "Usage: coordctl "+c.name); code != exitOK || n != 1 || errOut != "" {
				t.Errorf("%s %s: exit %d, usage printed %d times, out %q, err %q", c.name, h, code, n, out, errOut)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		code, out, _ := runCLI(t, nil, arg)
		if code != exitOK || !regexp.MustCompile(`^coordctl (devel|v\d\S*)`).MatchString(out) || strings.Count(out, "\n") != 1 {
			t.Errorf("%s: %d %q", arg, code, out)
		}
	}
}

func TestIDNext(t *testing.T) {
	for _, kind := range []string{"snowflake", "objectid", "uuid4", "uuid7", "serial"} {
		code, out, errOut := runCLI(t, nil, "id", "next", "--kind", kind, "-n", "50")
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", kind, code, errOut)
		}
		lines := strings.Fields(out)
		seen := map[string]bool{}
		for _, l := range lines {
			if seen[l] {
				t.Fatalf("%s: duplicate %s", kind, l)
			}
			seen[l] = true
		}
		if len(lines) != 50 {
			t.Fatalf("%s: %d IDs", kind, len(lines))
		}
	}
}

// maskLock hides the tokens, TTLs and waiter ids of lock output.
func maskLock(s string) string {
	return mask(s,
		`(fencing token:\s+|hold token:\s+|token )\d+`, "${1}N",
		`("(hold_token|fence|token)": )\d+`, "${1}N",
		`\d+ ms`, "N ms",
		`("(ttl_ms|expires_in_ms)": )\d+`, "${1}N",
		`client m?[0-9a-f]{32} #\d+`, "client CLIENT #N",
		`("client": )"m?[0-9a-f]{32}"`, `${1}"CLIENT"`,
		`("seq": )\d+`, "${1}N",
		`\b\d{10,}\b`, "N")
}

func TestLockInspectAndRelease(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	ctx := context.Background()
	lc := lock.New(rdb, lock.WithHolderMeta("service=orders host=h1 pid=101"))
	t.Cleanup(func() { lc.Close() })
	env := map[string]string{"COORDKIT_REDIS": r.Addr()}

	code, out, errOut := runCLI(t, env, "lock", "inspect", "orders:42")
	if code != exitOK {
		t.Fatalf("inspect free: %d %s", code, errOut)
	}
	golden(t, "inspect_free", out)

	lease, err := lc.Obtain(lock.WithOwner(ctx, "owner-a"), "orders:42", lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Obtain(lock.WithOwner(ctx, "owner-a"), "orders:42", lock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// A waiter of another client queues behind owner-a.
	other := lock.New(r.Client(t), lock.WithHolderMeta("service=orders host=h2 pid=202"))
	t.Cleanup(func() { other.Close() })
	got := make(chan lock.Lease, 1)
	wctx, cancel := context.WithTimeout(lock.WithOwner(ctx, "owner-b"), 20*time.Second)
	defer cancel()
	go func() {
		l, err := other.Obtain(wctx, "orders:42", lock.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 5*time.Second, "the waiter is not queued", func() bool {
		info, _ := lc.Inspect(ctx, "orders:42")
		return len(info.Waiters) == 1
	})
	code, out, errOut = runCLI(t, env, "lock", "inspect", "orders:42")
	if code != exitOK {
		t.Fatalf("inspect held: %d %s", code, errOut)
	}
	golden(t, "inspect_held", maskLock(out))
	_, out, _ = runCLI(t, env, "lock", "inspect", "orders:42", "--json")
	golden(t, "inspect_held_json", maskLock(out))
	var v hashView
	// The waiter's fields are parsed: the queue's encoding
	// ("<client>:<seq>|<grant ms>|<owner>") stays inside.
	if strings.Contains(out, "|") || strings.Contains(out, `"entry"`) {
		t.Errorf("inspect --json leaks the queue encoding:\n%s", out)
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || !v.Held || v.Waiters[0].Owner != "owner-b" || v.Waiters[0].ExpiresMs <= 0 ||
		v.Waiters[0].Client == "" || strings.Contains(v.Waiters[0].Client, ":") || v.Waiters[0].Seq == 0 || v.Waiters[0].GrantTTLms <= 0 ||
		v.TTLms <= 0 || v.TTLms > 60000 || v.HoldToken != lease.Token() ||
		v.Meta != "service=orders host=h1 pid=101" || v.Waiters[0].Meta != "service=orders host=h2 pid=202" {
		t.Fatalf("inspect --json: %v %+v", err, v)
	}

	if code, _, errOut := runCLI(t, env, "lock", "release", "orders:42"); code != exitUsage || !strings.Contains(errOut, "--force") {
		t.Fatalf("release without --force: %d %q", code, errOut)
	}
	code, out, _ = runCLI(t, env, "lock", "release", "orders:42", "--force")
	if code != exitOK || out != "released orders:42\n" {
		t.Fatalf("release: %d %q", code, out)
	}
	// The lock went to the waiter; the former holder learns at its next
	// renewal (tested in package lock).
	var next lock.Lease
	select {
	case next = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock")
	}
	if owner, _, err := lc.Holder(ctx, "orders:42"); err != nil || owner != "owner-b" {
		t.Fatalf("after forced release: holder %q, %v", owner, err)
	}
	if info, err := lc.Inspect(ctx, "orders:42"); err != nil || info.Meta != "service=orders host=h2 pid=202" {
		t.Fatalf("after forced release: the granted waiter's metadata %q, %v", info.Meta, err)
	}
	next.Release(ctx)
	code, out, _ = runCLI(t, env, "lock", "release", "--force", "orders:42")
	if code != exitOK || out != "orders:42 was not held\n" {
		t.Fatalf("second release: %d %q", code, out)
	}
}

// TestLockInspectGrant: a grant in flight (a release granted the lock to a
// waiter that has not taken it yet) is shown, as Redis holds it.
func TestLockInspectGrant(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	ctx := context.Background()
	k := lock.DefaultPrefix + "{jobs:7}"
	rdb.HSet(ctx, k, "owner-g", 1, "\x00grant", "c0ffee:3|5000|owner-g", "\x00t", 77)
	rdb.PExpire(ctx, k, 5*time.Second)
	rdb.Set(ctx, k+":fence", 77, 0)
	code, out, errOut := runCLI(t, map[string]string{"COORDKIT_REDIS": r.Addr()}, "lock", "inspect", "jobs:7")
	if code != exitOK || !strings.Contains(out, "grant in flight:  client c0ffee #3, to owner owner-g: not yet taken by its waiter") ||
		!strings.Contains(out, "hold token:       77") {
		t.Fatalf("%d %q %q", code, out, errOut)
	}
}

func TestLockSimple(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := context.Background()
	sl := lock.NewSimple(r.Client(t))
	t.Cleanup(func() { sl.Close() })
	env := map[string]string{"COORDKIT_REDIS": r.Addr()}
	lease, err := sl.Obtain(ctx, "orders:7", lock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The hash lock of that name is free: a note says where to look.
	code, out, errOut := runCLI(t, env, "lock", "inspect", "orders:7")
	if code != exitOK || !strings.Contains(out, "state:          free") || !strings.Contains(errOut, "see --kind simple") {
		t.Fatalf("inspect as a hash lock: %d %q %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, env, "lock", "inspect", "orders:7", "--kind", "simple")
	if code != exitOK {
		t.Fatalf("%d %q", code, errOut)
	}
	golden(t, "inspect_simple", mask(maskLock(out), `holder:(\s+)\S+`, "holder:${1}VALUE"))
	_, out, _ = runCLI(t, env, "lock", "inspect", "orders:7", "--kind", "simple", "--json")
	var v simpleView
	if err := json.Unmarshal([]byte(out), &v); err != nil || !v.Held || v.Fence != lease.Token() || v.TTLms <= 0 || v.TTLms > 3000 {
		t.Fatalf("--json: %v %q", err, out)
	}
	code, out, _ = runCLI(t, env, "lock", "release", "orders:7", "--kind", "simple", "--force")
	if code != exitOK || out != "released orders:7\n" {
		t.Fatalf("release: %d %q", code, out)
	}
	// The holder learns at its next renewal (TTL/3).
	select {
	case <-lease.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the Simple lease was not lost after a forced release")
	}
	if err := lease.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("the holder's Release: %v", err)
	}
	_, out, _ = runCLI(t, env, "lock", "inspect", "orders:7", "--kind", "simple")
	if !strings.Contains(out, "state:          free") {
		t.Fatalf("after release: %q", out)
	}
	// Another key's type is not deleted.
	r.Client(t).HSet(ctx, lock.DefaultPrefix+"simple:{h}", "a", 1)
	if code, _, errOut := runCLI(t, env, "lock", "release", "h", "--kind", "simple", "--force"); code != exitFailure || !strings.Contains(errOut, "not a lock.Simple key") {
		t.Fatalf("release of a hash as simple: %d %q", code, errOut)
	}
}

func TestLockRedlock(t *testing.T) {
	ms := testserver.StartRedisMasters(t, 3)
	var clients []redis.UniversalClient
	var addrs []string
	for _, m := range ms {
		clients = append(clients, m.Client(t))
		addrs = append(addrs, m.Addr())
	}
	// A node timeout that a loaded machine does not overrun: every master
	// takes the lock, so that the golden output is the same on every run.
	rl, err := redlock.New(clients, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })
	ctx := context.Background()
	lease, err := rl.Obtain(lock.WithOwner(ctx, "owner-r"), "pay:9", lock.WithTTL(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Obtain returns once a quorum holds it; the third master's answer may
	// still be on its way (a loaded machine showed 2 of 3 in the golden).
	for i, c := range clients {
		waitFor(t, 5*time.Second, "master "+strconv.Itoa(i+1)+" does not hold the lock", func() bool {
			n, _ := c.Exists(ctx, redlock.DefaultPrefix+"{pay:9}").Result()
			return n == 1
		})
	}
	env := map[string]string{"COORDKIT_REDIS": strings.Join(addrs, ",")}
	maskAddrs := func(s string) string {
		for i, a := range addrs {
			s = strings.ReplaceAll(s, a, "MASTER"+string(rune('1'+i)))
		}
		return maskSpaces(maskLock(s))
	}
	code, out, errOut := runCLI(t, env, "lock", "inspect", "pay:9", "--kind", "redlock")
	if code != exitOK {
		t.Fatalf("%d %q", code, errOut)
	}
	golden(t, "inspect_redlock", maskAddrs(out))
	// The quorum's answer is redlock.Client.Holder's.
	owner, token, err := rl.Holder(ctx, "pay:9")
	_, out, _ = runCLI(t, env, "lock", "inspect", "pay:9", "--kind", "redlock", "--json")
	var v redlockView
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Holder != owner || v.Token != token || v.On != 3 || v.Quorum != 2 {
		t.Fatalf("--json %q vs Holder %q %d %v", out, owner, token, err)
	}

	// One master down: still held on a quorum, the master shown unreachable.
	ms[2].Kill()
	code, out, errOut = runCLI(t, env, "lock", "inspect", "pay:9", "--kind", "redlock", "--timeout", "500ms")
	if code != exitOK {
		t.Fatalf("one master down: %d %q", code, errOut)
	}
	golden(t, "inspect_redlock_down", maskAddrs(out))
	// A release cannot reach it: exit 1, after releasing on the others.
	code, out, errOut = runCLI(t, env, "lock", "release", "pay:9", "--kind", "redlock", "--force", "--timeout", "500ms")
	if code != exitFailure || strings.Count(out, ": released") != 2 || !strings.Contains(errOut, "1 of 3 masters could not be reached") {
		t.Fatalf("release with a master down: %d %q %q", code, out, errOut)
	}
	select {
	case <-lease.Lost():
	case <-time.After(30 * time.Second):
		t.Fatal("the Redlock lease was not lost after a forced release on 2 of 3 masters")
	}
	// Two masters down: too few answers to say it is free.
	ms[1].Kill()
	code, _, errOut = runCLI(t, env, "lock", "inspect", "pay:9", "--kind", "redlock", "--timeout", "500ms")
	if code != exitFailure || !strings.Contains(errOut, "only 1 of 3 masters answered") {
		t.Fatalf("two masters down: %d %q", code, errOut)
	}
}

func TestLockZK(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	ctx := context.Background()
	newClient := func() *zklock.Client {
		zc := z.DialT(t, 4*time.Second, nil)
		c, err := zklock.New(zc.Conn, zklock.WithSessionTimeout(4*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder, waiter := newClient(), newClient()
	lease, err := holder.Obtain(lock.WithOwner(ctx, "owner-z"), "batch/7")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan lock.Lease, 1)
	wctx, cancel := context.WithTimeout(lock.WithOwner(ctx, "owner-w"), 30*time.Second)
	defer cancel()
	go func() {
		l, err := waiter.Obtain(wctx, "batch/7")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	env := map[string]string{"COORDKIT_ZK": z.Servers()[0]}
	var v zkView
	waitFor(t, 5*time.Second, "the waiter's node is not there", func() bool {
		_, out, _ := runCLI(t, env, "lock", "inspect", "batch/7", "--kind", "zk", "--json")
		return json.Unmarshal([]byte(out), &v) == nil && len(v.Nodes) == 2
	})
	if !v.Held || v.Holder != "owner-z" || !v.Nodes[0].Holds || v.Nodes[1].Holds || v.Nodes[0].Token != lease.Token() ||
		v.Nodes[1].Owner != "owner-w" || v.Path != "/coordkit/locks/batch%2F7" || v.Nodes[0].Session == v.Nodes[1].Session {
		t.Fatalf("inspect --json: %+v", v)
	}
	code, out, errOut := runCLI(t, env, "lock", "inspect", "batch/7", "--kind", "zk")
	if code != exitOK {
		t.Fatalf("%d %q", code, errOut)
	}
	maskZK := func(s string) string {
		return maskSpaces(mask(s, `_c_[0-9a-f-]{36}-(\w+)-\d{10}`, "_c_UUID-${1}-SEQ", `0x[0-9a-f]+`, "SESSION",
			`(token )\d+`, "${1}N", `(?m) \d+$`, " N"))
	}
	golden(t, "inspect_zk", maskZK(out))

	code, out, _ = runCLI(t, env, "lock", "release", "batch/7", "--kind", "zk", "--force")
	if code != exitOK || !strings.Contains(out, "released batch/7") || !strings.Contains(out, "owner owner-z") {
		t.Fatalf("release: %d %q", code, out)
	}
	var next lock.Lease
	select {
	case next = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock")
	}
	if owner, tok, err := holder.Holder(ctx, "batch/7"); err != nil || owner != "owner-w" || tok != next.Token() {
		t.Fatalf("holder after release: %q %d %v", owner, tok, err)
	}
	// The former holder is not told: its Release says so.
	if err := lease.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("the former holder's Release: %v", err)
	}
	next.Release(ctx)
	if code, out, _ := runCLI(t, env, "lock", "inspect", "batch/7", "--kind", "zk"); code != exitOK || !strings.Contains(out, "state:   free") {
		t.Fatalf("after release: %d %q", code, out)
	}
}

func TestUnreachableServer(t *testing.T) {
	// A port nothing listens on: a closed loopback port.
	addr := testserver.StartRedis(t)
	a := addr.Addr()
	addr.Kill()
	for _, args := range [][]string{
		{"lock", "inspect", "k", "--redis", a, "--timeout", "300ms"},
		{"lock", "inspect", "k", "--kind", "simple", "--redis", a, "--timeout", "300ms"},
		{"workers", "list", "svc", "--redis", a, "--timeout", "300ms"},
		{"tags", "list", "--redis", a, "--timeout", "300ms"},
	} {
		code, out, errOut := runCLI(t, nil, args...)
		// One line: ours. go-redis's own log lines are silenced.
		if code != exitFailure || !strings.Contains(errOut, "unreachable") || strings.Count(errOut, "\n") != 1 || out != "" {
			t.Errorf("%q: exit %d, %q %q", args, code, out, errOut)
		}
	}
	code, _, errOut := runCLI(t, nil, "lock", "inspect", "k", "--redis", a, "--timeout", "300ms", "--verbose")
	if code != exitFailure || !strings.Contains(errOut, "unreachable") {
		t.Fatalf("--verbose: exit %d, %q", code, errOut)
	}
}

func TestWorkersList(t *testing.T) {
	r := testserver.StartRedis(t)
	z := testserver.StartZooKeeper(t)
	ctx := context.Background()
	env := map[string]string{"COORDKIT_REDIS": r.Addr(), "COORDKIT_ZK": z.Servers()[0]}
	// Dates, PIDs and TTLs differ from run to run.
	maskW := func(s string) string {
		return mask(s, `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`, "SINCE", `(host-a\s+)\d+`, "${1}PID", `\d+ ms\b`, "TTL",
			`("pid": )\d+`, "${1}PID", `("ttl_ms": )\d+`, "${1}TTL", `("owner": )"[^"]+"`, `${1}"OWNER"`)
	}

	rl, err := workerid.NewRedis(r.Client(t), workerid.WithHost("host-a"))
	if err != nil {
		t.Fatal(err)
	}
	zc := z.DialT(t, 4*time.Second, nil)
	zl, err := workerid.NewZK(zc.Conn, workerid.WithHost("host-a"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { zl.Close() })
	for _, l := range []interface {
		Lease(context.Context, string) (*workerid.Lease, error)
	}{rl, rl, zl, zl} {
		lease, err := l.Lease(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lease.Release(ctx) })
	}
	for _, backend := range []string{"redis", "zk"} {
		code, out, errOut := runCLI(t, env, "workers", "list", "orders", "--backend", backend)
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", backend, code, errOut)
		}
		golden(t, "workers_"+backend, maskSpaces(maskW(out)))
		code, out, _ = runCLI(t, env, "workers", "list", "orders", "--backend", backend, "--json")
		if code != exitOK {
			t.Fatalf("%s --json: exit %d", backend, code)
		}
		golden(t, "workers_"+backend+"_json", maskW(out))
		code, out, _ = runCLI(t, env, "workers", "list", "nobody", "--backend", backend)
		if code != exitOK || !strings.Contains(out, "no worker ID of nobody is leased") {
			t.Fatalf("%s, empty service: %d %q", backend, code, out)
		}
	}
	if code, _, errOut := runCLI(t, env, "workers", "list", "a{b}"); code != exitUsage {
		t.Fatalf("bad service: exit %d %q", code, errOut)
	}

	// A layout with more worker bits (Sonyflake's 16): a lease of ID 40000,
	// beyond the 1023 the tool used to read, is listed; --layout twitter
	// and --max narrow the range.
	rw, err := workerid.NewRedis(r.Client(t), workerid.WithHost("host-b"), workerid.WithMax(65535))
	if err != nil {
		t.Fatal(err)
	}
	rdb := r.Client(t)
	pipe := rdb.Pipeline()
	for id := range 40000 { // occupy 0 to 39999 so that the lease takes 40000
		pipe.Set(ctx, "coordkit:worker:{wide}:"+strconv.Itoa(id), "x", time.Minute)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := rw.Lease(ctx, "wide")
	if err != nil || lease.ID() != 40000 {
		t.Fatalf("lease: %v, %v", lease, err)
	}
	t.Cleanup(func() { lease.Release(ctx) })
	check := func(args []string, wantLast int64, wantN int) {
		t.Helper()
		_, out, errOut := runCLI(t, env, append([]string{"workers", "list", "wide", "--json"}, args...)...)
		var ws []workerView
		if err := json.Unmarshal([]byte(out), &ws); err != nil || len(ws) != wantN || ws[len(ws)-1].ID != wantLast {
			t.Fatalf("%q: %d workers (%v) %q", args, len(ws), err, errOut)
		}
	}
	check(nil, 40000, 40001)
	check([]string{"--layout", "sonyflake"}, 40000, 40001)
	check([]string{"--layout", "twitter"}, 1023, 1024)
	check([]string{"--max", "9"}, 9, 10)
	_, out, _ := runCLI(t, env, "workers", "list", "wide")
	if !regexp.MustCompile(`\n40000\s+host-b\s`).MatchString(out) {
		t.Fatalf("text: %q", out[len(out)-200:])
	}
}

// TestBadFlagOneLine: a flag that does not exist, or a bad flag value, is
// one line on stderr and a hint to -h, as every other error, not the
// command's usage; an unknown command likewise.
func TestBadFlagOneLine(t *testing.T) {
	var all strings.Builder
	for _, args := range [][]string{
		{"serve", "--nope"},
		{"id", "next", "-n", "x"},
		{"lock", "inspect", "k", "--kind"},
		{"tags", "list", "--json=maybe"},
		{"--nope"},
		{"frobnicate", "--json"},
	} {
		code, out, errOut := runCLI(t, nil, args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 2 || strings.Contains(errOut, "Usage") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and two lines on stderr", args, code, out, errOut)
		}
		fmt.Fprintf(&all, "$ coordctl %s\n%s", strings.Join(args, " "), errOut)
	}
	golden(t, "bad_flag", all.String())
}

// TestTagsRemoveUnregistered: removing a tag that is not registered fails
// (exit 1) and says which; the tags that were registered are removed all
// the same.
func TestTagsRemoveUnregistered(t *testing.T) {
	r := testserver.StartRedis(t)
	env := map[string]string{"COORDKIT_REDIS": r.Addr()}
	if code, _, errOut := runCLI(t, env, "tags", "add", "orders", "invoices"); code != exitOK {
		t.Fatalf("tags add: %d %s", code, errOut)
	}
	var all strings.Builder
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"tags", "remove", "nope"}, exitFailure},
		{[]string{"tags", "remove", "orders", "nope", "nope", "other"}, exitFailure},
		{[]string{"tags", "remove", "invoices"}, exitOK},
		{[]string{"tags", "remove", "invoices"}, exitFailure},
	} {
		code, out, errOut := runCLI(t, env, tc.args...)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d", tc.args, code, tc.code)
		}
		fmt.Fprintf(&all, "$ coordctl %s\nexit %d\nstdout: %q\nstderr: %q\n", strings.Join(tc.args, " "), code, out, errOut)
	}
	golden(t, "tags_remove", all.String())
	if n, _ := r.Client(t).SCard(context.Background(), defaultTagsKey).Result(); n != 0 {
		t.Fatalf("%d tags left registered", n)
	}
}
