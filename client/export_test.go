package client

// SetBeforeAckHook makes f run after an invalidation has dropped its
// entries and before the acknowledgement is sent. It returns a function
// that removes the hook.
func SetBeforeAckHook(f func()) (restore func()) {
	testHookBeforeAck.Store(&f)
	return func() { testHookBeforeAck.Store(nil) }
}
