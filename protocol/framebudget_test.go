package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"
)

// testBudget is a FrameBudget of limit bytes that records what it gave.
type testBudget struct {
	limit, taken, peak int
	takes              int
}

var errNoBudget = errors.New("no budget")

func (b *testBudget) Take(n int) error {
	if b.taken+n > b.limit {
		return errNoBudget
	}
	b.taken += n
	b.peak = max(b.peak, b.taken)
	b.takes++
	return nil
}

func (b *testBudget) Return(n int) { b.taken -= n }

// stalling delivers its bytes, then fails every read, as a stream whose
// client stopped sending fails at its deadline.
type stalling struct{ r io.Reader }

var errStalled = errors.New("stalled")

func (s stalling) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err == io.EOF {
		err = errStalled
	}
	return n, err
}

// TestFrameBudget: a reader with a budget takes the buffer of a large body
// from it as the bytes arrive, never much more than what came, and gives
// it all back when the frame fails or once it is released; a frame the
// budget cannot take fails with the budget's error before its buffer
// grows past it; small frames take nothing.
func TestFrameBudget(t *testing.T) {
	const size = 1 << 20
	header := binary.BigEndian.AppendUint32(nil, size)
	for _, sent := range []int{1, bodyChunk, bodyChunk + 1, 300 << 10, size - 1} {
		b := &testBudget{limit: 1 << 30}
		fr := NewFrameReader(stalling{bytes.NewReader(append(header, make([]byte, sent)...))}, 0)
		fr.SetBudget(b)
		if _, _, err := fr.ReadFrame(); !errors.Is(err, errStalled) {
			t.Fatalf("%d bytes sent: %v, want the stream's error", sent, err)
		}
		if b.peak > max(2*sent, bodyChunk) {
			t.Errorf("%d bytes sent: %d taken at the peak, want at most twice that or %d", sent, b.peak, bodyChunk)
		}
		if b.taken != 0 {
			t.Errorf("%d bytes sent: %d still taken after the frame failed", sent, b.taken)
		}
	}

	// Whole, the frame holds its size until it is released.
	b := &testBudget{limit: size}
	frame := append(header, byte(TypeWrite))
	frame = append(frame, make([]byte, size-1)...)
	fr := NewFrameReader(bytes.NewReader(frame), 0)
	fr.SetBudget(b)
	if _, body, err := fr.ReadFrame(); err != nil || len(body) != size-1 {
		t.Fatalf("whole frame: %d bytes, %v", len(body), err)
	}
	if b.taken != size {
		t.Fatalf("whole frame: %d taken, want %d", b.taken, size)
	}
	fr.Release()
	if b.taken != 0 {
		t.Fatalf("%d taken after Release", b.taken)
	}

	// A budget one byte short refuses the last step, having taken no
	// more than it had; the frame is read to its end all the same, and
	// the next one follows.
	b = &testBudget{limit: size - 1}
	fr = NewFrameReader(bytes.NewReader(append(frame, small(t, &Stats{ID: 7})...)), 0)
	fr.SetBudget(b)
	var refused *RefusedFrameError
	if _, _, err := fr.ReadFrame(); !errors.As(err, &refused) || !errors.Is(err, errNoBudget) {
		t.Fatalf("frame over the budget: %v, want a RefusedFrameError wrapping the budget's", err)
	}
	if b.peak > b.limit || b.taken != 0 {
		t.Fatalf("frame over the budget: %d taken at the peak, %d left; want at most %d, 0", b.peak, b.taken, b.limit)
	}
	if m, err := fr.ReadMessage(); err != nil || m.(*Stats).ID != 7 {
		t.Fatalf("after the refused frame: %#v, %v; want the next frame", m, err)
	}

	// Small frames, in the buffer the reader keeps, take nothing.
	b = &testBudget{}
	smallFrame := binary.BigEndian.AppendUint32(nil, keptBodySize)
	smallFrame = append(smallFrame, make([]byte, keptBodySize)...)
	fr = NewFrameReader(bytes.NewReader(bytes.Repeat(smallFrame, 3)), 0)
	fr.SetBudget(b)
	for range 3 {
		if _, _, err := fr.ReadFrame(); err != nil {
			t.Fatalf("small frame: %v", err)
		}
	}
	if b.takes != 0 {
		t.Fatalf("small frames took from the budget %d times", b.takes)
	}
}

// small encodes m as a frame.
func small(t testing.TB, m Message) []byte {
	t.Helper()
	b, err := AppendFrame(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawLarge returns a frame of type typ whose body starts with head and is
// padded with a bin value to size bytes (type and body): a body a decoder
// reads as the fields of head, then a field "p" of padding. head is a map
// of fields without its header; fields is how many it holds.
func rawLarge(typ Type, size, fields int, head ...byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(size))
	b = append(b, byte(typ), 0xde)
	b = binary.BigEndian.AppendUint16(b, uint16(fields+1))
	b = append(b, head...)
	pad := size - (len(b) - frameHeaderSize) - 2 - 5
	b = append(b, 0xa1, 'p', 0xc6)
	b = binary.BigEndian.AppendUint32(b, uint32(pad))
	return append(b, make([]byte, pad)...)
}

// TestRefusedFrame: a frame the budget refuses is read to its end and
// discarded, whatever it holds, and the stream stays in step: the next
// frame reads. The refusal names the frame's type and, for a request
// that carries an ID, the ID read from the frame's first kilobyte as
// Decode would read it, or says it is unread when that cannot be done:
// hostile encodings, with the ID not first, after the first kilobyte,
// twice, in a body that is not a map or whose start is cut short.
func TestRefusedFrame(t *testing.T) {
	const size = 256 << 10
	key2k := append([]byte{0xa1, 'k', 0xda, 0x08, 0x00}, bytes.Repeat([]byte{'x'}, 2048)...)
	// With the map's header, this puts the ID's 9 bytes across byte 1023
	// of the body.
	key1k := append([]byte{0xa1, 'k', 0xda, 0x03, 0xf0}, bytes.Repeat([]byte{'x'}, 1008)...)
	write := small(t, &Write{ID: 42, Op: OpPut, Key: []byte("k"), Value: make([]byte, size)})
	ack := small(t, &Ack{Keys: [][]byte{make([]byte, size)}})
	cancel := small(t, &Cancel{ID: 1 << 40})
	for _, c := range []struct {
		name  string
		frame []byte
		limit int    // the budget
		id    uint64 // want
		typ   Type
		idNot bool // want the ID unread
	}{
		{name: "write", frame: write, id: 42, typ: TypeWrite},
		{name: "write/refused after a chunk", frame: write, limit: bodyChunk, id: 42, typ: TypeWrite},
		{name: "write/refused near the end", frame: write, limit: size, id: 42, typ: TypeWrite},
		{name: "ack, without an ID", frame: ack, typ: TypeAck},
		{name: "cancel, padded", frame: rawLarge(TypeCancel, size, 1, 0xa1, 'i', 0xcf, 0, 0, 1, 0, 0, 0, 0, 0), id: 1 << 40, typ: TypeCancel},
		{name: "unknown type", frame: rawLarge(200, size, 1, 0xa1, 'i', 5), typ: 200},
		{name: "ID not first", frame: rawLarge(TypeGet, size, 3, 0xa1, 'k', 0xa1, 'x', 0xa1, 'r', 0xc3, 0xa1, 'i', 0xcd, 0x12, 0x34), id: 0x1234, typ: TypeGet},
		{name: "ID as str8 and int8", frame: rawLarge(TypeGet, size, 1, 0xd9, 1, 'i', 0xd0, 0x05), id: 5, typ: TypeGet},
		{name: "ID under a bin name", frame: rawLarge(TypeGet, size, 1, 0xc4, 1, 'i', 0x07), id: 7, typ: TypeGet},
		{name: "ID negative", frame: rawLarge(TypeGet, size, 1, 0xa1, 'i', 0xff), id: 1<<64 - 1, typ: TypeGet},
		{name: "ID nil", frame: rawLarge(TypeGet, size, 1, 0xa1, 'i', 0xc0), id: 0, typ: TypeGet},
		{name: "ID after the first kilobyte", frame: rawLarge(TypeGet, size, 2, append(key2k, 0xa1, 'i', 0x09)...), typ: TypeGet, idNot: true},
		{name: "ID twice", frame: rawLarge(TypeGet, size, 2, 0xa1, 'i', 1, 0xa1, 'i', 2), typ: TypeGet, idNot: true},
		{name: "ID not an integer", frame: rawLarge(TypeGet, size, 1, 0xa1, 'i', 0xa1, 'x'), typ: TypeGet, idNot: true},
		{name: "ID cut short by the first kilobyte's end", frame: rawLarge(TypeGet, size, 2, append(key1k, 0xa1, 'i', 0xcf, 0, 0, 0, 0, 0, 0, 0, 1)...), typ: TypeGet, idNot: true},
		{name: "name not a string", frame: rawLarge(TypeGet, size, 1, 0x01, 0xa1, 'i', 0x05), typ: TypeGet, idNot: true},
		{name: "value declaring 4 GiB before the ID", frame: rawLarge(TypeGet, size, 2, 0xa1, 'k', 0xc6, 0xff, 0xff, 0xff, 0xff, 0xa1, 'i', 0x05), typ: TypeGet, idNot: true},
		{name: "map declaring 2^32-1 fields", frame: append(binary.BigEndian.AppendUint32(nil, size), append([]byte{byte(TypeGet), 0xdf, 0xff, 0xff, 0xff, 0xff}, make([]byte, size-6)...)...), typ: TypeGet, idNot: true},
		{name: "array", frame: append(binary.BigEndian.AppendUint32(nil, size), append([]byte{byte(TypeGet), 0x91, 0x05}, make([]byte, size-3)...)...), typ: TypeGet, idNot: true},
		{name: "empty map", frame: append(binary.BigEndian.AppendUint32(nil, size), append([]byte{byte(TypeGet), 0x80}, make([]byte, size-2)...)...), typ: TypeGet, idNot: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &testBudget{limit: c.limit}
			fr := NewFrameReader(bytes.NewReader(append(c.frame, cancel...)), 0)
			fr.SetBudget(b)
			_, _, err := fr.ReadFrame()
			var refused *RefusedFrameError
			if !errors.As(err, &refused) || !errors.Is(err, errNoBudget) {
				t.Fatalf("%v, want a RefusedFrameError wrapping the budget's", err)
			}
			size := len(c.frame) - frameHeaderSize
			if refused.Type != c.typ || refused.ID != c.id || refused.IDUnread != c.idNot || refused.Size != size || refused.Arrived > c.limit {
				t.Fatalf("refused %s frame of %d bytes, %d arrived, ID %d, unread %v; want %s, %d bytes, at most %d, ID %d, unread %v",
					refused.Type, refused.Size, refused.Arrived, refused.ID, refused.IDUnread, c.typ, size, c.limit, c.id, c.idNot)
			}
			msg := err.Error()
			if want := fmt.Sprintf("%s request of %d bytes refused", c.typ, size); !bytes.Contains([]byte(msg), []byte(want)) ||
				c.idNot != bytes.Contains([]byte(msg), []byte("cannot be answered")) {
				t.Fatalf("error %q does not say what was refused (%q), and whether it can be answered (%v)", msg, want, !c.idNot)
			}
			if b.peak > c.limit || b.taken != 0 || cap(fr.buf) != keptBodySize {
				t.Fatalf("%d taken at the peak, %d left, a buffer of %d kept; want at most %d, 0, %d", b.peak, b.taken, cap(fr.buf), c.limit, keptBodySize)
			}
			if m, err := fr.ReadMessage(); err != nil || m.(*Cancel).ID != 1<<40 {
				t.Fatalf("after the refused frame: %#v, %v; want the next frame", m, err)
			}
		})
	}
}

// TestRefusedFrameEnds: a refused frame that the stream does not finish
// fails as a truncated frame does, with the stream's error, and gives
// its budget back; a header declaring more than the limit is refused
// before anything is read or taken.
func TestRefusedFrameEnds(t *testing.T) {
	const size = 1 << 20
	frame := rawLarge(TypeWrite, size, 1, 0xa1, 'i', 1)
	for _, cut := range []int{5, 100, refusedPrefix + 10, bodyChunk + 10, len(frame) - 1} {
		for _, limit := range []int{0, bodyChunk} {
			b := &testBudget{limit: limit}
			fr := NewFrameReader(stalling{bytes.NewReader(frame[:cut])}, 0)
			fr.SetBudget(b)
			_, _, err := fr.ReadFrame()
			var refused *RefusedFrameError
			if !errors.Is(err, errStalled) || errors.As(err, &refused) {
				t.Fatalf("frame cut after %d bytes, budget %d: %v, want the stream's error", cut, limit, err)
			}
			if b.taken != 0 || b.peak > limit {
				t.Fatalf("frame cut after %d bytes, budget %d: %d taken at the peak, %d left", cut, limit, b.peak, b.taken)
			}
		}
	}
	b := &testBudget{limit: 1 << 30}
	fr := NewFrameReader(bytes.NewReader(binary.BigEndian.AppendUint32(nil, 1<<32-1)), 0)
	fr.SetBudget(b)
	if _, _, err := fr.ReadFrame(); !errors.Is(err, ErrFrameTooLarge) || b.takes != 0 {
		t.Fatalf("frame declaring 4 GiB: %v, %d takes; want ErrFrameTooLarge and none", err, b.takes)
	}
}

// TestRefusedFrameMemory: a reader discarding a refused frame of 1 MiB
// allocates little more than the small buffer it keeps.
func TestRefusedFrameMemory(t *testing.T) {
	const size = 1 << 20
	frame := small(t, &Write{ID: 1, Op: OpPut, Key: []byte("k"), Value: make([]byte, size)})
	for _, limit := range []int{0, bodyChunk} {
		// The least of a few tries: the runtime allocates now and then
		// for itself.
		got := uint64(1 << 62)
		for range 5 {
			fr := NewFrameReader(bytes.NewReader(frame), 0)
			fr.SetBudget(&testBudget{limit: limit})
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, _, err := fr.ReadFrame()
			runtime.ReadMemStats(&after)
			var refused *RefusedFrameError
			if !errors.As(err, &refused) || refused.ID != 1 {
				t.Fatalf("budget %d: %v, want the frame refused", limit, err)
			}
			// What the budget gave is allocated, and the kept buffer.
			got = min(got, after.TotalAlloc-before.TotalAlloc)
		}
		t.Logf("budget %d: %d bytes allocated to discard a frame of %d", limit, got, len(frame))
		if want := uint64(limit + keptBodySize + 2<<10); got > want {
			t.Fatalf("budget %d: %d bytes allocated to discard a frame of %d, want at most %d", limit, got, len(frame), want)
		}
	}
}

// TestPeekRequestIDEveryType: the ID of every message type that carries
// one is read from the start of its body as AppendFrame encodes it.
func TestPeekRequestIDEveryType(t *testing.T) {
	const id = 0xfeedface12
	for typ := range Type(NumTypes) {
		if !typ.Valid() || registry[typ].id == nil {
			continue
		}
		m := New(typ)
		SetRequestID(m, id)
		b := small(t, m)
		if got, ok := peekRequestID(b[frameHeaderSize+1:]); !ok || got != id {
			t.Errorf("%s: ID %d, %v; want %d", typ, got, ok, id)
		}
	}
}

// FuzzPeekRequestID: peekRequestID never panics, and never reads an ID
// that Decode would not: for a body that decodes as a message with an ID,
// it reads that ID or none.
func FuzzPeekRequestID(f *testing.F) {
	f.Add(byte(TypeWrite), small(f, &Write{ID: 42, Op: OpPut, Key: []byte("k")})[frameHeaderSize+1:])
	f.Add(byte(TypeGet), []byte{0x82, 0xa1, 'i', 1, 0xa1, 'i', 2})
	f.Add(byte(TypeGet), []byte{0x82, 0xc4, 1, 'i', 1, 0xa1, 'k', 0xa1, 'x'})
	f.Add(byte(TypeGet), []byte{0x81, 0xa1, 'i', 0xd3, 0xff, 0, 0, 0, 0, 0, 0, 0})
	f.Add(byte(TypeStats), []byte{0xde, 0, 1, 0xd9, 1, 'i', 0xcc, 0xff})
	f.Fuzz(func(t *testing.T, typ byte, body []byte) {
		id, ok := peekRequestID(body)
		m, err := Decode(Type(typ), body)
		if err != nil || !ok {
			return
		}
		if want, has := RequestID(m); has && want != id {
			t.Fatalf("ID %d read from % x, Decode reads %d", id, body, want)
		}
	})
}
