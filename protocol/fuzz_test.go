package protocol_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/leased/leased/protocol"
)

// fuzzFrameMax is the limit FuzzReadFrame reads with: small, so that the
// fuzzer reaches it easily.
const fuzzFrameMax = 64

// smallFrames returns a frame of each sample that fits in max bytes.
func smallFrames(tb testing.TB, max int) [][]byte {
	var frames [][]byte
	for _, s := range samples() {
		f := appendFrame(tb, nil, s.msg)
		if len(f)-4 <= max {
			frames = append(frames, f)
		}
	}
	return frames
}

// frameSeeds returns streams for the frame fuzzers: single frames, several
// frames in a row, and broken streams.
func frameSeeds(tb testing.TB, max int) [][]byte {
	frames := smallFrames(tb, max)
	seeds := [][]byte{
		nil,
		{0},
		{0, 0, 0},
		header(0),
		header(math32Max),
		header(uint32(max)),
		header(uint32(max + 1)),
		append(header(1), byte(protocol.TypeOK)),
		append(header(2), byte(protocol.TypeOK), 0x80),
		append(header(2), 0, 0x80),
		append(header(2), 0xff, 0xc0),
	}
	seeds = append(seeds, frames...)
	var all []byte
	for _, f := range frames {
		all = append(all, f...)
	}
	seeds = append(seeds, all)
	for _, f := range frames[:3] {
		seeds = append(seeds, f[:len(f)-1], f[:3], append(bytes.Clone(f), header(math32Max)...))
	}
	return seeds
}

const math32Max = 1<<32 - 1

// normalize returns a copy of m with every empty slice or map in an
// omitempty field set to nil: the encoding leaves such a field out, so it
// decodes as nil. Fields without omitempty keep empty apart from nil.
func normalize(m protocol.Message) protocol.Message {
	v := reflect.ValueOf(m).Elem()
	cp := reflect.New(v.Type())
	cp.Elem().Set(v)
	for i := 0; i < v.NumField(); i++ {
		f := cp.Elem().Field(i)
		tag := v.Type().Field(i).Tag.Get("msgpack")
		if !strings.Contains(tag, ",omitempty") {
			continue
		}
		if (f.Kind() == reflect.Slice || f.Kind() == reflect.Map) && f.Len() == 0 {
			f.SetZero()
		}
	}
	return cp.Interface().(protocol.Message)
}

// checkReencode encodes m and reads it back: it must give m again, up to
// omitempty fields (see normalize).
func checkReencode(t *testing.T, m protocol.Message) {
	t.Helper()
	frame, err := protocol.AppendFrame(nil, m)
	if err != nil {
		t.Fatalf("AppendFrame(%#v): %v", m, err)
	}
	if n := binary.BigEndian.Uint32(frame); int(n) != len(frame)-4 || protocol.Type(frame[4]) != m.Type() {
		t.Fatalf("bad frame header % x for %d bytes of %s", frame[:5], len(frame)-4, m.Type())
	}
	m2, err := protocol.NewFrameReader(bytes.NewReader(frame), len(frame)-4).ReadMessage()
	if err != nil {
		t.Fatalf("re-encoded %#v does not decode: %v", m, err)
	}
	if want := normalize(m); !reflect.DeepEqual(m2, want) {
		t.Fatalf("re-encoding changed the message\n got %#v\nwant %#v", m2, want)
	}
	id, ok := protocol.RequestID(m)
	id2, ok2 := protocol.RequestID(m2)
	if id != id2 || ok != ok2 {
		t.Fatalf("RequestID changed: %d, %v then %d, %v", id, ok, id2, ok2)
	}
}

// FuzzReadFrame reads frames from arbitrary bytes with a small limit, and
// checks each frame and the final error against a parse of its own.
func FuzzReadFrame(f *testing.F) {
	for _, s := range frameSeeds(f, fuzzFrameMax) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr := protocol.NewFrameReader(bytes.NewReader(data), fuzzFrameMax)
		off := 0
		for {
			typ, body, err := fr.ReadFrame()
			rest := data[off:]
			if err != nil {
				var n uint32
				if len(rest) >= 4 {
					n = binary.BigEndian.Uint32(rest)
				}
				switch {
				case len(rest) == 0:
					if err != io.EOF {
						t.Fatalf("at the end: %v, want io.EOF", err)
					}
				case len(rest) < 4:
					if !errors.Is(err, io.ErrUnexpectedEOF) {
						t.Fatalf("%d bytes of header: %v, want io.ErrUnexpectedEOF", len(rest), err)
					}
				case n == 0:
					if !errors.Is(err, protocol.ErrMalformed) {
						t.Fatalf("empty frame: %v, want ErrMalformed", err)
					}
				case n > fuzzFrameMax:
					if !errors.Is(err, protocol.ErrFrameTooLarge) {
						t.Fatalf("frame of %d bytes: %v, want ErrFrameTooLarge", n, err)
					}
				case uint64(len(rest)-4) < uint64(n):
					if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
						t.Fatalf("frame of %d bytes, %d there: %v, want io.ErrUnexpectedEOF", n, len(rest)-4, err)
					}
				default:
					t.Fatalf("error %v reading a whole frame of %d bytes", err, n)
				}
				return
			}
			if len(rest) < 5 {
				t.Fatalf("frame read from %d bytes", len(rest))
			}
			n := int(binary.BigEndian.Uint32(rest))
			if n < 1 || n > fuzzFrameMax || 1+len(body) != n || 4+n > len(rest) {
				t.Fatalf("frame of %d bytes returned for a header of %d, limit %d", 1+len(body), n, fuzzFrameMax)
			}
			if typ != protocol.Type(rest[4]) || !bytes.Equal(body, rest[5:4+n]) {
				t.Fatalf("frame read as type %d, % x; want %d, % x", typ, body, rest[4], rest[5:4+n])
			}
			off += 4 + n
		}
	})
}

// FuzzDecode decodes an arbitrary body as an arbitrary type. Decode must not
// panic, must fail with ErrMalformed or give a message of that type, and a
// message it gives must survive encoding and decoding again.
func FuzzDecode(f *testing.F) {
	for _, s := range samples() {
		frame := appendFrame(f, nil, s.msg)
		if len(frame) <= 512 {
			f.Add(frame[4], frame[5:])
		}
	}
	f.Add(byte(0), []byte{0x80})
	f.Add(byte(protocol.NumTypes), []byte{0x80})
	f.Add(byte(protocol.TypeOK), []byte{})
	f.Add(byte(protocol.TypeOK), []byte{0xc0})
	f.Add(byte(protocol.TypeRenew), mapBody("k", 0xdd, 0xff, 0xff, 0xff, 0xff))
	f.Add(byte(protocol.TypeHello), mapBody("c", 0xdb, 0xff, 0xff, 0xff, 0xff))
	f.Add(byte(protocol.TypeGet), mapBody("i", 0xa1, 'x'))
	f.Add(byte(protocol.TypeOK), mapBody("zz", nested(40)...))
	f.Add(byte(protocol.TypeStatsReply), mapBody("mi", 0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0x02))
	f.Fuzz(func(t *testing.T, typ byte, body []byte) {
		m, err := protocol.Decode(protocol.Type(typ), body)
		if err != nil {
			if !errors.Is(err, protocol.ErrMalformed) || m != nil {
				t.Fatalf("Decode = %#v, %v; want nil and an error wrapping ErrMalformed", m, err)
			}
			return
		}
		if m == nil || m.Type() != protocol.Type(typ) {
			t.Fatalf("Decode(%d) returned %#v", typ, m)
		}
		checkReencode(t, m)
	})
}

// FuzzFrameStream reads messages from arbitrary bytes until an error. Every
// message must be well formed, and every error one of those documented.
func FuzzFrameStream(f *testing.F) {
	const max = 4096
	for _, s := range frameSeeds(f, max) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr := protocol.NewFrameReader(bytes.NewReader(data), max)
		for i := 0; ; i++ {
			if i > len(data)/5 {
				t.Fatalf("%d messages from %d bytes", i, len(data))
			}
			m, err := fr.ReadMessage()
			if err != nil {
				if m != nil {
					t.Fatalf("ReadMessage returned %#v with %v", m, err)
				}
				if err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) &&
					!errors.Is(err, protocol.ErrFrameTooLarge) && !errors.Is(err, protocol.ErrMalformed) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if m == nil || !m.Type().Valid() {
				t.Fatalf("ReadMessage returned %#v", m)
			}
			checkReencode(t, m)
		}
	})
}
