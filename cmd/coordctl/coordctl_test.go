package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// runCLI runs one command line with the given environment.
func runCLI(t *testing.T, envv map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut, func(k string) string { return envv[k] })
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, tc.args...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			golden(t, tc.name, out)
		})
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
	for _, c := range commands {
		args := append(strings.Fields(c.name), "--help")
		code, out, errOut := runCLI(t, nil, args...)
		if code != exitOK || !strings.Contains(out, "Usage: coordctl "+c.name) {
			t.Errorf("%s --help: exit %d, out %q, err %q", c.name, code, out, errOut)
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

func TestLockInspectAndRelease(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	ctx := context.Background()
	lc := lock.New(rdb)
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
	code, out, errOut = runCLI(t, env, "lock", "inspect", "orders:42")
	if code != exitOK {
		t.Fatalf("inspect held: %d %s", code, errOut)
	}
	// The fencing token starts at the server's time in µs: mask it.
	out = regexp.MustCompile(`(fencing token:\s+)\d+`).ReplaceAllString(out, "${1}N")
	golden(t, "inspect_held", out)

	if code, _, errOut := runCLI(t, env, "lock", "release", "orders:42"); code != exitUsage || !strings.Contains(errOut, "--force") {
		t.Fatalf("release without --force: %d %q", code, errOut)
	}
	code, out, _ = runCLI(t, env, "lock", "release", "orders:42", "--force")
	if code != exitOK || out != "released orders:42\n" {
		t.Fatalf("release: %d %q", code, out)
	}
	// The holder learns at its next renewal (tested in package lock); the
	// lock is free now.
	if info, err := lc.Inspect(ctx, "orders:42"); err != nil || info.Held() {
		t.Fatalf("after forced release: %+v, %v", info, err)
	}
	_ = lease
	code, out, _ = runCLI(t, env, "lock", "release", "--force", "orders:42")
	if code != exitOK || out != "orders:42 was not held\n" {
		t.Fatalf("second release: %d %q", code, out)
	}
}

func TestUnreachableServer(t *testing.T) {
	// A port nothing listens on: a closed loopback port.
	addr := testserver.StartRedis(t)
	a := addr.Addr()
	addr.Kill()
	code, _, errOut := runCLI(t, nil, "lock", "inspect", "k", "--redis", a, "--timeout", "300ms")
	if code != exitFailure || !strings.Contains(errOut, "unreachable") {
		t.Fatalf("unreachable Redis: exit %d, %q", code, errOut)
	}
}

func TestWorkersList(t *testing.T) {
	r := testserver.StartRedis(t)
	z := testserver.StartZooKeeper(t)
	ctx := context.Background()
	env := map[string]string{"COORDKIT_REDIS": r.Addr(), "COORDKIT_ZK": z.Servers()[0]}
	// Dates, PIDs and TTLs differ from run to run.
	mask := func(s string) string {
		s = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`).ReplaceAllString(s, "SINCE")
		s = regexp.MustCompile(`(host-a\s+)\d+`).ReplaceAllString(s, "${1}PID")
		s = regexp.MustCompile(`\d+(\.\d+)?m?s\b`).ReplaceAllString(s, "TTL")
		return regexp.MustCompile(` +`).ReplaceAllString(s, " ") // column widths follow the values
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
	for _, l := range []workerid.Leaser{rl, rl, zl, zl} {
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
		golden(t, "workers_"+backend, mask(out))
		code, out, _ = runCLI(t, env, "workers", "list", "nobody", "--backend", backend)
		if code != exitOK || !strings.Contains(out, "no worker ID of nobody is leased") {
			t.Fatalf("%s, empty service: %d %q", backend, code, out)
		}
	}
	if code, _, errOut := runCLI(t, env, "workers", "list", "a{b}"); code != exitUsage {
		t.Fatalf("bad service: exit %d %q", code, errOut)
	}
}
