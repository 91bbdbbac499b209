package clock

import (
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// bootIDFile names the current boot of a Linux machine.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// bootID is read once: it cannot change while the process runs.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile(bootIDFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

type realBoot struct{}

// ReadBoot returns the boot id and CLOCK_BOOTTIME, which, unlike
// CLOCK_MONOTONIC, counts the time the machine was suspended.
func (realBoot) ReadBoot() (string, time.Duration, bool) {
	id := bootID()
	if id == "" {
		return "", 0, false
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return "", 0, false
	}
	return id, time.Duration(ts.Nano()), true
}
