package zklock

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/go-zookeeper/zk"
)

// Holder returns the owner holding key's exclusive lock (Obtain, or the
// write side) and its fencing token (the lock node's czxid), or "" and 0
// when it is free or held by readers only. The owner is what its Obtain's
// ctx carried (lock.WithOwner, as lock.Do sets), which the lock node keeps
// as its data; a hold obtained without an owner in ctx has none, and
// Holder returns its node's name instead. Two round trips (the children,
// then the first node's data), read-only. lock.Client and redlock.Client
// have the same method; package election reads the leader through it.
func (c *Client) Holder(ctx context.Context, key string) (owner string, token int64, err error) {
	esc, err := escapeKey(key)
	if err != nil {
		return "", 0, err
	}
	parent := c.root + "/" + esc
	for {
		var names []string
		err := c.call(ctx, func() (err error) { names, _, err = c.conn.Children(parent); return err })
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return "", 0, nil
		case err != nil:
			return "", 0, fmt.Errorf("zklock: holder of %q: %w", key, err)
		}
		var nodes []node
		for _, name := range names {
			if n, ok := parseNode(name); ok {
				nodes = append(nodes, n)
			}
		}
		if len(nodes) == 0 {
			return "", 0, nil
		}
		sort.Slice(nodes, func(i, j int) bool { return nodes[i].seq < nodes[j].seq })
		first := nodes[0]
		if !first.kind.exclusive() {
			return "", 0, nil
		}
		var data []byte
		var st *zk.Stat
		err = c.call(ctx, func() (err error) { data, st, err = c.conn.Get(parent + "/" + first.name); return err })
		switch {
		case errors.Is(err, zk.ErrNoNode):
			continue // released meanwhile: look again
		case err != nil:
			return "", 0, fmt.Errorf("zklock: holder of %q: %w", key, err)
		}
		if len(data) == 0 {
			return first.name, st.Czxid, nil
		}
		return string(data), st.Czxid, nil
	}
}

// Path returns the znode under which key's lock nodes queue,
// "<root>/<escaped key>" (see the package documentation): for tools that
// list or watch the line themselves.
func (c *Client) Path(key string) (string, error) {
	esc, err := escapeKey(key)
	if err != nil {
		return "", err
	}
	return c.root + "/" + esc, nil
}
