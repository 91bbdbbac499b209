package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/leased/leased/internal/testkit/logbuf"
)

// timestamp matches a time of day as hclog writes it at the start of a line.
var timestamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d`)

// TestRaftLogIsOneRecord: a raft-style hclog call is one slog record, in
// the server's format, with raft's message as its message (no second time
// or level in it), raft's arguments as attributes and component=raft.
// (Before, hclog formatted the line, time and "[WARN]" included, and that
// text became the message of a slog record with a time of its own.)
func TestRaftLogIsOneRecord(t *testing.T) {
	var text, js logbuf.Buffer
	HCLogger(slog.New(slog.NewTextHandler(&text, nil))).Warn("failed to contact", "server-id", raft.ServerID("n1"), "time", 230*time.Millisecond)
	HCLogger(slog.New(slog.NewJSONHandler(&js, nil))).Warn("failed to contact", "server-id", raft.ServerID("n1"), "time", 230*time.Millisecond)

	line := strings.TrimSuffix(text.String(), "\n")
	if strings.Count(line, "\n") != 0 || strings.Count(line, "time=") != 2 { // the record's time, and raft's argument
		t.Fatalf("want one line with the record's time only, got:\n%s", text.String())
	}
	if want := `level=WARN msg="failed to contact" component=raft server-id=n1 time=230ms`; !strings.HasSuffix(line, want) {
		t.Errorf("text line:\n%s\nwant it to end with:\n%s", line, want)
	}
	recs := logbuf.Records(t, js.String())
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1:\n%s", len(recs), js.String())
	}
	r := recs[0]
	if r["level"] != "WARN" || r["msg"] != "failed to contact" || r["component"] != "raft" || r["server-id"] != "n1" || r["time"] == nil {
		t.Errorf("record %v: want level WARN, msg %q, component raft, server-id n1", r, "failed to contact")
	}
	if msg := r["msg"].(string); timestamp.MatchString(msg) || strings.Contains(msg, "[") {
		t.Errorf("the message holds a time or a level of its own: %q", msg)
	}
}

// TestRaftLogLevels: raft's routine messages (a peer down or restarting, a
// follower catching up, an election, this node closing its connections)
// are logged below ERROR, at the level raftRoutine gives; the others keep
// raft's level, raft's info lines being leased's debug ones. (Before, every
// raft ERROR was an ERROR: a follower's restart logged dozens.)
func TestRaftLogLevels(t *testing.T) {
	peer := raft.Server{Suffrage: raft.Voter, ID: "n1", Address: "127.0.0.1:7501"}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	closed := &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, tc := range []struct {
		level hclog.Level
		msg   string
		args  []any
		want  slog.Level
	}{
		{hclog.Error, "failed to heartbeat to", []any{"peer", peer.Address, "backoff time", 10 * time.Millisecond, "error", refused}, slog.LevelWarn},
		{hclog.Error, "failed to make requestVote RPC", []any{"target", peer, "error", refused, "term", 3}, slog.LevelWarn},
		{hclog.Error, "failed to appendEntries to", []any{"peer", peer, "error", refused}, slog.LevelWarn},
		{hclog.Warn, "failed to get previous log", []any{"previous-index", 78, "last-index", 6, "error", raft.ErrLogNotFound}, slog.LevelInfo},
		{hclog.Warn, "appendEntries rejected, sending older logs", []any{"peer", peer, "next", 7}, slog.LevelInfo},
		{hclog.Warn, "rejecting pre-vote request since we have a leader", []any{"from", peer.Address}, slog.LevelInfo},
		{hclog.Error, "peer has newer term, stopping replication", []any{"peer", peer}, slog.LevelInfo},
		{hclog.Warn, "heartbeat timeout reached, starting election", nil, slog.LevelDebug},
		// The leader's entry is compacted: it sends a snapshot instead.
		{hclog.Error, "failed to get log", []any{"index", 5, "error", fmt.Errorf("wal: %w", raft.ErrLogNotFound)}, slog.LevelInfo},
		{hclog.Error, "failed to get log", []any{"index", 5, "error", errors.New("checksum mismatch")}, slog.LevelError},
		{hclog.Error, "failed to decode incoming command", []any{"error", closed}, slog.LevelDebug},
		{hclog.Error, "failed to decode incoming command", []any{"error", raft.ErrTransportShutdown}, slog.LevelDebug},
		{hclog.Error, "failed to decode incoming command", []any{"error", reset}, slog.LevelWarn},
		{hclog.Error, "failed to decode incoming command", []any{"error", errors.New("msgpack decode error [pos 3]: invalid length")}, slog.LevelError},
		{hclog.Error, "failed to flush response", []any{"error", closed}, slog.LevelDebug},
		{hclog.Error, "failed to flush response", []any{"error", reset}, slog.LevelWarn},
		{hclog.Error, "failed to flush response", []any{"error", errors.New("short write")}, slog.LevelError},
		// Not routine: raft's level.
		{hclog.Warn, "failed to contact", []any{"server-id", "n1", "time", time.Second}, slog.LevelWarn},
		{hclog.Warn, "failed to contact quorum of nodes, stepping down", nil, slog.LevelWarn},
		{hclog.Error, "failed to commit logs", []any{"error", errors.New("segment is sealed")}, slog.LevelError},
		{hclog.Error, "rotate error", []any{"err", errors.New("no space left on device")}, slog.LevelError},
		{hclog.Info, "entering follower state", []any{"leader-id", "n2"}, slog.LevelDebug},
		{hclog.Debug, "accepted connection", nil, slog.LevelDebug},
		{hclog.Trace, "handling command", nil, slog.LevelDebug - 4},
	} {
		var out logbuf.Buffer
		HCLogger(slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug - 8}))).Log(tc.level, tc.msg, tc.args...)
		recs := logbuf.Records(t, out.String())
		if len(recs) != 1 {
			t.Errorf("%s %q: %d records, want 1", tc.level, tc.msg, len(recs))
			continue
		}
		var got slog.Level
		if err := got.UnmarshalText([]byte(recs[0]["level"].(string))); err != nil {
			t.Fatal(err)
		}
		if got != tc.want || recs[0]["msg"] != tc.msg {
			t.Errorf("raft's %s %q %v: logged at %v as %q, want %v", tc.level, tc.msg, tc.args, got, recs[0]["msg"], tc.want)
		}
	}

	// At the server's default level, raft's info and debug lines are left
	// out, and raft is told so.
	var out logbuf.Buffer
	l := HCLogger(slog.New(slog.NewTextHandler(&out, nil)))
	l.Info("entering follower state")
	if out.String() != "" {
		t.Errorf("raft's info line at leased's info level: %q, want none", out.String())
	}
	if l.IsInfo() || l.IsDebug() || !l.IsWarn() || !l.IsError() || l.GetLevel() != hclog.Warn {
		t.Errorf("IsInfo %v IsDebug %v IsWarn %v IsError %v GetLevel %v; want false false true true WARN", l.IsInfo(), l.IsDebug(), l.IsWarn(), l.IsError(), l.GetLevel())
	}
}

// TestRaftRoutineMessagesAreRafts: every message of raftRoutine is one that
// the raft in go.mod logs, so that an upgrade that rewords one fails here
// rather than turning a routine message back into an ERROR.
func TestRaftRoutineMessagesAreRafts(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/hashicorp/raft").Output()
	if err != nil {
		t.Skipf("no go command to find raft's source: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("raft's source files: %v, %v", files, err)
	}
	var src strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for msg := range raftRoutine {
		if !strings.Contains(src.String(), `logger.Error("`+msg+`"`) && !strings.Contains(src.String(), `logger.Warn("`+msg+`"`) {
			t.Errorf("raft logs no error or warning %q", msg)
		}
	}
}

// TestRaftLogArgs: With's arguments and Named's name reach every record;
// keys are slog-style (no spaces; "error" is "err"); hclog's formatting
// helpers and raft's types print as hclog prints them.
func TestRaftLogArgs(t *testing.T) {
	var out logbuf.Buffer
	l := HCLogger(slog.New(slog.NewJSONHandler(&out, nil))).Named("wal").With("id", "snap-1")
	l.Error("failed to heartbeat to", "peer", raft.Server{Suffrage: raft.Voter, ID: "n1", Address: "a:1"},
		"backoff time", 20*time.Millisecond, "error", errors.New("refused"), "what", hclog.Fmt("%d of %d", 1, 2), "odd")
	recs := logbuf.Records(t, out.String())
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1:\n%s", len(recs), out.String())
	}
	r := recs[0]
	for k, want := range map[string]any{"component": "raft.wal", "id": "snap-1", "peer": "{Voter n1 a:1}", "backoff_time": float64(20 * time.Millisecond),
		"err": "refused", "what": "1 of 2", "extra_value": "odd"} {
		if r[k] != want {
			t.Errorf("%s = %v (%T), want %v; record %v", k, r[k], r[k], want, r)
		}
	}
	if l.Name() != "raft.wal" || len(l.ImpliedArgs()) != 2 {
		t.Errorf("Name %q, ImpliedArgs %v", l.Name(), l.ImpliedArgs())
	}
	out2 := &logbuf.Buffer{}
	std := HCLogger(slog.New(slog.NewJSONHandler(out2, nil))).StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	std.Print("[ERROR] something broke")
	if recs := logbuf.Records(t, out2.String()); len(recs) != 1 || recs[0]["level"] != "ERROR" || recs[0]["msg"] != "something broke" {
		t.Errorf("a standard logger's line: %v", recs)
	}
}

// TestRaftRepeatsLoggedOnce: raft's same record, but for its time, is
// logged once per repeatWindow, then again with the number of repeats left
// out; other records are logged as they come.
func TestRaftRepeatsLoggedOnce(t *testing.T) {
	var out logbuf.Buffer
	now := time.Unix(1e9, 0)
	l := HCLogger(slog.New(slog.NewTextHandler(&out, nil))).(*raftLogger)
	l.rep.now = func() time.Time { return now }
	sealed := func() { l.Error("failed to commit logs", "error", errors.New("segment is sealed")) }
	for range 100 {
		sealed()
		now = now.Add(time.Millisecond)
	}
	l.Error("another failure")
	if got := strings.Count(out.String(), "segment is sealed"); got != 1 {
		t.Fatalf("the same record 100 times within %v was logged %d times, want once:\n%s", repeatWindow, got, out.String())
	}
	if !strings.Contains(out.String(), "another failure") {
		t.Fatalf("another record was left out:\n%s", out.String())
	}
	now = now.Add(repeatWindow)
	before := len(out.String())
	sealed()
	if again := out.String()[before:]; !strings.Contains(again, "segment is sealed") || !strings.Contains(again, "repeated=99") {
		t.Fatalf("after %v, the record again with repeated=99; got:\n%s", repeatWindow, again)
	}
}
