package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFlowKeepsItsInvariants(t *testing.T) {
	r := testserver.StartRedis(t)
	z := testserver.StartZooKeeper(t)
	for _, lk := range []string{"zk", "redis"} {
		t.Run(lk, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := config{instances: 3, users: 3, requests: 120, retries: 0.3, balance: 1000, lock: lk,
				redis: r.Addr(), zk: z.Servers()[0], seed: 7}
			rep, err := run(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			rep.print(&out)
			t.Logf("\n%s", out.String())
			if !rep.passed() || strings.Contains(out.String(), "FAIL") {
				t.Fatal("a check failed")
			}
			// The mix must exercise every path: rejections and retries.
			if rep.rejected == 0 || rep.replayed == 0 || rep.nApplied == 0 {
				t.Fatalf("applied %d, rejected %d, replayed %d: a path was not exercised", rep.nApplied, rep.rejected, rep.replayed)
			}
			for _, u := range rep.users {
				if rep.final[u] < 0 || rep.opening-rep.applied[u] != rep.final[u] {
					t.Fatalf("user %s: opening %d, applied %d, final %d", u, rep.opening, rep.applied[u], rep.final[u])
				}
			}
		})
	}
}

func TestDuplicateSerialIsRetried(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := context.Background()
	rdb := r.Client(t)
	l := lock.New(rdb)
	t.Cleanup(func() { l.Close() })
	rdb.HSet(ctx, balancesKey, "u1", 100)
	// A serial source that hands out the same serial twice, as two
	// instances misconfigured with one worker number could.
	serials := []string{"20260101000000000000100000000001", "20260101000000000000100000000001", "20260101000000000000100000000002"}
	in := &instance{rdb: rdb, locker: l, serial: func() (string, error) {
		s := serials[0]
		serials = serials[1:]
		return s, nil
	}}
	o1, err := in.withdraw(ctx, request{user: "u1", amount: 10, idem: "a"})
	if err != nil || o1 != "ok 20260101000000000000100000000001" {
		t.Fatalf("first: %q, %v", o1, err)
	}
	o2, err := in.withdraw(ctx, request{user: "u1", amount: 10, idem: "b"})
	if err != nil || o2 != "ok 20260101000000000000100000000002" || in.duplicates != 1 {
		t.Fatalf("second: %q, %v, duplicates %d", o2, err, in.duplicates)
	}
	// A retry of "a" is answered with its first outcome and not applied again.
	o3, err := in.withdraw(ctx, request{user: "u1", amount: 10, idem: "a"})
	if err != nil || o3 != o1 {
		t.Fatalf("retry: %q, %v", o3, err)
	}
	if b, _ := rdb.HGet(ctx, balancesKey, "u1").Int64(); b != 80 {
		t.Fatalf("balance %d, want 80", b)
	}
	// More than the balance is rejected and stays rejected on retry.
	for range 2 {
		if o, err := in.withdraw(ctx, request{user: "u1", amount: 1000, idem: "c"}); err != nil || o != "rejected" {
			t.Fatalf("overdraft: %q, %v", o, err)
		}
	}
}

func TestBadConfig(t *testing.T) {
	if _, err := run(context.Background(), config{instances: 0, users: 1, requests: 1, balance: 1}); err == nil {
		t.Error("zero instances accepted")
	}
	r := testserver.StartRedis(t)
	if _, err := run(context.Background(), config{instances: 1, users: 1, requests: 1, balance: 1, lock: "etcd", redis: r.Addr()}); err == nil || !strings.Contains(err.Error(), "unknown -lock") {
		t.Errorf("bad lock: %v", err)
	}
}
