package main

import (
	"regexp"
	"strings"
	"testing"
)

// stdLogDate matches the date that a logger of the standard log package
// (badger's own, for one) writes before each of its lines.
var stdLogDate = regexp.MustCompile(`^\S*\s*\d{4}/\d\d/\d\d \d\d:\d\d:\d\d `)

// rawLogLines returns the lines of a leased process's stderr that bypassed
// its slog handler: written by a logger of the standard log package.
func rawLogLines(stderr string) []string {
	var raw []string
	for line := range strings.Lines(stderr) {
		if stdLogDate.MatchString(line) {
			raw = append(raw, strings.TrimSpace(line))
		}
	}
	return raw
}

// innerTime matches a record whose message begins with a time of its own.
var innerTime = regexp.MustCompile(`msg="\d{4}-\d\d-\d\dT`)

// routineLogProblems returns the lines of the stderr of a node of a
// cluster, through routine events only (peers killed, restarted, caught
// up, stopped), that are not what it must log: a record of leased's text
// handler, not at ERROR, whose message carries no time or level of its own.
func routineLogProblems(stderr string) []string {
	var bad []string
	for line := range strings.Lines(stderr) {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case !strings.HasPrefix(line, "time="):
			bad = append(bad, "not a record: "+line)
		case strings.Contains(line, " level=ERROR "):
			bad = append(bad, "an ERROR: "+line)
		case strings.Contains(line, "[ERROR]") || strings.Contains(line, "[WARN]") || innerTime.MatchString(line):
			bad = append(bad, "a second time or level: "+line)
		}
	}
	return bad
}

// TestRoutineLogProblems: routineLogProblems and rawLogLines tell the
// lines issue 26 found from leased's own records.
func TestRoutineLogProblems(t *testing.T) {
	good := `time=2026-11-27T21:16:12.107Z level=WARN msg="failed to heartbeat to" node=n2 component=raft peer=127.0.0.1:17501 backoff_time=10ms err=EOF
time=2026-11-27T21:17:11.290Z level=INFO msg="failed to get previous log" node=n1 component=raft previous-index=111 last-index=6 err="log not found"
`
	if bad := routineLogProblems(good); len(bad) > 0 {
		t.Errorf("leased's own records: %q", bad)
	}
	for _, bad := range []string{
		`time=2026-11-27T21:03:12.331Z level=ERROR msg="2026-11-27T21:03:12.331Z [ERROR] raft: failed to heartbeat to: peer=127.0.0.1:17501" node=n2 component=raft`,
		`time=2026-11-27T21:03:57.841Z level=WARN msg="2026-11-27T21:03:57.841Z [WARN]  raft: failed to get previous log: previous-index=78" node=n1 component=raft`,
		`badger 2026/11/27 21:05:42 ERROR: Unable to read: Key: [100 47 98 105 103 45 98]`,
	} {
		if got := routineLogProblems(good + bad + "\n"); len(got) != 1 {
			t.Errorf("%q: problems %q, want the line", bad, got)
		}
	}
	if raw := rawLogLines(good + "badger 2026/11/27 21:05:42 ERROR: Unable to read\n"); len(raw) != 1 {
		t.Errorf("raw lines %q, want badger's one", raw)
	}
	if raw := rawLogLines(good); len(raw) != 0 {
		t.Errorf("raw lines %q among leased's records", raw)
	}
}
