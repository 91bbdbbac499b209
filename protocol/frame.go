package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
)

// A frame is a 4-byte big-endian length, then that many bytes: one Type byte
// followed by the msgpack body of the message.
const frameHeaderSize = 4

// MaxKeySize is the largest key, in bytes: keys are 1 to MaxKeySize bytes
// (DESIGN §2).
const MaxKeySize = 4096

// DefaultMaxFrameSize bounds a frame (type byte and body) when a caller sets
// no limit: a 1 MiB value, a key of MaxKeySize bytes and room for the other
// fields.
const DefaultMaxFrameSize = 1<<20 + MaxKeySize + 1024

// ErrFrameTooLarge is returned by FrameReader when a frame declares a length
// over its limit. Nothing has been allocated for the frame; the stream is
// no longer in sync and must be closed.
var ErrFrameTooLarge = errors.New("protocol: frame too large")

// ErrMalformed is returned for a frame whose type is unknown or whose body
// does not decode as that type.
var ErrMalformed = errors.New("protocol: malformed message")

// AppendFrame encodes m as one frame appended to dst.
func AppendFrame(dst []byte, m Message) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, byte(m.Type()))
	buf := bytes.NewBuffer(dst)
	enc := msgpack.GetEncoder()
	enc.Reset(buf)
	err := enc.Encode(m)
	msgpack.PutEncoder(enc)
	if err != nil {
		return dst[:start], fmt.Errorf("protocol: encode %s: %w", m.Type(), err)
	}
	dst = buf.Bytes()
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-frameHeaderSize))
	return dst, nil
}

// Decode decodes the body of a frame of type t. It returns an error wrapping
// ErrMalformed if t is unknown, the body does not decode, or bytes are left
// over after the message.
func Decode(t Type, body []byte) (Message, error) {
	m := New(t)
	if m == nil {
		return nil, fmt.Errorf("%w: unknown message type %d", ErrMalformed, t)
	}
	if n, err := scanValue(body, 0); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, t, err)
	} else if n != len(body) {
		return nil, fmt.Errorf("%w: %s: %d trailing bytes", ErrMalformed, t, len(body)-n)
	}
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	r := bytes.NewReader(body)
	dec.Reset(r)
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, t, err)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %s: %d trailing bytes", ErrMalformed, t, r.Len())
	}
	return m, nil
}

// maxNesting bounds how deeply arrays and maps nest in a body. A message
// nests two deep (its map, then a list of keys); the rest is room for fields
// added later.
const maxNesting = 32

// scanValue returns the size of the msgpack value at the start of b, nested
// in depth arrays and maps. It fails if the value is cut short or nests
// deeper than maxNesting. Decode scans a body before it hands it to msgpack,
// because msgpack v5.4.1 trusts declared lengths: it allocates a slice for
// the elements an array declares before reading any of them, a []byte for
// the bytes a bin declares, and grows the buffer of its pooled decoder
// towards the bytes a str declares. A body of a few bytes declaring 2^32
// elements would exhaust memory. A body that scans backs every length it
// declares with at least that many bytes.
func scanValue(b []byte, depth int) (int, error) {
	if len(b) == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	c := b[0]
	switch {
	case c <= 0x7f || c >= 0xe0: // positive and negative fixint
		return 1, nil
	case c <= 0x8f: // fixmap
		return scanValues(b, 1, uint64(c&0x0f)*2, depth)
	case c <= 0x9f: // fixarray
		return scanValues(b, 1, uint64(c&0x0f), depth)
	case c <= 0xbf: // fixstr
		return scanData(b, 1, uint64(c&0x1f))
	}
	// The rest but nil, bool and the fixed-size numbers and exts declare a
	// length of width bytes after the code: of data, or of elements of per
	// values each.
	var width, per, extra int // extra: the type byte of an ext
	switch c {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return 1, nil
	case 0xcc, 0xd0: // uint8, int8
		return scanData(b, 1, 1)
	case 0xcd, 0xd1:
		return scanData(b, 1, 2)
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return scanData(b, 1, 4)
	case 0xcb, 0xcf, 0xd3:
		return scanData(b, 1, 8)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16: type and data
		return scanData(b, 1, 1+1<<(c-0xd4))
	case 0xc4, 0xd9: // bin8, str8
		width = 1
	case 0xc5, 0xda:
		width = 2
	case 0xc6, 0xdb:
		width = 4
	case 0xc7, 0xc8, 0xc9: // ext8, ext16, ext32
		width, extra = 1<<(c-0xc7), 1
	case 0xdc: // array16
		width, per = 2, 1
	case 0xdd:
		width, per = 4, 1
	case 0xde: // map16
		width, per = 2, 2
	case 0xdf:
		width, per = 4, 2
	default: // 0xc1 is never used
		return 0, fmt.Errorf("invalid code %#x", c)
	}
	if len(b) < 1+width {
		return 0, io.ErrUnexpectedEOF
	}
	var n uint64
	for _, x := range b[1 : 1+width] {
		n = n<<8 | uint64(x)
	}
	if per == 0 {
		return scanData(b, 1+width, n+uint64(extra))
	}
	return scanValues(b, 1+width, n*uint64(per), depth)
}

// scanData returns size+n if b holds size+n bytes.
func scanData(b []byte, size int, n uint64) (int, error) {
	if n > uint64(len(b)-size) {
		return 0, io.ErrUnexpectedEOF
	}
	return size + int(n), nil
}

// scanValues returns the size of an array or map whose header of size bytes
// declares n nested values.
func scanValues(b []byte, size int, n uint64, depth int) (int, error) {
	if depth >= maxNesting {
		return 0, fmt.Errorf("arrays and maps nested over %d deep", maxNesting)
	}
	// Each value takes at least a byte.
	if n > uint64(len(b)-size) {
		return 0, io.ErrUnexpectedEOF
	}
	for ; n > 0; n-- {
		k, err := scanValue(b[size:], depth+1)
		if err != nil {
			return 0, err
		}
		size += k
	}
	return size, nil
}

// FrameReader reads frames from a stream. It is not safe for concurrent use:
// one goroutine owns it.
//
// It reads straight from the stream, without a buffer of its own ahead of
// the frames: a server holds one per session, most of them idle, and an
// idle reader must cost next to nothing. While it waits for a frame it
// holds only the header's few bytes and a body buffer of at most
// keptBodySize; a larger body gets a buffer of its own, which grows as its
// bytes arrive and which the reader never reuses, unless its budget
// refuses it, and then the body is discarded through the kept buffer.
type FrameReader struct {
	r   io.Reader
	max int
	// hdr holds the next frame's header as it arrives; nhdr bytes of it
	// have (Begin reads the first, and a read that failed part way keeps
	// what it had).
	hdr  [frameHeaderSize]byte
	nhdr int
	buf  []byte // the kept buffer of bodies of at most keptBodySize
	// budget, if set, is what the buffers of larger bodies are counted
	// against (SetBudget); held is what the last body took from it.
	budget FrameBudget
	held   int
}

// FrameBudget is what a FrameReader counts the memory of large frames
// against while they arrive: a server shares one among its sessions, so
// that frames sent in part and never finished hold at most the budget.
// Its methods are called from the reader's goroutine; a budget shared by
// readers must be safe for concurrent use.
type FrameBudget interface {
	// Take asks for n more bytes for the body of the frame being read.
	// An error refuses them: the reader allocates nothing more, reads
	// the rest of the frame and discards it, and ReadFrame fails with a
	// *RefusedFrameError that wraps this one.
	Take(n int) error
	// Return gives back n bytes that Take gave.
	Return(n int)
}

// keptBodySize is the largest body buffer a FrameReader keeps from one
// frame to the next: more than most requests and replies (a few hundred
// bytes), so that a busy stream of small frames reuses one buffer.
const keptBodySize = 4 << 10

// NewFrameReader returns a reader of frames of at most max bytes (type and
// body); max <= 0 means DefaultMaxFrameSize. It allocates nothing for the
// frames until they come.
func NewFrameReader(r io.Reader, max int) *FrameReader {
	if max <= 0 {
		max = DefaultMaxFrameSize
	}
	return &FrameReader{r: r, max: max}
}

// SetBudget makes the reader take from b, before it allocates them, the
// bytes of the buffer of every frame of more than a few kilobytes (the
// small buffer it keeps is not counted), as the buffer grows with the
// bytes that arrive. What a frame took is returned by Release, or by the
// next ReadFrame. Call it before the first ReadFrame; nil means no budget.
func (fr *FrameReader) SetBudget(b FrameBudget) { fr.budget = b }

// Release returns to the budget what the last frame's body took. The
// caller calls it once it has decoded the body, so that a stream that then
// stays silent holds no budget; what it keeps of the body must be counted
// elsewhere from then on. ReadFrame releases the last body first anyway.
func (fr *FrameReader) Release() {
	if fr.held > 0 {
		fr.budget.Return(fr.held)
		fr.held = 0
	}
}

// Begin waits until the first byte of the next frame has arrived, or the
// stream has ended (io.EOF between frames). A reader that bounds how long a
// frame may take calls it before ReadFrame, so that the bound runs from the
// frame's start and not through the silence before it.
func (fr *FrameReader) Begin() error {
	for fr.nhdr == 0 {
		n, err := fr.r.Read(fr.hdr[:1])
		fr.nhdr += n
		if err != nil && fr.nhdr == 0 {
			return err
		}
	}
	return nil
}

// ReadFrame reads the next frame and returns its type and body. The body is
// valid only until the next call. The declared length is checked against
// the limit before any memory is allocated for the frame, and a large
// body's buffer grows as its bytes arrive, from at most 64 KiB, each step
// taken from the budget first (SetBudget), so a frame that declares a
// large length and stalls holds little more than what it sent. A frame
// the budget refuses is read to its end all the same, into the small
// buffer the reader keeps, and discarded: ReadFrame then fails with a
// *RefusedFrameError, and the stream is still in step. io.EOF means the
// stream ended cleanly between frames. A read that fails within the header
// (a deadline) may be retried: the header's bytes that came are kept.
func (fr *FrameReader) ReadFrame() (Type, []byte, error) {
	fr.Release()
	n, err := io.ReadFull(fr.r, fr.hdr[fr.nhdr:])
	fr.nhdr += n
	if err != nil {
		if errors.Is(err, io.EOF) && fr.nhdr > 0 {
			err = io.ErrUnexpectedEOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("protocol: truncated frame header: %w", err)
		}
		return 0, nil, err
	}
	fr.nhdr = 0
	size := binary.BigEndian.Uint32(fr.hdr[:])
	if size == 0 {
		return 0, nil, fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	if uint64(size) > uint64(fr.max) {
		return 0, nil, fmt.Errorf("%w: %d bytes declared, limit %d", ErrFrameTooLarge, size, fr.max)
	}
	var b []byte
	if size <= keptBodySize {
		b, err = fr.readKept(int(size))
	} else {
		b, err = fr.readLarge(int(size))
	}
	if err != nil {
		fr.Release()
		return 0, nil, err
	}
	return Type(b[0]), b[1:], nil
}

// bodyChunk is the most a frame's buffer grows by before its bytes arrive.
const bodyChunk = 64 << 10

// readKept reads a body of n bytes, at most keptBodySize, into the buffer
// the reader keeps.
func (fr *FrameReader) readKept(n int) ([]byte, error) {
	if cap(fr.buf) < n {
		fr.buf = slices.Grow(fr.buf[:0], n)
	}
	b := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		return nil, truncated(err)
	}
	return b, nil
}

// readLarge reads a body of n bytes, more than keptBodySize, into a buffer
// of its own that grows by at most bodyChunk, or doubles, ahead of what has
// arrived, taking each step from the budget before it allocates it.
func (fr *FrameReader) readLarge(n int) ([]byte, error) {
	var b []byte
	for len(b) < n {
		if len(b) == cap(b) {
			c := len(b) + min(n-len(b), max(len(b), bodyChunk))
			if fr.budget != nil {
				if err := fr.budget.Take(c - cap(b)); err != nil {
					return nil, fr.discard(b, n, err)
				}
				fr.held += c - cap(b)
			}
			b = append(make([]byte, 0, c), b...)
		}
		k, err := fr.r.Read(b[len(b):cap(b)])
		b = b[:len(b)+k]
		if err != nil && len(b) < n {
			return nil, truncated(err)
		}
	}
	return b, nil
}

// refusedPrefix is how much of a refused frame's start a FrameReader
// keeps to read the request ID from: encoders put it first (AppendFrame
// does), and an ID after the first kilobyte is not looked for.
const refusedPrefix = 1 << 10

// RefusedFrameError is the error of a frame that the reader's budget
// refused (SetBudget). The frame was read to its end and discarded, so
// the stream is still in step: the caller answers the request with this
// error, which wraps the budget's, and reads on.
type RefusedFrameError struct {
	Type    Type   // the frame's type byte
	Size    int    // the frame's length, type and body
	Arrived int    // bytes of it that had arrived when the budget refused
	ID      uint64 // the request ID, read from the frame's start
	// IDUnread is set if the frame's type carries a request ID and its
	// first kilobyte did not yield it: the body is not a map, the ID
	// is not among its fields there, or is there twice. The request
	// cannot be answered.
	IDUnread bool
	Err      error // the budget's refusal
}

func (e *RefusedFrameError) Error() string {
	msg := fmt.Sprintf("protocol: %s request of %d bytes refused after %d bytes arrived, and discarded: %v", e.Type, e.Size, e.Arrived, e.Err)
	if e.IDUnread {
		msg += fmt.Sprintf("; its request ID is not in its first %d bytes, so it cannot be answered", refusedPrefix)
	}
	return msg
}

// Unwrap returns the budget's refusal.
func (e *RefusedFrameError) Unwrap() error { return e.Err }

// discard reads the rest of a frame of n bytes whose buffer the budget
// refused to grow, got having arrived, and returns the *RefusedFrameError
// for it with refused as its cause, or the error of the stream if it did
// not deliver the frame whole. It gives got back to the budget, keeps the
// frame's first refusedPrefix bytes in the kept buffer, and reads the
// rest through the remainder of that buffer, so a refused frame holds
// keptBodySize bytes however long it is.
func (fr *FrameReader) discard(got []byte, n int, refused error) error {
	if cap(fr.buf) < keptBodySize {
		fr.buf = make([]byte, 0, keptBodySize)
	}
	buf := fr.buf[:keptBodySize]
	copy(buf[:refusedPrefix], got)
	pos := len(got)
	fr.Release()
	for pos < n {
		dst := buf[refusedPrefix:]
		if pos < refusedPrefix {
			dst = buf[pos:refusedPrefix]
		}
		k, err := fr.r.Read(dst[:min(len(dst), n-pos)])
		pos += k
		if err != nil && pos < n {
			return truncated(err)
		}
	}
	e := &RefusedFrameError{Type: Type(buf[0]), Size: n, Arrived: len(got), Err: refused}
	if e.Type.Valid() && registry[e.Type].id != nil {
		id, ok := peekRequestID(buf[1:min(n, refusedPrefix)])
		e.ID, e.IDUnread = id, !ok
	}
	return e
}

// peekRequestID reads the request ID from b, the start of a request's
// body, as Decode would read it: the value at key "i" of the body's map.
// It reports false if b is not the start of a map, or if before b ends,
// or a field that does not scan, it finds no such value or two (Decode
// would take the last, which might lie beyond).
func peekRequestID(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	var pos int
	switch c := b[0]; {
	case c >= 0x80 && c <= 0x8f: // fixmap
		n, pos = uint64(c&0x0f), 1
	case c == 0xde && len(b) >= 3: // map16
		n, pos = uint64(binary.BigEndian.Uint16(b[1:])), 3
	case c == 0xdf && len(b) >= 5: // map32
		n, pos = uint64(binary.BigEndian.Uint32(b[1:])), 5
	default:
		return 0, false
	}
	var id uint64
	found := false
	for ; n > 0; n-- {
		k, err := scanValue(b[pos:], 1)
		if err != nil {
			break
		}
		name, ok := keyName(b[pos : pos+k])
		if !ok {
			break // Decode fails on a key that is not a string
		}
		pos += k
		if string(name) == "i" {
			if found {
				return 0, false
			}
			if id, k, ok = uintAt(b[pos:]); !ok {
				return 0, false
			}
			found = true
		} else if k, err = scanValue(b[pos:], 1); err != nil {
			break
		}
		pos += k
	}
	return id, found
}

// keyName returns the bytes of v, a whole msgpack value, if it is what
// the decoder of a struct takes for a field's name: a string, bin or nil.
func keyName(v []byte) ([]byte, bool) {
	switch c := v[0]; {
	case c >= 0xa0 && c <= 0xbf: // fixstr
		return v[1:], true
	case c == 0xd9, c == 0xc4: // str8, bin8
		return v[2:], true
	case c == 0xda, c == 0xc5:
		return v[3:], true
	case c == 0xdb, c == 0xc6:
		return v[5:], true
	case c == 0xc0: // nil: no name
		return nil, true
	}
	return nil, false
}

// uintAt reads the integer at the start of b as msgpack decodes it into a
// uint64 (nil is 0, and a negative one wraps), and returns it with its
// size; false if b starts with something else, or is cut short.
func uintAt(b []byte) (v uint64, size int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	switch c := b[0]; {
	case c == 0xc0: // nil
		return 0, 1, true
	case c <= 0x7f || c >= 0xe0: // positive and negative fixint
		return uint64(int8(c)), 1, true
	case c >= 0xcc && c <= 0xcf, c >= 0xd0 && c <= 0xd3: // uint8-64, int8-64
		width := 1 << (c & 3)
		if len(b) < 1+width {
			return 0, 0, false
		}
		for _, x := range b[1 : 1+width] {
			v = v<<8 | uint64(x)
		}
		if c >= 0xd0 { // signed: extend the sign
			shift := 64 - 8*width
			v = uint64(int64(v<<shift) >> shift)
		}
		return v, 1 + width, true
	}
	return 0, 0, false
}

// truncated is the error of a body that the stream did not deliver whole.
func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("protocol: truncated frame: %w", err)
}

// ReadMessage reads and decodes the next frame.
func (fr *FrameReader) ReadMessage() (Message, error) {
	t, body, err := fr.ReadFrame()
	if err != nil {
		return nil, err
	}
	return Decode(t, body)
}
