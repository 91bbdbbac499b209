package protocol_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

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
// message it gives must survive encoding and decoding again. The type is a
// whole byte, so every message type and every unknown one is reachable;
// TestFuzzDecodeSeedsCoverEveryType checks that each type has a seed.
func FuzzDecode(f *testing.F) {
	for _, s := range samples() {
		frame := appendFrame(f, nil, s.msg)
		if len(frame) <= fuzzDecodeMaxSeed {
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

// fuzzDecodeMaxSeed bounds the frames of the samples FuzzDecode adds as
// seeds.
const fuzzDecodeMaxSeed = 512

// TestFuzzDecodeSeedsCoverEveryType checks that FuzzDecode starts from a
// body that decodes for every message type, both among the samples it adds
// and in its committed corpus, so that the fuzzer mutates every decoder
// from a valid message rather than having to find one.
func TestFuzzDecodeSeedsCoverEveryType(t *testing.T) {
	added := make(map[protocol.Type]bool)
	for _, s := range samples() {
		if len(appendFrame(t, nil, s.msg)) <= fuzzDecodeMaxSeed {
			added[s.msg.Type()] = true
		}
	}
	committed := make(map[protocol.Type]bool)
	files, err := filepath.Glob("testdata/fuzz/FuzzDecode/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		typ, body, err := readDecodeSeed(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if _, err := protocol.Decode(typ, body); err == nil {
			committed[typ] = true
		}
	}
	for typ := protocol.Type(1); int(typ) < protocol.NumTypes; typ++ {
		if !added[typ] {
			t.Errorf("FuzzDecode adds no sample of %s (%d) of at most %d bytes", typ, typ, fuzzDecodeMaxSeed)
		}
		if !committed[typ] {
			t.Errorf("testdata/fuzz/FuzzDecode has no %s (%d) that decodes", typ, typ)
		}
	}
}

// readDecodeSeed reads a FuzzDecode corpus file: a byte and a []byte.
func readDecodeSeed(path string) (protocol.Type, []byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || lines[0] != "go test fuzz v1" {
		return 0, nil, errors.New("not a corpus file of two values")
	}
	arg := func(line, typ string) (string, error) {
		if !strings.HasPrefix(line, typ+"(") || !strings.HasSuffix(line, ")") {
			return "", errors.New("want " + typ + "(...), got " + line)
		}
		return line[len(typ)+1 : len(line)-1], nil
	}
	lit, err := arg(lines[1], "byte")
	if err != nil {
		return 0, nil, err
	}
	var typ uint64
	if strings.HasPrefix(lit, "'") {
		s, err := strconv.Unquote(lit)
		if err != nil {
			return 0, nil, err
		}
		if len(s) == 1 {
			typ = uint64(s[0]) // '\xff' is the byte itself
		} else {
			r, _ := utf8.DecodeRuneInString(s)
			typ = uint64(r)
		}
	} else if typ, err = strconv.ParseUint(lit, 0, 8); err != nil {
		return 0, nil, err
	}
	if typ > 255 {
		return 0, nil, errors.New("byte out of range: " + lit)
	}
	lit, err = arg(lines[2], "[]byte")
	if err != nil {
		return 0, nil, err
	}
	body, err := strconv.Unquote(lit)
	if err != nil {
		return 0, nil, err
	}
	return protocol.Type(typ), []byte(body), nil
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
