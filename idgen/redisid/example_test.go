package redisid_test

import (
	"context"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/idgen/redisid"
)

func ExampleSegments() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	defer rdb.Del(ctx, redisid.DefaultPrefix+"order", redisid.DefaultPrefix+"user") // leaves Redis as it was

	segs, err := redisid.NewSegments(rdb) // one client for every tag
	if err != nil {
		panic(err)
	}
	defer segs.Close() // stops the background fetches

	for range 3 {
		id, _ := segs.Next(ctx, "order")
		fmt.Print(id, " ")
	}
	user, _ := segs.For("user")
	id, _ := user.Next(ctx)
	fmt.Println(id)
	// Output: 1 2 3 1
}

func ExampleHash() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	defer rdb.Del(ctx, "user_table_key") // leaves Redis as it was

	// As created by hand: HSET user_table_key offset 1 step 5 current 1 start 0
	if _, err := redisid.CreateHash(ctx, rdb, "user_table_key", 1, 5); err != nil {
		panic(err)
	}
	h, _ := redisid.NewHash(rdb, "user_table_key")
	for range 4 {
		id, _ := h.Next(ctx)
		fmt.Print(id, " ")
	}
	fmt.Println()
	// Output: 1 6 11 16
}

func ExampleCounter_NextN() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	defer rdb.Del(ctx, "invoice") // leaves Redis as it was

	c, _ := redisid.NewCounter(rdb, "invoice")
	id, _ := c.Next(ctx)
	first, _ := c.NextN(ctx, 100) // the caller owns [first, first+100)
	next, _ := c.Next(ctx)
	fmt.Println(id, first, next)
	// Output: 1 2 102
}

func ExampleParse() {
	// hengyunabc's example: 2015-03-13 10:00:00 CST, logical shard 53,
	// sequence 4, as the 4-tuple a TIME script answers.
	id, _ := redisid.FromReply(1426212000, 0, 53, 4)
	p, _ := redisid.Parse(id)
	fmt.Println(id)
	fmt.Println(p.Time, p.Shard, p.Sequence)
	fmt.Println(redisid.End)
	// Output:
	// 5981966696448054276
	// 2015-03-13 02:00:00 +0000 UTC 53 4
	// 2039-09-07 15:47:35.551 +0000 UTC
}

func ExampleTime() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	defer rdb.Del(ctx, redisid.DefaultTimePrefix+"{order}:seq", redisid.DefaultTimePrefix+"{order}:last")

	// One node here; pass every node of the deployment in the same order
	// in every client.
	c, err := redisid.NewTime(redisid.Nodes(rdb))
	if err != nil {
		panic(err)
	}
	userID := int64(123456789)
	id, _ := c.Next(ctx, "order", userID%4096)
	p, _ := redisid.Parse(id)
	fmt.Println(p.Shard, p.Sequence)
	// Output: 3349 0
}
