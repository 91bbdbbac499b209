package protocol

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// A frame is a 4-byte big-endian length, then that many bytes: one Type byte
// followed by the msgpack body of the message.
const frameHeaderSize = 4

// DefaultMaxFrameSize bounds a frame (type byte and body) when a caller sets
// no limit: a 1 MiB value, a 4 KiB key and room for the other fields.
const DefaultMaxFrameSize = 1<<20 + 4096 + 1024

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
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	r := bytes.NewReader(body)
	// Skip the body once before decoding it. msgpack v5.4.1 allocates a slice
	// for the length an array declares before reading any element (its
	// allocation limit is never applied), so a few bytes declaring 2^32 keys
	// would exhaust memory. A body that skips cleanly backs every declared
	// length with at least that many bytes, bounding what Decode allocates.
	dec.Reset(r)
	if err := dec.Skip(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, t, err)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %s: %d trailing bytes", ErrMalformed, t, r.Len())
	}
	r.Reset(body)
	dec.Reset(r)
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, t, err)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %s: %d trailing bytes", ErrMalformed, t, r.Len())
	}
	return m, nil
}

// FrameReader reads frames from a stream. It is not safe for concurrent use:
// one goroutine owns it.
type FrameReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewFrameReader returns a reader of frames of at most max bytes (type and
// body); max <= 0 means DefaultMaxFrameSize.
func NewFrameReader(r io.Reader, max int) *FrameReader {
	if max <= 0 {
		max = DefaultMaxFrameSize
	}
	return &FrameReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// ReadFrame reads the next frame and returns its type and body. The body is
// valid only until the next call. The declared length is checked against
// the limit before any memory is allocated for the frame. io.EOF means the
// stream ended cleanly between frames.
func (fr *FrameReader) ReadFrame() (Type, []byte, error) {
	var hdr [frameHeaderSize]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("protocol: truncated frame header: %w", err)
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return 0, nil, fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	if uint64(n) > uint64(fr.max) {
		return 0, nil, fmt.Errorf("%w: %d bytes declared, limit %d", ErrFrameTooLarge, n, fr.max)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	b := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, fmt.Errorf("protocol: truncated frame: %w", err)
	}
	// Keep a large buffer only while it is in use, so one big value does not
	// pin a megabyte per connection.
	if cap(fr.buf) > 64<<10 && n <= 64<<10 {
		fr.buf = nil
	}
	return Type(b[0]), b[1:], nil
}

// ReadMessage reads and decodes the next frame.
func (fr *FrameReader) ReadMessage() (Message, error) {
	t, body, err := fr.ReadFrame()
	if err != nil {
		return nil, err
	}
	return Decode(t, body)
}
