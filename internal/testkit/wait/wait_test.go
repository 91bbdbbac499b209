package wait

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ready := start.Add(50 * time.Millisecond)
		if !Until(time.Second, func() bool { return !time.Now().Before(ready) }) {
			t.Fatal("Until gave up on a condition that came true within its bound")
		}
		if got := time.Since(start); got < 50*time.Millisecond || got > 50*time.Millisecond+maxPause {
			t.Errorf("Until returned %v after the start, want within %v of 50ms", got, maxPause)
		}
		start = time.Now()
		if Until(time.Second, func() bool { return false }) {
			t.Fatal("Until reported a condition that never held")
		}
		if got := time.Since(start); got < time.Second || got > time.Second+maxPause {
			t.Errorf("Until gave up after %v, want about 1s", got)
		}
	})
}

func TestRecv(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ch := make(chan int, 1)
		go func() {
			time.Sleep(10 * time.Millisecond)
			ch <- 7
		}()
		if v, ok := Recv(ch, time.Second); !ok || v != 7 {
			t.Fatalf("Recv = %d, %v; want 7, true", v, ok)
		}
		start := time.Now()
		if _, ok := Recv(ch, time.Second); ok {
			t.Fatal("Recv reported a value from an empty channel")
		}
		if got := time.Since(start); got != time.Second {
			t.Errorf("Recv gave up after %v, want 1s", got)
		}
		close(ch)
		if _, ok := Recv(ch, time.Second); ok {
			t.Fatal("Recv on a closed channel reported a value")
		}
		if v := Chan(t, ch, time.Second, "the close"); v != 0 {
			t.Fatalf("Chan on a closed channel = %d, want 0", v)
		}
	})
}
