package semaphore

// SetZKHookBeforePermit sets the function a ZooKeeper acquisition calls
// with the semaphore's name once it has decided, under the acquirers'
// mutex, to take a permit, just before it creates it; restore puts the
// previous one back. For tests that must act at that moment.
func SetZKHookBeforePermit(f func(name string)) (restore func()) {
	old := zkHookBeforePermit
	zkHookBeforePermit = f
	return func() { zkHookBeforePermit = old }
}
