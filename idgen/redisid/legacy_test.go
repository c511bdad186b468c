package redisid_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/idgen/redisid"
)

// TestSegmentLegacyKey: with the default prefix, a tag whose counter an
// older coordkit kept under LegacyPrefix goes on from it, and shares it with
// a process of the older version (a rolling upgrade: no ID twice); a new tag
// is counted under DefaultPrefix and creates no legacy key; an explicit
// prefix uses its own key only.
func TestSegmentLegacyKey(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	tag := strings.ReplaceAll(uniqueKey(t), ":", ".")
	legacy, fresh := tag+".legacy", tag+".fresh"
	rdb.Set(ctx, redisid.LegacyPrefix+legacy, 5000, 0)
	t.Cleanup(func() {
		rdb.Del(ctx, redisid.LegacyPrefix+legacy, redisid.DefaultPrefix+fresh)
	})
	s := newSegments(t, rdb, redisid.WithStepBounds(1000, 1000))

	g, _ := s.For(legacy)
	first, err := g.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first != 5001 || g.Key() != redisid.LegacyPrefix+legacy {
		t.Fatalf("first ID %d from %q, want 5001 from the legacy counter", first, g.Key())
	}
	// A process of the older version reserves its segment from the same key.
	oldEnd, err := rdb.IncrBy(ctx, redisid.LegacyPrefix+legacy, 1000).Result()
	if err != nil {
		t.Fatal(err)
	}
	for range 3000 {
		id, err := g.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if id > oldEnd-1000 && id <= oldEnd {
			t.Fatalf("ID %d is in the older process's segment (%d, %d]", id, oldEnd-1000, oldEnd)
		}
	}
	if n := rdb.Exists(ctx, redisid.DefaultPrefix+legacy).Val(); n != 0 {
		t.Errorf("a tag with a legacy counter created %q", redisid.DefaultPrefix+legacy)
	}

	f, _ := s.For(fresh)
	if id, err := f.Next(ctx); err != nil || id != 1 {
		t.Fatalf("first ID of a new tag = %d, %v; want 1", id, err)
	}
	if f.Key() != redisid.DefaultPrefix+fresh || rdb.Exists(ctx, redisid.LegacyPrefix+fresh).Val() != 0 {
		t.Fatalf("new tag counted under %q", f.Key())
	}

	own := newSegments(t, rdb, redisid.WithPrefix(uniqueKey(t)+":"))
	o, _ := own.For(legacy)
	if id, err := o.Next(ctx); err != nil || id != 1 {
		t.Fatalf("explicit prefix: first ID %d, %v; want 1 (its own key, not the legacy one)", id, err)
	}
}

// TestSegmentBothKeys: when a tag has both keys (the default one is the
// newer), the default one is used.
func TestSegmentBothKeys(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	tag := strings.ReplaceAll(uniqueKey(t), ":", ".")
	rdb.Set(ctx, redisid.LegacyPrefix+tag, 5000, 0)
	rdb.Set(ctx, redisid.DefaultPrefix+tag, 9000, 0)
	t.Cleanup(func() { rdb.Del(ctx, redisid.LegacyPrefix+tag, redisid.DefaultPrefix+tag) })
	s := newSegments(t, rdb)
	if id, err := s.Next(ctx, tag); err != nil || id != 9001 {
		t.Fatalf("first ID = %d, %v; want 9001", id, err)
	}
}

// TestTimeLegacyKeys: while a tag's legacy mark exists, the script reads and
// writes the legacy keys (which processes of older versions use); a new tag
// uses the default keys only; an explicit prefix ignores the legacy keys.
func TestTimeLegacyKeys(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	tag := strings.NewReplacer(":", ".").Replace(uniqueKey(t))
	old := redisid.LegacyTimePrefix + "{" + tag + "}"
	cur := redisid.DefaultTimePrefix + "{" + tag + "}"
	t.Cleanup(func() { rdb.Del(ctx, old+":last", old+":seq", cur+":last", cur+":seq") })
	c := newTime(t, []redis.UniversalClient{rdb})

	if _, err := c.Next(ctx, tag, 7); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, cur+":last", cur+":seq").Val() != 2 || rdb.Exists(ctx, old+":last", old+":seq").Val() != 0 {
		t.Fatal("a new tag did not use the default keys only")
	}

	// An older process left its mark a second ahead (its clock, or ours
	// stepped back): the legacy state is the one that counts.
	future := time.Now().Add(time.Second).UnixMilli()
	rdb.Set(ctx, old+":last", future, 0)
	if _, err := c.Next(ctx, tag, 7); !errors.Is(err, redisid.ErrClockBackwards) {
		t.Fatalf("err = %v, want ErrClockBackwards from the legacy mark", err)
	}
	rdb.Set(ctx, old+":last", time.Now().Add(-time.Second).UnixMilli(), 0)
	id, err := c.Next(ctx, tag, 7)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := redisid.Parse(id)
	if m, _ := rdb.HGet(ctx, old+":seq", "m7").Int64(); m != p.Time.UnixMilli() {
		t.Fatalf("legacy sequence hash has m7 = %d, want the ID's millisecond %d", m, p.Time.UnixMilli())
	}

	own := newTime(t, []redis.UniversalClient{rdb}, redisid.WithTimeKeyPrefix(redisid.LegacyTimePrefix+"x:"))
	rdb.Set(ctx, old+":last", future, 0)
	if _, err := own.Next(ctx, tag, 7); err != nil {
		t.Fatalf("explicit prefix: %v (it must not read the legacy keys)", err)
	}
	rdb.Del(ctx, redisid.LegacyTimePrefix+"x:{"+tag+"}:last", redisid.LegacyTimePrefix+"x:{"+tag+"}:seq")
}

// TestPrefixOptions: an empty prefix (or a brace in the TIME prefix) is an
// error at construction.
func TestPrefixOptions(t *testing.T) {
	rdb := sharedClient(t)
	if _, err := redisid.NewSegments(rdb, redisid.WithPrefix("")); !errors.Is(err, redisid.ErrBadOption) {
		t.Errorf("NewSegments(WithPrefix(\"\")) err = %v, want ErrBadOption", err)
	}
	for _, p := range []string{"", "a{b:", "a}"} {
		if _, err := redisid.NewTime(redisid.Nodes(rdb), redisid.WithTimeKeyPrefix(p)); !errors.Is(err, redisid.ErrBadOption) {
			t.Errorf("NewTime(WithTimeKeyPrefix(%q)) err = %v, want ErrBadOption", p, err)
		}
	}
}

// TestInvalidErrors: every invalid-argument error matches ErrInvalid, and
// no other error does.
func TestInvalidErrors(t *testing.T) {
	for _, err := range []error{redisid.ErrEmptyTag, redisid.ErrBadTag, redisid.ErrEmptyKey, redisid.ErrBadStep,
		redisid.ErrBadOption, redisid.ErrBadShard, redisid.ErrBadNode, redisid.ErrBadID} {
		if !errors.Is(err, redisid.ErrInvalid) {
			t.Errorf("%v does not match ErrInvalid", err)
		}
	}
	for _, err := range []error{redisid.ErrClosed, redisid.ErrCorrupt, redisid.ErrBusy, redisid.ErrClockBackwards} {
		if errors.Is(err, redisid.ErrInvalid) {
			t.Errorf("%v matches ErrInvalid", err)
		}
	}
	_, err := redisid.NewSegments(sharedClient(t), redisid.WithStep(-1))
	if !errors.Is(err, redisid.ErrInvalid) || !errors.Is(err, redisid.ErrBadStep) {
		t.Errorf("NewSegments(WithStep(-1)) err = %v, want ErrBadStep and ErrInvalid", err)
	}
}
