package clock

import (
	"sync"
	"time"
)

// Boot reads the machine's boot clock: the time since the machine booted,
// counting the time it was suspended, which setting the wall clock (an NTP
// step, an operator) does not move, and the id of the current boot, which
// changes when the machine reboots. A restarted server measures with it how
// long it was down (core.Config.BootClock). Every implementation is safe
// for concurrent use.
type Boot interface {
	// ReadBoot returns the id of the current boot and the time since it
	// began. ok is false where the system cannot tell: then neither may
	// be trusted.
	ReadBoot() (id string, since time.Duration, ok bool)
}

// RealBoot returns the system's boot clock: on Linux, the boot id of
// /proc/sys/kernel/random/boot_id and CLOCK_BOOTTIME; elsewhere, a clock
// whose ReadBoot is never ok.
func RealBoot() Boot { return realBoot{} }

// OrRealBoot returns b, or the system's boot clock when b is nil.
func OrRealBoot(b Boot) Boot {
	if b == nil {
		return RealBoot()
	}
	return b
}

// bootEpoch is when the machine of a FakeBoot booted, as its base clock
// tells time.
var bootEpoch = time.Unix(0, 0)

// FakeBoot is a boot clock for tests. The time since boot it reads is the
// time its base clock shows past the Unix epoch (as if the machine had
// booted then), plus what Advance added: advancing a fake base clock is
// time passing, and moves both, while a test that steps the wall clock (a
// new fake clock set hours ahead) and advances the boot clock alone tells
// the two apart. Two FakeBoots over the same base read alike until one is
// advanced or rebooted.
type FakeBoot struct {
	base Clock

	mu     sync.Mutex // guards id and offset
	id     string
	offset time.Duration
}

// NewFakeBoot returns a boot clock that follows base (nil: the system
// clock, which in a testing/synctest bubble is the bubble's), in the boot
// "fake-boot".
func NewFakeBoot(base Clock) *FakeBoot {
	return &FakeBoot{base: OrReal(base), id: "fake-boot"}
}

// ReadBoot returns the boot id and the time since boot; it is always ok.
func (b *FakeBoot) ReadBoot() (string, time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.id, b.base.Now().Sub(bootEpoch) + b.offset, true
}

// Advance moves the boot clock by d, and not the base clock.
func (b *FakeBoot) Advance(d time.Duration) {
	b.mu.Lock()
	b.offset += d
	b.mu.Unlock()
}

// Reboot starts a new boot named id: the time since boot begins again
// from zero.
func (b *FakeBoot) Reboot(id string) {
	b.mu.Lock()
	b.id = id
	b.offset = -b.base.Now().Sub(bootEpoch)
	b.mu.Unlock()
}
