package server

import (
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
)

// writeFrame returns the frame of a put of key, request id, whose value
// makes the frame size bytes (type and body). A client that sends all but
// its last byte and stalls makes the server hold what it sent until
// FrameTimeout, or until it sends the last byte.
func writeFrame(t *testing.T, id uint64, key string, size int) []byte {
	t.Helper()
	m := &protocol.Write{ID: id, Op: protocol.OpPut, Key: []byte(key), Value: make([]byte, size)}
	b, err := protocol.AppendFrame(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	// The value's header is as long for both sizes (bin32).
	m.Value = m.Value[:2*size-(len(b)-4)]
	if b, err = protocol.AppendFrame(nil, m); err != nil || len(b) != 4+size {
		t.Fatalf("a write's frame of %d bytes: %d, %v", size, len(b)-4, err)
	}
	return b
}

// partialWrite is a session that has sent all but the last byte of a
// put's frame.
type partialWrite struct {
	c     *protoclient.Client
	id    uint64
	frame []byte
}

// startPartial sends all but the last byte of a put of 1 MiB on c.
func startPartial(t *testing.T, c *protoclient.Client, id uint64) partialWrite {
	t.Helper()
	p := partialWrite{c: c, id: id, frame: writeFrame(t, id, fmt.Sprint("partial-", id), 1<<20)}
	if err := c.SendFrame(p.frame[:len(p.frame)-1]); err != nil {
		t.Fatal(err)
	}
	return p
}

// finish sends the last byte of p's frame.
func (p partialWrite) finish(t *testing.T) {
	t.Helper()
	if err := p.c.SendFrame(p.frame[len(p.frame)-1:]); err != nil {
		t.Fatal(err)
	}
}

// expectRefused finishes p's frame, and checks that its write is refused
// with a resource-exhausted error naming the budget what, and that its
// session goes on: it reads a key, with a lease.
func (p partialWrite) expectRefused(t *testing.T, what string) {
	t.Helper()
	p.finish(t)
	e := expectError(t, p.c, p.id, protocol.CodeResourceExhausted)
	if !strings.Contains(e.Message, what) || !strings.Contains(e.Message, "write request of 1048576 bytes refused") {
		t.Fatalf("refusal %q does not name the request and %q", e.Message, what)
	}
	// The server's budget may be full, so a read, not a write.
	if r := get(t, p.c, fmt.Sprint("after-", p.id)); r.Term == 0 {
		t.Fatalf("read after the refusal: %+v, want a lease", r)
	}
}

// TestHostilePartialFrames: the frames arriving on the sessions of one
// client address hold at most MaxFrameBytesPerAddr, and all frames
// arriving, with the waiting writes, at most MaxTotalInflightBytes,
// counted as their bytes arrive: a frame that would go past either is
// refused before it is buffered, and read to its end and discarded
// (holding a few kilobytes) while the frames within the budgets stay
// (FrameTimeout is long here). Its request is answered with a
// resource-exhausted error naming the budget, and its session goes on.
// Other addresses, and small requests, go on; a closed session's bytes
// return, and make room for a large write.
func TestHostilePartialFrames(t *testing.T) {
	leaktest.Check(t)
	const mib = 1 << 20
	const perAddr, total = 4 * mib, 6 * mib
	srv, _ := hostileServer(t, Config{MaxFrameBytesPerAddr: perAddr, MaxTotalInflightBytes: total, FrameTimeout: time.Hour})
	other := dialRaw(t, srv)
	framesHeld := func() int64 { return srv.frames.total.Load() }
	refused := func() uint64 { return srv.frames.refused.Load() }

	// One at a time, so that which frames the budget takes is known: the
	// first four from 127.0.0.1, then none.
	var held, refusedLocal []partialWrite
	for i := range 6 {
		p := startPartial(t, dialRaw(t, srv), uint64(1000+i))
		if i < 4 {
			wait.For(t, testTimeout, fmt.Sprintf("frame %d to arrive", i), func() bool { return framesHeld() == int64(i+1)*mib })
			held = append(held, p)
			continue
		}
		wait.For(t, testTimeout, fmt.Sprintf("frame %d to be refused", i), func() bool { return refused() == uint64(i-3) })
		refusedLocal = append(refusedLocal, p)
	}
	if n := framesHeld(); n != perAddr {
		t.Fatalf("frames hold %d bytes, want %d", n, perAddr)
	}
	checkOthers(t, other)

	// Another address has a budget of its own, within the server's.
	var refusedOther partialWrite
	for i := range 3 {
		// A socket each: a connection's transport owns its socket.
		pc, err := net.ListenPacket("udp", "127.0.0.2:0")
		if err != nil {
			t.Skipf("no second loopback address: %v", err)
		}
		t.Cleanup(func() { pc.Close() })
		p := startPartial(t, dial(t, srv, protoclient.Options{PacketConn: pc}), uint64(2000+i))
		if i < 2 {
			wait.For(t, testTimeout, fmt.Sprintf("frame %d from 127.0.0.2 to arrive", i), func() bool { return framesHeld() == perAddr+int64(i+1)*mib })
			continue
		}
		wait.For(t, testTimeout, "the third frame from 127.0.0.2 to be refused", func() bool { return refused() == 3 })
		refusedOther = p
	}
	st := srv.Stats()
	t.Logf("frames hold %d bytes, %d in all with the writes; %d frames refused", framesHeld(), st.InflightBytes, refused())
	if st.InflightBytes != total || refused() != 3 {
		t.Fatalf("%d bytes counted and %d frames refused, want %d and 3", st.InflightBytes, refused(), total)
	}

	// The refused frames, once whole, are answered, naming the budget
	// each went past; their sessions go on, and hold nothing.
	for _, p := range refusedLocal {
		p.expectRefused(t, "budget of 4194304 bytes (MaxFrameBytesPerAddr)")
	}
	refusedOther.expectRefused(t, "budget of 6291456 bytes (MaxTotalInflightBytes)")
	if n := framesHeld(); n != total {
		t.Fatalf("after the refusals, frames hold %d bytes, want %d", n, total)
	}
	// A frame held, once whole, is a write like any other.
	held[1].finish(t)
	if r, ok := recv(t, held[1].c).(*protocol.WriteReply); !ok || r.ID != held[1].id || r.Version == 0 {
		t.Fatalf("the write of a frame held, finished: %#v", r)
	}
	wait.For(t, testTimeout, "the finished frame to return its bytes", func() bool { return framesHeld() == total-mib })

	// A closed session's frame returns its bytes, and a large write of
	// the address then arrives and commits.
	held[0].c.Close()
	wait.For(t, testTimeout, "the closed session's frame to return its bytes", func() bool { return framesHeld() == total-2*mib })
	w := dialRaw(t, srv)
	if r := put(t, w, "large", make([]byte, mib-100)); r.Version == 0 {
		t.Fatalf("large put: %+v", r)
	}
	for _, p := range held[2:] {
		p.c.Close()
	}
	wait.For(t, testTimeout, "the frames of 127.0.0.1 to return their bytes", func() bool { return framesHeld() == 2*mib })
	srv.frames.mu.Lock()
	left := len(srv.frames.byAddr)
	srv.frames.mu.Unlock()
	if left != 1 {
		t.Fatalf("%d addresses counted, want only 127.0.0.2's", left)
	}
}

// paddedFrame returns a frame of type typ whose body is a map of field
// "i", request id, and field "p", a bin that pads the frame to size bytes
// (type and body): a request the decoder reads with its padding ignored.
func paddedFrame(typ protocol.Type, id uint64, size int) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(size))
	b = append(b, byte(typ), 0x82, 0xa1, 'i', 0xcf)
	b = binary.BigEndian.AppendUint64(b, id)
	pad := size - (len(b) - 4) - 7 // the padding's name and header
	b = append(b, 0xa1, 'p', 0xc6)
	b = binary.BigEndian.AppendUint32(b, uint32(pad))
	return append(b, make([]byte, pad)...)
}

// TestRefusedFrameReplies: a session whose large frames a budget of
// frames arriving refuses gets, for each, the reply its request gets: an
// error with the request's ID, or with ID 0 for one that carries none
// (ack) or whose ID names another request (cancel); and goes on. A
// refused frame whose ID cannot be read from its start closes the
// session, saying so.
func TestRefusedFrameReplies(t *testing.T) {
	leaktest.Check(t)
	const maxValue = 64 << 10
	perAddr := Config{MaxValueSize: maxValue}.maxFrameSize()
	srv, _ := hostileServer(t, Config{MaxValueSize: maxValue, MaxFrameBytesPerAddr: int64(perAddr), FrameTimeout: time.Hour})
	// A frame all but whole holds the address's budget.
	h := dialRaw(t, srv)
	if err := h.SendFrame(writeFrame(t, 1, "h", perAddr)[:4+perAddr-1]); err != nil {
		t.Fatal(err)
	}
	wait.For(t, testTimeout, "the frame to take the budget", func() bool { return srv.frames.total.Load() == int64(perAddr) })

	c := dialRaw(t, srv)
	big := make([]byte, 8<<10)
	for _, r := range []struct {
		name  string
		frame []byte
		id    uint64
	}{
		{"get", frames(t, &protocol.Get{ID: 77, Key: big}), 77},
		{"write", writeFrame(t, 78, "w", 32<<10), 78},
		{"ack", frames(t, &protocol.Ack{Keys: [][]byte{big}}), 0},
		{"cancel", paddedFrame(protocol.TypeCancel, 78, 8<<10), 0},
		{"unknown type", paddedFrame(200, 79, 8<<10), 0},
	} {
		if err := c.SendFrame(r.frame); err != nil {
			t.Fatal(err)
		}
		e := expectError(t, c, r.id, protocol.CodeResourceExhausted)
		if !strings.Contains(e.Message, "MaxFrameBytesPerAddr") {
			t.Fatalf("%s: refused with %q, want the budget named", r.name, e.Message)
		}
	}
	if r := get(t, c, "k"); r.Term == 0 {
		t.Fatalf("read after the refusals: %+v, want a lease", r)
	}
	if n := srv.frames.refused.Load(); n != 5 {
		t.Fatalf("%d frames refused, want 5", n)
	}

	// A body that is not a map: no ID to answer.
	notMap := binary.BigEndian.AppendUint32(nil, 8<<10)
	notMap = append(notMap, byte(protocol.TypeGet), 0x92, 0x05, 0xc6, 0, 0, 0x1f, 0xf8)
	notMap = append(notMap, make([]byte, 8<<10-8)...)
	if err := c.SendFrame(notMap); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c, protocol.CodeResourceExhausted, "its request ID is not in its first 1024 bytes, so it cannot be answered")
	if n := srv.frames.total.Load(); n != int64(perAddr) {
		t.Fatalf("frames hold %d bytes, want %d: only the frame held", n, perAddr)
	}
}
