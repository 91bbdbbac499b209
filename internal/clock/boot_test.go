package clock

import (
	"runtime"
	"testing"
	"time"
)

// TestRealBoot: on Linux the boot clock is read, names the boot, and does
// not go back; elsewhere it is never ok.
func TestRealBoot(t *testing.T) {
	id, a, ok := RealBoot().ReadBoot()
	if runtime.GOOS != "linux" {
		if ok {
			t.Fatalf("boot clock read on %s: %q %v", runtime.GOOS, id, a)
		}
		return
	}
	if !ok || id == "" || a <= 0 {
		t.Fatalf("ReadBoot = %q, %v, %v; want the boot id and the time since boot", id, a, ok)
	}
	id2, b, ok := RealBoot().ReadBoot()
	if !ok || id2 != id || b < a {
		t.Fatalf("second ReadBoot = %q, %v, %v after %q, %v", id2, b, ok, id, a)
	}
}

// TestFakeBoot: a fake boot clock follows its base clock, moves alone with
// Advance, and starts again from zero, in another boot, with Reboot.
func TestFakeBoot(t *testing.T) {
	base := NewFake()
	b := NewFakeBoot(base)
	id, start, _ := b.ReadBoot()
	base.Advance(time.Second)
	if _, got, _ := b.ReadBoot(); got != start+time.Second {
		t.Fatalf("after the base clock moved 1s: %v, want %v", got, start+time.Second)
	}
	if _, got, _ := NewFakeBoot(base).ReadBoot(); got != start+time.Second {
		t.Fatalf("another fake over the same base reads %v, want %v", got, start+time.Second)
	}
	b.Advance(time.Hour)
	if _, got, _ := b.ReadBoot(); got != start+time.Second+time.Hour {
		t.Fatalf("after Advance(1h): %v, want %v", got, start+time.Second+time.Hour)
	}
	b.Reboot("next")
	if id2, got, ok := b.ReadBoot(); id2 != "next" || id2 == id || got != 0 || !ok {
		t.Fatalf("after Reboot: %q, %v, %v; want the new id at 0", id2, got, ok)
	}
}
