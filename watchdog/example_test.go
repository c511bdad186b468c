package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordkit/coordkit/watchdog"
)

func ExampleStart() {
	renewals := 0
	w, err := watchdog.Start(watchdog.Config{
		TTL: 1500 * time.Millisecond, // renewed every 500 ms
		Renew: func(ctx context.Context) error {
			renewals++
			if renewals == 3 {
				return watchdog.ErrNotHeld // the server no longer knows the lease
			}
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	defer w.Stop()
	<-w.Lost()
	fmt.Println(errors.Is(w.Err(), watchdog.ErrNotHeld), renewals)
	// Output: true 3
}
