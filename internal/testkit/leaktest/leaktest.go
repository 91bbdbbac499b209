// Package leaktest checks that a test leaves no goroutine behind. Only
// tests use it.
package leaktest

import (
	"testing"

	"go.uber.org/goleak"
)

// Check fails t if goroutines started during t are still running once all
// of its cleanups (clients, servers, helper processes) have run. Call it
// first, so that its cleanup runs last. A test that already failed is not
// checked: the failure is the news, and a leak would only add noise.
func Check(t testing.TB) {
	t.Helper()
	opts := []goleak.Option{goleak.IgnoreCurrent()}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		if err := goleak.Find(opts...); err != nil {
			t.Errorf("goroutines leaked: %v", err)
		}
	})
}
