package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
)

// The server's memory under the budgets of bytes in flight, measured on a
// real leased: its resident memory (VmRSS), and the peak of it (VmHWM),
// from /proc.

// procMemory returns a process's resident memory and the peak of it, in
// bytes; the test is skipped where /proc does not say.
func procMemory(t *testing.T, pid int) (rss, peak int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return rss, peak
}

// rawDial opens a raw session with srv.
func rawDial(t *testing.T, srv *clitest.Server) (*protoclient.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), clitest.ReadyTimeout)
	defer cancel()
	c, err := protoclient.Dial(ctx, srv.Addr, protoclient.Options{CAFile: srv.CA})
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// serverStats asks srv for its counters on session c.
func serverStats(t *testing.T, c *protoclient.Client) *protocol.StatsReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clitest.RunTimeout)
	defer cancel()
	m, err := c.Call(ctx, &protocol.Stats{})
	st, ok := m.(*protocol.StatsReply)
	if err != nil || !ok {
		t.Fatalf("stats: %#v, %v", m, err)
	}
	return st
}

// TestPartialFramesMemory: many sessions from one address, each sending
// all but the last byte of a 1 MiB request and stalling, make a real
// leased hold at most --max-frame-bytes-per-addr for them (and the cost of
// the sessions), not a mebibyte each: the frames past the budget are
// refused as they begin, and read and discarded through a few kilobytes
// each, while the rest hold exactly the budget, which the server counts
// in its inflight bytes. Once the last bytes come, each refused request
// is answered with a resource-exhausted error naming the budget, and its
// session goes on.
func TestPartialFramesMemory(t *testing.T) {
	t.Parallel()
	const sessions, perAddr = 200, 16 * mib
	data := filepath.Join(t.TempDir(), "data")
	srv := clitest.StartServer(t, bins, "", data, "--max-frame-bytes-per-addr", strconv.Itoa(perAddr), "--frame-timeout", "1h")
	watcher, err := rawDial(t, srv)
	if err != nil {
		t.Fatal(err)
	}
	pid := srv.Cmd.Process.Pid
	rss0, _ := procMemory(t, pid)

	// A write of 1 MiB (type and body) with an op the server refuses
	// once it has read it, so that the frames held change nothing.
	w := &protocol.Write{ID: 1, Op: 99, Key: []byte("k"), Value: make([]byte, mib)}
	frame, err := protocol.AppendFrame(nil, w)
	if err != nil {
		t.Fatal(err)
	}
	w.Value = w.Value[:2*mib-(len(frame)-4)]
	var clients []*protoclient.Client
	for i := range sessions {
		c, err := rawDial(t, srv)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		w.ID = uint64(1000 + i)
		if frame, err = protocol.AppendFrame(frame[:0], w); err != nil || len(frame) != 4+mib {
			t.Fatalf("a frame of %d bytes, %v; want %d", len(frame)-4, err, mib)
		}
		if err := c.SendFrame(frame[:len(frame)-1]); err != nil {
			t.Fatal(err)
		}
	}
	held := int64(perAddr / mib * mib)
	var rss1 int64
	wait.For(t, 2*clitest.RunTimeout, "the frames within the budget to arrive", func() bool {
		rss1, _ = procMemory(t, pid)
		if rss1-rss0 > 120*mib {
			t.Fatalf("the server grew by %d MiB with %d sessions sending most of a 1 MiB request each", (rss1-rss0)/mib, sessions)
		}
		return serverStats(t, watcher).InflightBytes == held
	})

	// The last bytes: the frames held are read and their writes refused
	// for their op; the rest are answered with the budget's refusal.
	ctx, cancel := context.WithTimeout(context.Background(), 2*clitest.RunTimeout)
	defer cancel()
	refused := 0
	for i, c := range clients {
		if err := c.SendFrame([]byte{0}); err != nil {
			t.Fatal(err)
		}
		m, err := c.Recv(ctx)
		e, ok := m.(*protocol.Error)
		switch {
		case err != nil || !ok || e.ID != uint64(1000+i):
			t.Fatalf("session %d: %#v, %v; want an error for request %d", i, m, err, 1000+i)
		case e.Code == protocol.CodeResourceExhausted:
			if !strings.Contains(e.Message, "MaxFrameBytesPerAddr") {
				t.Fatalf("session %d: refused with %q, want the budget of frames per address", i, e.Message)
			}
			refused++
		case e.Code != protocol.CodeInvalidArgument:
			t.Fatalf("session %d: %#v, want its op or the budget refused", i, e)
		}
		if _, err := c.Call(ctx, &protocol.Get{ID: c.NextID(), Key: []byte("k")}); err != nil {
			t.Fatalf("session %d after its request: %v", i, err)
		}
	}
	_, peak := procMemory(t, pid)
	t.Logf("%d sessions with 1 MiB requests but a byte: %d refused, %d MiB held; the server grew by %d MiB, its peak by %d MiB",
		sessions, refused, held/mib, (rss1-rss0)/mib, (peak-rss0)/mib)
	if refused != sessions-perAddr/mib {
		t.Fatalf("%d requests refused, want %d", refused, sessions-perAddr/mib)
	}
	if peak-rss0 > 120*mib {
		t.Fatalf("the server's peak grew by %d MiB with %d sessions sending a 1 MiB request each", (peak-rss0)/mib, sessions)
	}
}

// TestWriteBudgetMemory measures what a real leased holds for the waiting
// writes that fill its budget, --max-total-inflight-bytes: 1 MiB writes
// wait for a holder that never acknowledges, until the budget refuses
// more. It checks the resident memory, and the peak of it, against the
// factor DESIGN §9 documents.
func TestWriteBudgetMemory(t *testing.T) {
	t.Parallel()
	const budget, value = 128 * mib, mib
	data := filepath.Join(t.TempDir(), "data")
	srv := clitest.StartServer(t, bins, "", data, "--max-total-inflight-bytes", strconv.Itoa(budget), "--lease-term", "1m")
	holder, err := rawDial(t, srv)
	if err != nil {
		t.Fatal(err)
	}
	const keys = budget/value - 2 // the frame of one more must fit: a frame the budget cannot take is refused
	ctx, cancel := context.WithTimeout(context.Background(), clitest.RunTimeout)
	defer cancel()
	for i := range keys {
		if _, err := holder.Call(ctx, &protocol.Get{ID: holder.NextID(), Key: []byte(fmt.Sprint("k", i))}); err != nil {
			t.Fatal(err)
		}
	}
	pid := srv.Cmd.Process.Pid
	rss0, peak0 := procMemory(t, pid)

	// Three writers: a session's own budget is 64 MiB.
	v := make([]byte, value)
	var writers []*protoclient.Client
	for range 3 {
		w, err := rawDial(t, srv)
		if err != nil {
			t.Fatal(err)
		}
		writers = append(writers, w)
	}
	for i := range keys {
		w := writers[i%len(writers)]
		if err := w.Send(&protocol.Write{ID: uint64(i + 1), Op: protocol.OpPut, Key: []byte(fmt.Sprint("k", i)), Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	var st *protocol.StatsReply
	wait.For(t, 2*clitest.RunTimeout, "the writes to fill the budget", func() bool {
		st = serverStats(t, holder)
		return st.WritesWaiting == keys
	})
	rss1, peak1 := procMemory(t, pid)
	grew, peakGrew := float64(rss1-rss0), float64(peak1-peak0)
	t.Logf("%d writes of 1 MiB waiting, %d MiB counted of a budget of %d MiB: the server grew by %.0f MiB (%.2f a counted byte), its peak by %.0f MiB (%.2f)",
		st.WritesWaiting, st.InflightBytes/mib, budget/mib, grew/mib, grew/float64(st.InflightBytes), peakGrew/mib, peakGrew/float64(st.InflightBytes))
	if f := peakGrew / float64(budget); f > writeBudgetFactor {
		t.Fatalf("the server's peak grew by %.2f times the budget, over the %v documented", f, writeBudgetFactor)
	}
}

// writeBudgetFactor is the most memory a byte counted against
// --max-total-inflight-bytes costs the server, as DESIGN §9 says.
const writeBudgetFactor = 2
