package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/coordkit/coordkit/etcd/etcdlock"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// The etcd backend: lock.Do on etcdlock over a 3-member cluster
// (testserver.NewEtcdCluster), each client process through its slot's
// proxies, one to each member. etcdlock has one lease per Client, whose
// TTL is the run's -ttl: lock.WithTTL does not apply (client.go passes
// none), and its long key L0 lives by that lease, as zk's lives by the
// session.

// Fault kinds of the etcd backend beside the common ones.
const (
	fEtcdMemberKill  = "etcd-member-kill"  // kill -9 a member, restart it from its data directory
	fEtcdLeaderKill  = "etcd-leader-kill"  // kill -9 the member that leads, restart it from its data directory
	fEtcdLeaderPause = "etcd-leader-pause" // SIGSTOP the member that leads past an election, then SIGCONT
	// fEtcdPartition partitions a member (the leader half the time) from
	// its peers past an election (testserver.Etcd.IsolateMember), while
	// the clients that reach it still do: it cannot commit, an isolated
	// leader steps down after its election timeout, and the others elect
	// a leader of their own.
	fEtcdPartition = "etcd-member-partition"
	// fEtcdKeyDelete is etcd-key-delete: an operator deletes every hold
	// key under the lock prefix (etcdctl del --prefix, ForceRelease on
	// every key), one to three times 300 ms apart, straight to a member.
	// etcdlock/doc.go: the holder is the one overlap it allows, told only
	// at Release (lock.ErrNotHeld); a waiter whose own key went starts
	// again, and one whose predecessor went holds only once a read finds
	// its own key still there (mutant 42). The fault records, per key, the
	// token (create revision) of the first key under its prefix at each
	// deletion (Fault.Rounds): the only hold a deletion can have freed.
	fEtcdKeyDelete = "etcd-key-delete"
)

// etcdLockPrefix is the etcd backend's lock prefix (dialEtcd).
const etcdLockPrefix = "/chaos/locks"

// etcdKeyDeleteGap is the time between two rounds of etcd-key-delete.
const etcdKeyDeleteGap = 300 * time.Millisecond

// etcdNemesisPrefix holds etcd-key-delete's markers, outside the lock
// prefix (deleteHoldKeys).
const etcdNemesisPrefix = "/chaos/nemesis"

// etcdRoundTimeout bounds one request of etcd-key-delete (etcd's own
// request timeout is 5 s); etcdSettleTimeout bounds the settling of a
// round whose request failed.
const (
	etcdRoundTimeout  = 5 * time.Second
	etcdSettleTimeout = 20 * time.Second
)

// etcdHealWait bounds the wait for every member to serve again after the
// heal.
const etcdHealWait = 30 * time.Second

// dialEtcd is the etcd backend's Locker: an etcdlock.Client with the run's
// TTL over a clientv3 client whose endpoints are addrs (the slot's
// proxies, one per member). gRPC's keep-alive pings (1 s, answered within
// 1 s) let the client leave a member that went silent; they count for
// nothing in etcdlock's lease window (etcdlock/doc.go).
func dialEtcd(cfg clientConfig) (lock.Locker, func(), error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: cfg.addrs, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
	})
	if err != nil {
		return nil, nil, err
	}
	c, err := etcdlock.New(cli, etcdlock.WithTTL(cfg.ttl), etcdlock.WithPrefix(etcdLockPrefix))
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return c, func() { c.Close(); cli.Close() }, nil
}

// etcdLeader returns the index (in Nodes) of the member that leads, as a
// member that leads reports itself (Status: Leader == its own member ID).
// It asks each running member directly (not through a client's proxies),
// and looks again for up to 3 s while the cluster elects.
func (e *env) etcdLeader(ctx context.Context) (int, error) {
	deadline := time.Now().Add(3 * time.Second)
	var last error
	for {
		for i, n := range e.etcd.Nodes() {
			if !n.Running() {
				continue
			}
			lead, err := etcdLeads(ctx, n.Addr())
			if err != nil {
				last = err
				continue
			}
			if lead {
				return i, nil
			}
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return 0, errors.Join(errors.New("no etcd member reports itself the leader"), last, ctx.Err())
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// etcdLeads reports whether the member at addr leads the cluster.
func etcdLeads(ctx context.Context, addr string) (bool, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return false, err
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := cli.Status(sctx, addr)
	if err != nil {
		return false, err
	}
	return st.Leader != 0 && st.Leader == st.Header.MemberId, nil
}

// applyEtcd injects the etcd faults that act on members (server-pause and
// the etcd kinds) and heals them; it reports false for every other kind.
func (e *env) applyEtcd(ctx context.Context, s step, f *Fault) (bool, error) {
	nodes := e.etcd.Nodes()
	switch s.Kind {
	case fServerPause, fEtcdMemberKill:
		i := s.Target % len(nodes)
		f.Target = nodes[i].Name()
		if s.Kind == fEtcdMemberKill {
			return true, etcdKill(ctx, nodes[i], s.Dur)
		}
		return true, etcdPause(ctx, nodes[i], s.Dur)
	case fEtcdPartition:
		i := s.Target % len(nodes)
		if s.Target%2 == 0 {
			var err error
			if i, err = e.etcdLeader(ctx); err != nil {
				return true, err
			}
			f.Detail = "the leader"
		}
		f.Target = nodes[i].Name()
		if err := e.etcd.IsolateMember(i, true); err != nil {
			return true, err
		}
		sleepCtx(ctx, s.Dur)
		return true, e.etcd.IsolateMember(i, false)
	case fEtcdLeaderKill, fEtcdLeaderPause:
		i, err := e.etcdLeader(ctx)
		if err != nil {
			return true, err
		}
		f.Target = nodes[i].Name()
		f.Detail = "the leader"
		if s.Kind == fEtcdLeaderKill {
			return true, etcdKill(ctx, nodes[i], s.Dur)
		}
		return true, etcdPause(ctx, nodes[i], s.Dur)
	case fEtcdKeyDelete:
		var err error
		f.Target, f.Detail, f.Rounds, err = e.deleteHoldKeys(ctx, 1+s.Target%3)
		return true, err
	}
	return false, nil
}

// deleteHoldKeys is etcd-key-delete: rounds deletions of every key under
// the lock prefix, etcdKeyDeleteGap apart, through a client of its own to
// every member. It returns the target, a summary and the rounds: for each
// key, the create revision of the first hold key the deletion removed (the
// holder's token, if it held: a key is held while its hold key is the
// first under its prefix, etcdlock/doc.go). A round runs to its answer
// even when the load phase ends meanwhile: what it deleted must be known.
//
// Each round is one transaction that also creates a marker key of its
// own, on the condition that the marker does not exist yet, so that a
// round whose request fails (a timeout, a member gone) can be settled: a
// put of the marker afterwards finds it (the round was applied, at the
// marker's create revision R, and deleted what the prefix held at R-1) or
// not (it never will be: its condition fails from then on). Only a round
// still unsettled after etcdSettleTimeout is of unknown outcome, open to
// the end of the run.
func (e *env) deleteHoldKeys(ctx context.Context, rounds int) (string, string, []DeleteRound, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "etcd", "", nil, err
	}
	defer cli.Close()
	bg := context.WithoutCancel(ctx)
	var out []DeleteRound
	deleted := 0
	var notes []string
	for i := range rounds {
		if i > 0 {
			sleepCtx(ctx, etcdKeyDeleteGap)
		}
		if ctx.Err() != nil {
			break // the load phase ended
		}
		marker := fmt.Sprintf("%s/delete-%d-%d", etcdNemesisPrefix, time.Now().UnixNano(), i)
		d := DeleteRound{Start: monoNow()}
		rctx, cancel := context.WithTimeout(bg, etcdRoundTimeout)
		resp, err := cli.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(marker), "=", 0)).
			Then(clientv3.OpDelete(etcdLockPrefix+"/", clientv3.WithPrefix(), clientv3.WithPrevKV()), clientv3.OpPut(marker, "")).
			Commit()
		cancel()
		var kvs []*mvccpb.KeyValue
		if err == nil {
			d.End = monoNow()
			kvs = resp.Responses[0].GetResponseDeleteRange().PrevKvs
		} else {
			applied, held, serr := settleRound(bg, cli, marker)
			switch {
			case serr != nil:
				d.End, d.Unknown = math.MaxInt64, true
				notes = append(notes, fmt.Sprintf("round %d of unknown outcome (%v; settling: %v)", i+1, err, serr))
				out = append(out, d)
				continue
			case !applied:
				notes = append(notes, fmt.Sprintf("round %d not applied (%v)", i+1, err))
				continue
			}
			d.End, kvs = monoNow(), held
			notes = append(notes, fmt.Sprintf("round %d applied though its request failed (%v)", i+1, err))
		}
		d.Wiped = map[string]int64{}
		for _, kv := range kvs {
			key, _, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), etcdLockPrefix+"/"), "/")
			if !ok {
				continue
			}
			if r, seen := d.Wiped[key]; !seen || kv.CreateRevision < r {
				d.Wiped[key] = kv.CreateRevision
			}
		}
		deleted += len(kvs)
		out = append(out, d)
	}
	if out == nil {
		return "etcd", strings.Join(notes, "; "), nil, errors.New("no deletion applied (the load phase ended first)")
	}
	detail := fmt.Sprintf("%d hold keys deleted in %d rounds", deleted, len(out))
	if notes != nil {
		detail += "; " + strings.Join(notes, "; ")
	}
	return "etcd", detail, out, nil
}

// settleRound finds out whether the round that creates marker was
// applied, by putting the marker (retried until etcdSettleTimeout): if it
// was there, the round was applied at its create revision R, and held is
// what the lock prefix held at R-1, which the round deleted.
func settleRound(ctx context.Context, cli *clientv3.Client, marker string) (applied bool, held []*mvccpb.KeyValue, err error) {
	deadline := time.Now().Add(etcdSettleTimeout)
	for {
		rctx, cancel := context.WithTimeout(ctx, etcdRoundTimeout)
		var pr *clientv3.PutResponse
		if pr, err = cli.Put(rctx, marker, "", clientv3.WithPrevKV()); err == nil && pr.PrevKv == nil {
			cancel()
			return false, nil, nil
		}
		if err == nil {
			var g *clientv3.GetResponse
			if g, err = cli.Get(rctx, etcdLockPrefix+"/", clientv3.WithPrefix(), clientv3.WithRev(pr.PrevKv.CreateRevision-1)); err == nil {
				cancel()
				return true, g.Kvs, nil
			}
		}
		cancel()
		if time.Now().After(deadline) {
			return false, nil, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// etcdKill kills n with SIGKILL, waits d and starts it again from its data
// directory (its keys, leases and raft log survive), waiting until it
// serves.
func etcdKill(ctx context.Context, n *testserver.EtcdNode, d time.Duration) error {
	n.Kill()
	sleepCtx(ctx, d)
	return n.Start()
}

// etcdPause stops n with SIGSTOP for d, then continues it.
func etcdPause(ctx context.Context, n *testserver.EtcdNode, d time.Duration) error {
	if err := n.Pause(); err != nil {
		return err
	}
	sleepCtx(ctx, d)
	return n.Resume()
}

// healEtcd resumes every member, starts the ones killed, and waits until
// each serves (has a leader): no lock is granted without a quorum, and the
// liveness check counts from the heal.
func healEtcd(c *testserver.Etcd) error {
	var errs []error
	for i, n := range c.Nodes() {
		if err := c.IsolateMember(i, false); err != nil {
			errs = append(errs, err)
		}
		n.Resume()
		if err := n.Start(); err != nil {
			errs = append(errs, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), etcdHealWait)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		errs = append(errs, fmt.Errorf("etcd not serving %v after the heal: %w", etcdHealWait, err))
	}
	return errors.Join(errs...)
}
