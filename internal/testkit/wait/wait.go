// Package wait bounds the waits of tests that run on real time: a test
// that must observe a background action of a real server, client or
// process polls for it, and fails with a message, never hangs, when it does
// not happen in time. Tests on a fake clock or under testing/synctest do
// not need it: synctest.Wait tells them when the background is idle.
//
// Only tests use it.
package wait

import (
	"testing"
	"time"
)

// maxPause is the longest pause between two polls.
const maxPause = 5 * time.Millisecond

// Until polls cond, with pauses that grow from a microsecond to a few
// milliseconds, until it holds or within has passed. It reports whether
// cond held. Fuzz targets, which must not fail from a helper goroutine, use
// it; tests use For.
func Until(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for pause := time.Microsecond; !cond(); pause = min(2*pause, maxPause) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
	return true
}

// For polls cond until it holds, and fails t with what if it does not
// within the bound.
func For(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(within, cond) {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// Recv waits at most within for ch to yield a value or close, and reports
// the value and whether one came (false also when ch was closed).
func Recv[T any](ch <-chan T, within time.Duration) (T, bool) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v, ok := <-ch:
		return v, ok
	case <-timer.C:
		var zero T
		return zero, false
	}
}

// Chan waits at most within for ch to yield a value or close, and fails t
// with what if neither happens. It returns the value, if any.
func Chan[T any](t testing.TB, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", within, what)
		panic("unreachable")
	}
}
