package notify

import "time"

// SetSubscribeTimeout sets how long Listen waits for a confirmation;
// restore puts the previous value back.
func SetSubscribeTimeout(d time.Duration) (restore func()) {
	old := subscribeTimeout
	subscribeTimeout = d
	return func() { subscribeTimeout = old }
}
