package core

import (
	"fmt"

	"github.com/leased/leased/store"
)

// SetAlarm records, through the log, the NOSPACE alarm of member of the
// cluster, alarm (what its disk guard says), or clears it if alarm is
// empty (store.OpSetAlarm). The node that leads (package node) calls it,
// from its alarm watch's goroutine, when a member's alarm is raised or
// cleared; every replica then holds the alarms in its state, and the
// node's Config.Admit refuses writes while one is raised. It refuses with
// ErrClosed once the core is stopping, and returns the store's error, or
// the command's outcome (store.ErrInvalidCommand for an alarm out of the
// store's bounds).
func (c *Core) SetAlarm(member, alarm string) error {
	if c.stopping.Load() {
		return ErrClosed
	}
	rs, err := c.apply([]store.Command{{Op: store.OpSetAlarm, Key: []byte(member), Value: []byte(alarm)}})
	if err != nil {
		return fmt.Errorf("record the alarm of member %q: %w", member, err)
	}
	return rs[0].Err
}
