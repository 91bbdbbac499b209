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
// keptBodySize; a larger body's buffer grows as its bytes arrive and is let
// go once the frame has been read.
type FrameReader struct {
	r   io.Reader
	max int
	// hdr holds the next frame's header as it arrives; nhdr bytes of it
	// have (Begin reads the first, and a read that failed part way keeps
	// what it had).
	hdr  [frameHeaderSize]byte
	nhdr int
	buf  []byte
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
// the limit before any memory is allocated for the frame, and the body's
// buffer grows as its bytes arrive, from at most 64 KiB, so a frame that
// declares a large length and stalls holds little more than what it sent.
// io.EOF means the stream ended cleanly between frames. A read that fails
// within the header (a deadline) may be retried: the header's bytes that
// came are kept.
func (fr *FrameReader) ReadFrame() (Type, []byte, error) {
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
	b, err := readBody(fr.r, fr.buf, int(size))
	// Keep a large buffer only while it is in use, so that one big value
	// does not pin its size for the rest of the stream.
	fr.buf = b
	if cap(b) > keptBodySize {
		fr.buf = nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("protocol: truncated frame: %w", err)
	}
	return Type(b[0]), b[1:], nil
}

// bodyChunk is the most a frame's buffer grows by before its bytes arrive.
const bodyChunk = 64 << 10

// readBody reads n bytes from r into buf, or a larger buffer that grows by
// at most bodyChunk, or doubles, ahead of what has arrived. It returns the
// buffer, and an error wrapping io.ErrUnexpectedEOF if r ends first.
func readBody(r io.Reader, buf []byte, n int) ([]byte, error) {
	if cap(buf) >= n {
		b := buf[:n]
		if _, err := io.ReadFull(r, b); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return buf[:0], err
		}
		return b, nil
	}
	b := buf[:0]
	for len(b) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(n-len(b), max(len(b), bodyChunk)))
		}
		k, err := r.Read(b[len(b):min(cap(b), n)])
		b = b[:len(b)+k]
		if err != nil && len(b) < n {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return b[:0], err
		}
	}
	return b, nil
}

// ReadMessage reads and decodes the next frame.
func (fr *FrameReader) ReadMessage() (Message, error) {
	t, body, err := fr.ReadFrame()
	if err != nil {
		return nil, err
	}
	return Decode(t, body)
}
