package store_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/leased/leased/store"
)

func setAlarm(member, alarm string) store.Command {
	return store.Command{Op: store.OpSetAlarm, Key: []byte(member), Value: []byte(alarm)}
}

// TestMemberAlarms: OpSetAlarm raises, updates and clears a member's
// alarm, the same in badger and in memory, takes no revision, refuses
// what is out of bounds as the command's outcome, and the alarms survive a
// reopen and a snapshot.
func TestMemberAlarms(t *testing.T) {
	dir := t.TempDir()
	b := openBadger(t, dir)
	m := store.NewMemory()
	want := []store.MemberAlarm{{Member: "n1", Alarm: "NOSPACE: 9"}, {Member: "n3", Alarm: "NOSPACE: 3"}}
	for _, s := range []store.Store{b, m} {
		if st := mustState(t, s); len(st.Alarms) != 0 {
			t.Errorf("%T: alarms %v before any was raised", s, st.Alarms)
		}
		rs := mustApply(t, s, setAlarm("n3", "NOSPACE: 3"), put("k", "v"), setAlarm("n2", "NOSPACE: 2"),
			setAlarm("n1", "NOSPACE: 1"), setAlarm("n2", ""), setAlarm("n4", ""), setAlarm("n1", "NOSPACE: 9"))
		for i, r := range rs {
			if r.Err != nil || (i != 1 && r.Version != 0) {
				t.Errorf("%T: result %d: %+v", s, i, r)
			}
		}
		st := mustState(t, s)
		if !reflect.DeepEqual(st.Alarms, want) || st.Revision != 1 {
			t.Errorf("%T: alarms %v at revision %d, want %v at 1", s, st.Alarms, st.Revision, want)
		}
		for _, c := range []store.Command{setAlarm("", "NOSPACE"), setAlarm(strings.Repeat("n", store.MaxAlarmMemberBytes+1), "NOSPACE"),
			setAlarm("n5", strings.Repeat("x", store.MaxAlarmBytes+1))} {
			if rs := mustApply(t, s, c); !errors.Is(rs[0].Err, store.ErrInvalidCommand) {
				t.Errorf("%T: alarm of %d bytes for a member of %d: %v, want ErrInvalidCommand", s, len(c.Value), len(c.Key), rs[0].Err)
			}
		}
		if st := mustState(t, s); !reflect.DeepEqual(st.Alarms, want) {
			t.Errorf("%T: refused alarms changed them: %v", s, st.Alarms)
		}
	}
	b = reopenBadger(t, b, dir)
	if st := mustState(t, b); !reflect.DeepEqual(st.Alarms, want) {
		t.Errorf("after reopen: %v", st.Alarms)
	}
	dst := openBadger(t, t.TempDir())
	if err := dst.Restore(bytes.NewReader(snapshotBytes(t, b))); err != nil {
		t.Fatal(err)
	}
	if st := mustState(t, dst); !reflect.DeepEqual(st.Alarms, want) {
		t.Errorf("after restore: %v", st.Alarms)
	}
	mustApply(t, dst, setAlarm("n1", ""), setAlarm("n3", ""))
	if st := mustState(t, dst); st.Alarms != nil {
		t.Errorf("all cleared: %v", st.Alarms)
	}
}

// TestMemberAlarmsBounded: no more than MaxAlarms alarms are raised, and
// the cost of an OpSetAlarm covers the record of them all.
func TestMemberAlarmsBounded(t *testing.T) {
	m := store.NewMemory()
	long := strings.Repeat("x", store.MaxAlarmBytes)
	for i := range store.MaxAlarms {
		member := strings.Repeat("m", store.MaxAlarmMemberBytes-3) + string(rune('A'+i/26)) + string(rune('a'+i%26)) + "!"
		if rs := mustApply(t, m, setAlarm(member, long)); rs[0].Err != nil {
			t.Fatalf("alarm %d: %v", i, rs[0].Err)
		}
	}
	if rs := mustApply(t, m, setAlarm("one more", "NOSPACE")); !errors.Is(rs[0].Err, store.ErrInvalidCommand) {
		t.Fatalf("alarm %d: %v, want ErrInvalidCommand", store.MaxAlarms+1, rs[0].Err)
	}
	if rs := mustApply(t, m, setAlarm("one more", "")); rs[0].Err != nil {
		t.Fatalf("clearing an alarm not raised: %v", rs[0].Err)
	}
	st := mustState(t, m)
	n := 0
	for _, a := range st.Alarms {
		n += len(a.Member) + len(a.Alarm) + 4
	}
	if c := store.Cost(setAlarm("n", "x")); c < n {
		t.Fatalf("Cost %d of an OpSetAlarm, below the %d bytes of the alarms' record", c, n)
	}
}
