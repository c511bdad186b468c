package semaphore_test

import (
	"context"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/semaphore"
)

// At most 10 calls to a rate-limited partner at once, across every
// instance of the service.
func ExampleClient_Acquire() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	sem := semaphore.New(rdb, semaphore.WithPermits(10))
	defer sem.Close()
	ctx := context.Background()

	err := lock.Do(ctx, sem, "partner-api", func(ctx context.Context) error {
		permits, held, _ := sem.Usage(ctx, "partner-api")
		fmt.Printf("calling the partner: %d of %d permits in use\n", held, permits)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// calling the partner: 1 of 10 permits in use
	// err: <nil>
}
