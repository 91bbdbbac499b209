package core

import (
	"errors"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/store"
)

// TestSetAlarm: SetAlarm records a member's alarm in the store, and clears
// it, taking no revision; an alarm out of the store's bounds is its
// outcome, and a core that is stopping records nothing.
func TestSetAlarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, &notices{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		alarms := func() []store.MemberAlarm {
			s, err := st.State()
			if err != nil {
				t.Fatal(err)
			}
			return s.Alarms
		}
		rev := func() uint64 {
			s, err := st.State()
			if err != nil {
				t.Fatal(err)
			}
			return s.Revision
		}
		before := rev()
		if err := c.SetAlarm("n2", "NOSPACE: 1 MiB free"); err != nil {
			t.Fatal(err)
		}
		if got, want := alarms(), []store.MemberAlarm{{Member: "n2", Alarm: "NOSPACE: 1 MiB free"}}; !reflect.DeepEqual(got, want) {
			t.Fatalf("alarms %v, want %v", got, want)
		}
		if err := c.SetAlarm("", "NOSPACE"); !errors.Is(err, store.ErrInvalidCommand) {
			t.Errorf("alarm of no member: %v, want ErrInvalidCommand", err)
		}
		if err := c.SetAlarm("n2", ""); err != nil {
			t.Fatal(err)
		}
		if got := alarms(); len(got) != 0 || rev() != before {
			t.Fatalf("alarms %v at revision %d after the clear; want none at %d", got, rev(), before)
		}
		c.BeginStop()
		if err := c.SetAlarm("n3", "NOSPACE"); !errors.Is(err, ErrClosed) {
			t.Errorf("SetAlarm on a stopping core: %v, want ErrClosed", err)
		}
		if got := alarms(); len(got) != 0 {
			t.Errorf("a stopping core recorded %v", got)
		}
	})
}
