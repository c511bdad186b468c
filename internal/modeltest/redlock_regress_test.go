package modeltest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
)

// stall is below rlNodeTimeout: the stalled master still answers the round.
const stall = 150 * time.Millisecond

// staller holds back the acquisitions sent through one master's client
// while on: that master answers after the others, once the round is
// decided.
type staller struct{ on atomic.Bool }

func (s *staller) stalls(cmd redis.Cmder) bool {
	return s.on.Load() && len(cmd.Args()) >= 2 && scriptNames[shaOf(cmd)] == "acquire.lua"
}

func (s *staller) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *staller) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if s.stalls(cmd) {
			time.Sleep(stall)
		}
		return next(ctx, cmd)
	}
}

func (s *staller) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if s.stalls(c) {
				time.Sleep(stall)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestModelRedlockRoundReentersGoneHold: a client that found its hold lost
// obtains again through a round, which re-enters the owner's level left on
// m0 and answers that hold's token, because the master whose fresh token
// is larger (m1) answers after the quorum decided (make test-stress at
// 9f26064, seed 7390959513087597947: the model took the round for a local
// re-entry of the gone hold, "master m0: o0 has 3 levels, the model
// 0..2"). The model must count it as a new hold with levels of its own.
func TestModelRedlockRoundReentersGoneHold(t *testing.T) {
	// The case needs m1's answer to come after the round was decided; a
	// starved host can delay the others as much (then the round answers a
	// larger token, and shows nothing): three tries.
	for try := 1; !roundReentersGoneHold(t); try++ {
		if try == 3 {
			t.Fatal("three tries, and the round never answered the gone hold's token: the stalled master's answer was never left out of the round")
		}
	}
}

// roundReentersGoneHold runs the case once on a new model and reports
// whether it was reached (the round answered the gone hold's token).
func roundReentersGoneHold(t *testing.T) bool {
	t.Helper()
	ctx := context.Background()
	m := newRedlockModel(t, 1).(*redlockModel)
	defer m.close()
	var slow [nMasters]*staller // c1's clients of the masters
	for i := range slow {
		slow[i] = &staller{}
		m.rdbs[1*nMasters+i].AddHook(slow[i])
	}
	ms := time.Millisecond
	for _, s := range []struct {
		o    op
		slow int // the master whose acquisition by c1 answers late, or -1
	}{
		// m0's counter runs ahead of the clock: its tokens are the largest.
		{op{ID: 0, Kind: opFence, Master: 0}, -1},
		// o0's hold on c1, token T from m0; m1 is raised to T, m2 (late) not.
		{op{ID: 1, Kind: opObtain, Owner: 0, Client: 1, TTL: 521 * ms}, 2},
		{op{ID: 2, Kind: opDelete, Master: 1}, -1},
		{op{ID: 3, Kind: opDelete, Master: 2}, -1},
		// c1's renewal (every 173 ms) finds the hold gone on m1 and m2.
		{op{ID: 4, Kind: opWait, Dur: 400 * ms}, -1},
		// A round: m0 re-enters (token T), m2 fresh below T; m1's fresh T+1 is late.
		{op{ID: 5, Kind: opObtain, Owner: 0, Client: 1, TTL: 5 * time.Second}, 1},
	} {
		for i := range slow {
			slow[i].on.Store(i == s.slow)
		}
		err := m.step(ctx, s.o)
		if err == nil {
			err = m.check(ctx)
		}
		if err != nil {
			t.Fatalf("%v: %v", s.o, err)
		}
	}
	l1, l5 := m.leases[1], m.leases[5]
	if err := l1.l.(lock.LeaseStatus).Err(); l1.hold.state != gone || err == nil {
		t.Fatalf("the first hold is %v, its lease's Err %v; want gone, reported lost", l1.hold.state, err)
	}
	if l5.hold == l1.hold {
		t.Fatalf("the model took the round (token %d) for a re-entry of the gone hold", l5.l.Token())
	}
	if l5.l.Token() != l1.l.Token() {
		// The stalled master answered in time all the same (a starved host).
		t.Logf("the round answered token %d, not the gone hold's %d: the case was not reached", l5.l.Token(), l1.l.Token())
		return false
	}
	return true
}
