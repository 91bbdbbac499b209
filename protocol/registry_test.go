package protocol

import (
	"reflect"
	"testing"
)

// TestRegistry checks that every Type below NumTypes but 0 has an entry
// whose constructor returns a new zero message of that Type, and that the
// message round-trips through AppendFrame and Decode.
func TestRegistry(t *testing.T) {
	if e := registry[0]; e.new != nil || e.id != nil || e.name != "" {
		t.Errorf("Type 0 has an entry: %+v", e)
	}
	for i := 1; i < NumTypes; i++ {
		typ := Type(i)
		e := registry[typ]
		if e.new == nil {
			t.Errorf("Type %d has no entry", i)
			continue
		}
		if e.name == "" {
			t.Errorf("Type %d has no name", i)
		}
		m := e.new()
		if m == nil || reflect.ValueOf(m).IsNil() {
			t.Errorf("%s: constructor returned %#v", e.name, m)
			continue
		}
		if m.Type() != typ {
			t.Errorf("%s: constructor returned a message of type %d, want %d", e.name, m.Type(), typ)
		}
		if !reflect.ValueOf(m).Elem().IsZero() {
			t.Errorf("%s: constructor returned %#v, want a zero message", e.name, m)
		}
		if hasID := reflect.ValueOf(m).Elem().FieldByName("ID").IsValid(); hasID != (e.id != nil) {
			t.Errorf("%s: struct has an ID field: %v; entry reads an ID: %v", e.name, hasID, e.id != nil)
		}

		frame, err := AppendFrame(nil, m)
		if err != nil {
			t.Errorf("%s: AppendFrame: %v", e.name, err)
			continue
		}
		if got := Type(frame[frameHeaderSize]); got != typ {
			t.Errorf("%s: frame's type byte is %d, want %d", e.name, got, typ)
		}
		got, err := Decode(typ, frame[frameHeaderSize+1:])
		if err != nil {
			t.Errorf("%s: Decode: %v", e.name, err)
			continue
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s: round trip gave %#v, want %#v", e.name, got, m)
		}
	}
}

// otherGet is a Message with Get's tag that is not a *Get.
type otherGet struct{ ID uint64 }

func (otherGet) Type() Type { return TypeGet }

// TestRequestIDOfForeignMessage checks that RequestID, like the type switch
// it replaced, reports no ID for a Message that is not one of the package's
// structs, even if its Type is that of a message with an ID.
func TestRequestIDOfForeignMessage(t *testing.T) {
	if id, ok := RequestID(otherGet{ID: 7}); ok || id != 0 {
		t.Errorf("RequestID(otherGet) = %d, %v; want 0, false", id, ok)
	}
	o := &otherGet{ID: 7}
	if SetRequestID(o, 8) || o.ID != 7 {
		t.Errorf("SetRequestID(otherGet) changed it to %d", o.ID)
	}
}
