package etcdlock

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Entry is one hold key of a lock: its holder's, or a waiter's.
type Entry struct {
	// Owner is the owner its Obtain's ctx carried (lock.WithOwner), "" if
	// none.
	Owner string
	// Lease is the etcd lease the key carries (the Client's lease).
	Lease int64
	// Token is the key's create revision: the holder's fencing token.
	Token int64
	// Path is the etcd key, "<prefix>/<key>/<lease hex>-<n>".
	Path string
}

// Info is the state of one lock, as Inspect reads it.
type Info struct {
	Key string
	// Holder is the first hold key (the lowest create revision), the zero
	// Entry when the lock is free.
	Holder Entry
	// TTL is what remains of the holder's lease, as the server sees it (0
	// when free).
	TTL time.Duration
	// Waiters are the other hold keys, in the order they will hold.
	Waiters []Entry
}

// Held reports whether the lock is held.
func (i Info) Held() bool { return i.Holder.Path != "" }

func entry(kv *mvccpb.KeyValue) Entry {
	return Entry{Owner: string(kv.Value), Lease: kv.Lease, Token: kv.CreateRevision, Path: string(kv.Key)}
}

// Holder returns the owner holding key and its fencing token (the hold
// key's create revision), or "" and 0 when key is free. The owner is what
// its Obtain's ctx carried (lock.WithOwner, as lock.Do sets); a hold
// obtained without an owner in ctx has none, and Holder returns its hold
// key's last element (the lease in hex and the attempt's number) instead. One round trip, read-only.
// lock.Client, redlock.Client and zklock.Client have the same method;
// package election reads the leader through it.
func (c *Client) Holder(ctx context.Context, key string) (owner string, token int64, err error) {
	if err := validKey(key); err != nil {
		return "", 0, err
	}
	resp, err := c.cli.Get(ctx, c.prefix+"/"+key+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", 0, fmt.Errorf("etcdlock: holder of %q: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0, nil
	}
	e := entry(resp.Kvs[0])
	if e.Owner == "" {
		e.Owner = path.Base(e.Path)
	}
	return e.Owner, e.Token, nil
}

// Inspect reads the state of key's lock, for operators and tests: the hold
// keys (one round trip) and, when held, the holder's lease's remaining TTL
// (a second one).
func (c *Client) Inspect(ctx context.Context, key string) (Info, error) {
	if err := validKey(key); err != nil {
		return Info{}, err
	}
	info := Info{Key: key}
	resp, err := c.cli.Get(ctx, c.prefix+"/"+key+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return info, fmt.Errorf("etcdlock: inspect %q: %w", key, err)
	}
	for i, kv := range resp.Kvs {
		if i == 0 {
			info.Holder = entry(kv)
		} else {
			info.Waiters = append(info.Waiters, entry(kv))
		}
	}
	if info.Held() {
		ttl, err := c.cli.TimeToLive(ctx, clientv3.LeaseID(info.Holder.Lease))
		if err != nil {
			return info, fmt.Errorf("etcdlock: inspect %q: lease %s: %w", key, strconv.FormatInt(info.Holder.Lease, 16), err)
		}
		if ttl.TTL > 0 {
			info.TTL = time.Duration(ttl.TTL) * time.Second
		}
	}
	return info, nil
}

// ForceRelease deletes key's holder's hold key, whoever holds it, which
// passes the lock to the next waiter; the next holder's token is larger
// still. It returns whether a hold was deleted. For operators: the former
// holder is not told until its Release returns lock.ErrNotHeld, and while
// it runs there is no mutual exclusion (fencing tokens protect the
// resources that check them).
func (c *Client) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := validKey(key); err != nil {
		return false, err
	}
	resp, err := c.cli.Get(ctx, c.prefix+"/"+key+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return false, fmt.Errorf("etcdlock: force-release %q: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return false, nil
	}
	kv := resp.Kvs[0]
	tx, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)).
		Then(clientv3.OpDelete(string(kv.Key))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("etcdlock: force-release %q: %w", key, err)
	}
	return tx.Succeeded, nil
}
