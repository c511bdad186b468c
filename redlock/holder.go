package redlock

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Holder returns the owner holding key on a quorum of masters and the
// largest fencing token those masters recorded for its hold, or "" and 0
// when no owner holds a quorum (free, or a round in progress). It reads
// every master once (HGETALL of the lock hash), within the slow timeout;
// a silent master counts as holding nothing. lock.Client and zklock.Client
// have the same method; package election reads the leader through it.
func (c *Client) Holder(ctx context.Context, key string) (owner string, token int64, err error) {
	if _, err := c.resolve(key, nil); err != nil {
		return "", 0, err
	}
	hash := c.o.prefix + "{" + key + "}"
	rs := fanOut(c, ctx, c.o.slowTimeout(), nil, nil, nil,
		blocking(c, func(ctx context.Context, _ int, rdb redis.UniversalClient) (map[string]string, error) {
			return rdb.HGetAll(ctx, hash).Result()
		}))
	votes := map[string]int{}
	tokens := map[string]int64{}
	var errs []error
	for _, r := range rs {
		if !r.done {
			continue
		}
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		t, _ := strconv.ParseInt(r.v["\x00t"], 10, 64)
		for f := range r.v {
			if strings.HasPrefix(f, "\x00") {
				continue // a reserved field (the token, a level, a grant)
			}
			votes[f]++
			tokens[f] = max(tokens[f], t)
		}
	}
	for o, n := range votes {
		if n >= c.quorum {
			return o, tokens[o], nil
		}
	}
	if len(errs) > len(c.masters)-c.quorum { // too few answers to say it is free
		return "", 0, errors.Join(append([]error{ErrNoQuorum}, errs...)...)
	}
	return "", 0, nil
}
