package replica

// This file hands the logs of hashicorp/raft, its network transport and
// raft-wal, which log through an hclog.Logger, to the server's slog.Logger.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// HCLogger returns an hclog.Logger that hands each of raft's log calls to
// l as one record: raft's message, the level raftLevel gives it, and
// component=raft (or raft.NAME for a logger Named NAME) with raft's
// arguments as attributes. The same record, but for its time, is logged at
// most once per repeatWindow. For raft and the parts of it that the caller
// builds (its transport, snapshot store and log store); safe for
// concurrent use.
func HCLogger(l *slog.Logger) hclog.Logger {
	return &raftLogger{l: l, name: "raft", rep: &repeats{now: time.Now, seen: make(map[string]*repeat)}}
}

// raftLevel is the level leased logs raft's message msg at, which raft
// logged at level with args. Raft's info lines are its state changes,
// which leased logs in its own words ("leading the cluster"): they, and
// raft's debug and trace lines, are at debug level and below. Raft's
// warnings and errors keep their level, but for the routine ones in
// raftRoutine.
func raftLevel(level hclog.Level, msg string, args []any) slog.Level {
	for _, r := range raftRoutine[msg] {
		if r.when == nil || r.when(argErr(args)) {
			return r.level
		}
	}
	return baseLevel(level)
}

// baseLevel maps hclog's levels to slog's, raft's info to debug (see
// raftLevel).
func baseLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelDebug // Debug, Info, NoLevel
}

// raftRule is the level of one of raft's messages, when its error is one
// that when accepts (any error if when is nil). A message's first rule
// that holds applies.
type raftRule struct {
	level slog.Level
	when  func(error) bool
}

// raftRoutine lists raft's messages (hashicorp/raft v1.8) that a healthy
// cluster logs whenever a peer is down, restarts or catches up, or an
// election runs, with the level leased logs them at (docs/DESIGN.md §13,
// "Logs", states the policy). A message not listed, or none of whose rules
// holds, keeps raft's level.
var raftRoutine = map[string][]raftRule{
	// A peer is down or restarting: the cluster serves, with one node
	// less to spare (raft says ERROR).
	"failed to make requestVote RPC":          {{level: slog.LevelWarn}},
	"failed to appendEntries to":              {{level: slog.LevelWarn}},
	"failed to heartbeat to":                  {{level: slog.LevelWarn}},
	"failed to pipeline appendEntries":        {{level: slog.LevelWarn}},
	"failed to start pipeline replication to": {{level: slog.LevelWarn}},
	// A follower catches up: it is behind the leader's log, or holds
	// entries no leader committed, or the entries it lacks are compacted
	// and the leader sends a snapshot (raft says WARN, or ERROR for the
	// compacted entry).
	"failed to get previous log":                 {{level: slog.LevelInfo}},
	"previous log term mis-match":                {{level: slog.LevelInfo}},
	"appendEntries rejected, sending older logs": {{level: slog.LevelInfo}},
	"clearing log suffix":                        {{level: slog.LevelInfo}},
	"failed to get log":                          {{level: slog.LevelInfo, when: isLogNotFound}},
	// Elections: a node that restarted, or was cut off, campaigns with a
	// stale log or while the others still hear a leader; a leader learns
	// it was replaced (raft says WARN or ERROR).
	"heartbeat timeout reached, starting election":               {{level: slog.LevelDebug}},
	"Election timeout reached, restarting election":              {{level: slog.LevelInfo}},
	"rejecting vote request since we have a leader":              {{level: slog.LevelInfo}},
	"rejecting pre-vote request since we have a leader":          {{level: slog.LevelInfo}},
	"rejecting vote request since our last term is greater":      {{level: slog.LevelInfo}},
	"rejecting pre-vote request since our last term is greater":  {{level: slog.LevelInfo}},
	"rejecting vote request since our last index is greater":     {{level: slog.LevelInfo}},
	"rejecting pre-vote request since our last index is greater": {{level: slog.LevelInfo}},
	"peer has newer term, stopping replication":                  {{level: slog.LevelInfo}},
	"new leader elected, stepping down":                          {{level: slog.LevelInfo}},
	// A connection from a peer ends: this node closed it as it stops
	// (debug), or the peer went away in the middle of a message (raft
	// says ERROR).
	"failed to decode incoming command": {{level: slog.LevelDebug, when: isClosed}, {level: slog.LevelWarn, when: isPeerGone}},
	// The answer to a peer's request cannot go out: this node closed the
	// connection as it stops, or the peer went away.
	"failed to flush response": {{level: slog.LevelDebug, when: isClosed}, {level: slog.LevelWarn, when: isPeerGone}},
}

// isLogNotFound reports whether err is raft's for an entry the log no
// longer holds: the leader then sends a snapshot instead.
func isLogNotFound(err error) bool { return errors.Is(err, raft.ErrLogNotFound) }

// isClosed reports whether err is of a connection this node closed, or of
// its transport shutting down.
func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, raft.ErrTransportShutdown)
}

// isPeerGone reports whether err is of a connection the peer closed or
// reset in the middle of a message.
func isPeerGone(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// argErr returns the first error among raft's arguments, or nil.
func argErr(args []any) error {
	for i := 1; i < len(args); i += 2 {
		if err, ok := args[i].(error); ok {
			return err
		}
	}
	return nil
}

// raftLogger is the hclog.Logger of HCLogger. Loggers made from one with
// With and Named share its repeats.
type raftLogger struct {
	l    *slog.Logger
	name string // the component attribute
	args []any  // hclog key-value pairs from With
	rep  *repeats
}

// Log logs msg with args at the level raftLevel gives it.
func (r *raftLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	lvl := raftLevel(level, msg, args)
	ctx := context.Background()
	if !r.l.Enabled(ctx, lvl) {
		return
	}
	attrs := make([]slog.Attr, 0, 2+(len(r.args)+len(args))/2)
	attrs = append(attrs, slog.String("component", r.name))
	attrs = appendAttrs(attrs, r.args)
	attrs = appendAttrs(attrs, args)
	missed, ok := r.rep.first(lvl, msg, attrs)
	if !ok {
		return
	}
	if missed > 0 {
		attrs = append(attrs, slog.Int("repeated", missed))
	}
	r.l.LogAttrs(ctx, lvl, msg, attrs...)
}

func (r *raftLogger) Trace(msg string, args ...any) { r.Log(hclog.Trace, msg, args...) }
func (r *raftLogger) Debug(msg string, args ...any) { r.Log(hclog.Debug, msg, args...) }
func (r *raftLogger) Info(msg string, args ...any)  { r.Log(hclog.Info, msg, args...) }
func (r *raftLogger) Warn(msg string, args ...any)  { r.Log(hclog.Warn, msg, args...) }
func (r *raftLogger) Error(msg string, args ...any) { r.Log(hclog.Error, msg, args...) }

func (r *raftLogger) enabled(level hclog.Level) bool {
	return r.l.Enabled(context.Background(), baseLevel(level))
}

func (r *raftLogger) IsTrace() bool { return r.enabled(hclog.Trace) }
func (r *raftLogger) IsDebug() bool { return r.enabled(hclog.Debug) }
func (r *raftLogger) IsInfo() bool  { return r.enabled(hclog.Info) }
func (r *raftLogger) IsWarn() bool  { return r.enabled(hclog.Warn) }
func (r *raftLogger) IsError() bool { return r.enabled(hclog.Error) }

// ImpliedArgs returns the arguments given to With.
func (r *raftLogger) ImpliedArgs() []any { return append([]any(nil), r.args...) }

// With returns a logger that adds args to every record.
func (r *raftLogger) With(args ...any) hclog.Logger {
	c := *r
	c.args = append(append([]any(nil), r.args...), args...)
	return &c
}

// Name returns the component attribute's value.
func (r *raftLogger) Name() string { return r.name }

// Named returns a logger whose component is this one's, a dot and name.
func (r *raftLogger) Named(name string) hclog.Logger {
	c := *r
	c.name = r.name + "." + name
	return &c
}

// ResetNamed returns a logger whose component is name.
func (r *raftLogger) ResetNamed(name string) hclog.Logger {
	c := *r
	c.name = name
	return &c
}

// SetLevel does nothing: the slog.Logger's handler chooses what is logged.
func (r *raftLogger) SetLevel(hclog.Level) {}

// GetLevel returns the lowest of hclog's levels that is logged.
func (r *raftLogger) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Warn, hclog.Error} {
		if r.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

// StandardLogger returns a log.Logger whose lines are logged as
// StandardWriter logs them.
func (r *raftLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(r.StandardWriter(opts), "", 0)
}

// StandardWriter returns a writer that logs each line written to it: at
// opts.ForceLevel if set, else at the level its "[ERROR]"-style prefix
// names if opts.InferLevels, else at info.
func (r *raftLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	if opts == nil {
		opts = &hclog.StandardLoggerOptions{}
	}
	return &lineWriter{r: r, opts: *opts}
}

// lineWriter is StandardWriter's writer.
type lineWriter struct {
	r    *raftLogger
	opts hclog.StandardLoggerOptions
}

func (w *lineWriter) Write(p []byte) (int, error) {
	for line := range strings.Lines(string(p)) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		level := hclog.Info
		if w.opts.ForceLevel != hclog.NoLevel {
			level = w.opts.ForceLevel
		} else if w.opts.InferLevels {
			for _, l := range []struct {
				prefix string
				level  hclog.Level
			}{{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info}, {"[WARN]", hclog.Warn}, {"[ERROR]", hclog.Error}, {"[ERR]", hclog.Error}} {
				if rest, ok := strings.CutPrefix(line, l.prefix); ok {
					level, line = l.level, strings.TrimSpace(rest)
					break
				}
			}
		}
		w.r.Log(level, line)
	}
	return len(p), nil
}

// appendAttrs appends hclog's key-value pairs args to attrs. Keys are
// raft's, with spaces as underscores and "error" as "err" (the name
// leased's own records use); a value is kept if slog prints it as raft
// means it, else formatted as hclog would.
func appendAttrs(attrs []slog.Attr, args []any) []slog.Attr {
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			attrs = append(attrs, slog.Any("extra_value", attrValue(args[i])))
			break
		}
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		key = strings.ReplaceAll(key, " ", "_")
		if key == "error" {
			key = "err"
		}
		attrs = append(attrs, slog.Any(key, attrValue(args[i+1])))
	}
	return attrs
}

// attrValue returns v as slog should hold it.
func attrValue(v any) any {
	switch v := v.(type) {
	case nil, string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64,
		float32, float64, time.Duration, time.Time, error:
		return v
	case hclog.Format:
		if len(v) == 0 {
			return ""
		}
		if f, ok := v[0].(string); ok {
			return fmt.Sprintf(f, v[1:]...)
		}
		return fmt.Sprint(v...)
	case hclog.Hex:
		return fmt.Sprintf("0x%x", int(v))
	case hclog.Octal:
		return fmt.Sprintf("0%o", int(v))
	case hclog.Binary:
		return fmt.Sprintf("0b%b", int(v))
	case hclog.Quote:
		return fmt.Sprintf("%q", string(v))
	case fmt.Stringer:
		return v.String()
	}
	return fmt.Sprintf("%v", v)
}

// repeatWindow is how long raft's same record is logged only once: a node
// whose log cannot be written (a read-only or lost data folder) steps down
// and is elected again many times a second, each time with the same error.
const repeatWindow = 10 * time.Second

// repeats remembers raft's records, to log the same one at most once per
// repeatWindow, with the number of repeats left out since.
type repeats struct {
	now func() time.Time

	mu   sync.Mutex // guards seen
	seen map[string]*repeat
}

// repeat is when a record was last logged, and how often it came since.
type repeat struct {
	at     time.Time
	missed int
}

// first reports whether the record of level, msg and attrs is due to be
// logged, and how often it came since it last was.
func (s *repeats) first(level slog.Level, msg string, attrs []slog.Attr) (missed int, ok bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "%v %q", level, msg)
	for _, a := range attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	key := b.String()
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.seen[key]
	if r != nil && now.Sub(r.at) < repeatWindow {
		r.missed++
		return 0, false
	}
	if r != nil {
		missed = r.missed
	}
	if len(s.seen) >= 256 {
		clear(s.seen) // records differ by more than their time: forget them
	}
	s.seen[key] = &repeat{at: now}
	return missed, true
}
