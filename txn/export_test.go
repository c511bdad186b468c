package txn

// SetTestHook sets the hook the XA driver calls after each branch is
// prepared or committed (nil: none). Not safe to change during a Run.
func SetTestHook(f func(gid int64, branch int, step string)) { testHook = f }
