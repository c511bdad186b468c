package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/zklock"
)

// LockNode is one znode in a zk key's line when the clients were told to
// stop: what a stuck key's report shows, so that a key nobody obtained
// after the heal names the node it waited behind.
type LockNode struct {
	Name    string `json:"name"`
	Owner   string `json:"owner"`   // the node's data: the owner of the attempt that created it
	Session string `json:"session"` // ephemeralOwner, hex
	Czxid   int64  `json:"czxid"`
	AgeMs   int64  `json:"age_ms"` // since the node's ctime, by the server's clock
}

// dumpZKLines lists, for each key, the lock nodes queued under it on the
// ensemble at addrs (the clients' root: -zkroot's default), ordered by
// sequence. It runs before the clients stop, while their sessions live.
func dumpZKLines(addrs []string, keys []string) (map[string][]LockNode, error) {
	conn, events, err := zk.Connect(addrs, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	go func() { // drains the event channel; ends when conn is closed
		for range events {
		}
	}()
	// Bounded: a request waits while no member answers; closing conn
	// fails it.
	t := time.AfterFunc(15*time.Second, conn.Close)
	defer t.Stop()
	lc, err := zklock.New(conn, zklock.WithRoot("/chaos"))
	if err != nil {
		return nil, err
	}
	defer lc.Close()
	out := map[string][]LockNode{}
	for _, key := range keys {
		path, err := lc.Path(key)
		if err != nil {
			return nil, err
		}
		names, _, err := conn.Children(path)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", path, err)
		}
		for _, name := range names {
			data, st, err := conn.Get(path + "/" + name)
			if errors.Is(err, zk.ErrNoNode) {
				continue // went meanwhile
			}
			if err != nil {
				return nil, fmt.Errorf("reading %s/%s: %w", path, name, err)
			}
			out[key] = append(out[key], LockNode{Name: name, Owner: string(data),
				Session: fmt.Sprintf("%#x", st.EphemeralOwner), Czxid: st.Czxid,
				AgeMs: time.Now().UnixMilli() - st.Ctime})
		}
		sort.Slice(out[key], func(i, j int) bool { return seqOf(out[key][i].Name) < seqOf(out[key][j].Name) })
	}
	return out, nil
}

// seqOf is a lock node's sequence suffix (its last ten digits).
func seqOf(name string) string {
	if i := strings.LastIndexByte(name, '-'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// describeLine is a stuck key's line for its report.
func describeLine(nodes []LockNode) string {
	if len(nodes) == 0 {
		return "no lock nodes were queued on it when the clients were told to stop"
	}
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = fmt.Sprintf("%s (owner %s, session %s, czxid %d, %d ms old)", n.Name, n.Owner, n.Session, n.Czxid, n.AgeMs)
	}
	return fmt.Sprintf("its line when the clients were told to stop (%d nodes, first holds): %s", len(nodes), strings.Join(parts, "; "))
}
