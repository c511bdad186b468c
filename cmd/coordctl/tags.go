package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/idgen/redisid"
)

func init() {
	register(command{name: "tags add", summary: "register ID tags that coordctl serve may serve", run: tagsAdd})
	register(command{name: "tags list", summary: "list the registered ID tags and their counters", run: tagsList})
	register(command{name: "tags remove", summary: "unregister ID tags (their counters are kept)", run: tagsRemove})
}

// defaultTagsKey is the Redis set of the tags coordctl serve serves when
// --tags is not given.
const defaultTagsKey = "coordkit:id:tags"

// tagsFlags are the flags of the tags commands.
func tagsFlags(fs *flag.FlagSet, e *env) (*conn, *string) {
	var c conn
	c.addRedis(fs, e)
	key := fs.String("tags-key", defaultTagsKey, "the Redis set of registered tags (coordctl serve --tags-key)")
	return &c, key
}

func tagsAdd(e *env, args []string) error {
	fs := newFlags(e, "tags add", "TAG...", "Registers each TAG in the Redis set --tags-key: coordctl serve without --tags\n"+
		"serves the tags of that set (within a second of their registration).")
	c, key := tagsFlags(fs, e)
	tags, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := checkTags(tags); err != nil {
		return err
	}
	return withRedis(e, c, func(ctx context.Context, rdb redis.UniversalClient) error {
		members := make([]any, len(tags))
		for i, t := range tags {
			members[i] = t
		}
		n, err := rdb.SAdd(ctx, *key, members...).Result()
		if err != nil {
			return fmt.Errorf("add to %s: %w", *key, err)
		}
		fmt.Fprintf(e.out, "registered %d new tag(s) of %d\n", n, len(tags))
		return nil
	})
}

func tagsRemove(e *env, args []string) error {
	fs := newFlags(e, "tags remove", "TAG...", "Removes each TAG from the Redis set --tags-key: coordctl serve stops serving it\n"+
		"within 5 seconds. Its counter is kept, so IDs go on from it if it is added again.\n"+
		"Exits 1 if a TAG was not registered (the others are removed all the same).")
	c, key := tagsFlags(fs, e)
	tags, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := checkTags(tags); err != nil {
		return err
	}
	return withRedis(e, c, func(ctx context.Context, rdb redis.UniversalClient) error {
		// One SREM per tag, in one round trip: each answers whether that
		// tag was registered.
		cmds := make([]*redis.IntCmd, len(tags))
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, t := range tags {
				cmds[i] = p.SRem(ctx, *key, t)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("remove from %s: %w", *key, err)
		}
		var removed, missing []string
		for i, cmd := range cmds {
			if cmd.Val() > 0 {
				removed = append(removed, tags[i])
			} else if !slices.Contains(missing, tags[i]) && !slices.Contains(removed, tags[i]) {
				missing = append(missing, tags[i])
			}
		}
		if len(removed) > 0 {
			fmt.Fprintf(e.out, "removed %s\n", strings.Join(removed, ", "))
		}
		if len(missing) > 0 {
			// As rm does: what could be removed was, and the exit status
			// says that not everything named was there.
			return fmt.Errorf("not registered in %s: %s (coordctl tags list shows the tags)", *key, strings.Join(missing, ", "))
		}
		return nil
	})
}

// tagView is one registered tag and the value of its counter.
type tagView struct {
	Tag string `json:"tag"`
	// Counter is the last ID reserved in Redis for the tag (every process's
	// segments lie at or below it); 0 before the first fetch.
	Counter    int64  `json:"counter"`
	CounterKey string `json:"counter_key"`
}

func tagsList(e *env, args []string) error {
	fs := newFlags(e, "tags list", "", "Lists the tags of the Redis set --tags-key, each with its segment counter\n"+
		"(the last ID reserved in Redis).")
	c, key := tagsFlags(fs, e)
	asJSON := addJSON(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	return withRedis(e, c, func(ctx context.Context, rdb redis.UniversalClient) error {
		tags, err := rdb.SMembers(ctx, *key).Result()
		if err != nil {
			return fmt.Errorf("read %s: %w", *key, err)
		}
		sort.Strings(tags)
		views := make([]tagView, 0, len(tags))
		for _, t := range tags {
			v, err := readCounter(ctx, rdb, t)
			if err != nil {
				return err
			}
			views = append(views, v)
		}
		if *asJSON {
			return writeJSON(e.out, views)
		}
		if len(views) == 0 {
			fmt.Fprintf(e.out, "(no tag is registered in %s)\n", *key)
			return nil
		}
		tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TAG\tCOUNTER\tKEY")
		for _, v := range views {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", v.Tag, v.Counter, v.CounterKey)
		}
		return tw.Flush()
	})
}

// readCounter reads a tag's segment counter: redisid's key, or its legacy
// key when only that one exists (as redisid chooses).
func readCounter(ctx context.Context, rdb redis.UniversalClient, tag string) (tagView, error) {
	v := tagView{Tag: tag, CounterKey: redisid.DefaultPrefix + tag}
	n, err := rdb.Get(ctx, v.CounterKey).Int64()
	if errors.Is(err, redis.Nil) {
		legacy := redisid.LegacyPrefix + tag
		if n, err = rdb.Get(ctx, legacy).Int64(); err == nil {
			v.CounterKey = legacy
		}
	}
	switch {
	case err == nil:
		v.Counter = n
	case !errors.Is(err, redis.Nil):
		return v, fmt.Errorf("read the counter of %q: %w", tag, err)
	}
	return v, nil
}

func checkTags(tags []string) error {
	if len(tags) == 0 {
		return usagef("want at least one TAG")
	}
	for _, t := range tags {
		if !validTag(t) {
			return usagef("tag %q is not 1 to 64 of A-Z a-z 0-9 _ . : -", t)
		}
	}
	return nil
}

// withRedis runs f with a connected client, bounded by the timeout.
func withRedis(e *env, c *conn, f func(context.Context, redis.UniversalClient) error) error {
	ctx, cancel := context.WithTimeout(e.ctx, c.timeout)
	defer cancel()
	rdb, err := c.redisClient(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	return f(ctx, rdb)
}
