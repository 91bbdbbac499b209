package main

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/leased/leased/internal/testkit/clitest"
)

// TestCompaction: compaction REV compacts the event history through REV on
// a real server, and status and stats show the compaction point after it;
// a REV in the future and one that is not a number are refused as invalid
// arguments (exit 2); a REV below the point changes nothing.
func TestCompaction(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	ctl := func(args ...string) clitest.Result { t.Helper(); return srv.Ctl(t, args...) }
	for i := range 5 {
		ok(t, ctl("put", "k", fmt.Sprint(i)))
	}
	var st statusJSON
	decode(t, ctl("-o", "json", "status"), &st)
	if st.Revision != 5 || st.Compacted != 0 {
		t.Fatalf("status before: revision %d, compacted %d; want 5, 0", st.Revision, st.Compacted)
	}
	var cj compactionJSON
	decode(t, ctl("-o", "json", "compaction", "3"), &cj)
	if cj.Compacted != 3 || cj.Events == 0 || cj.Bytes == 0 {
		t.Fatalf("compaction 3: %+v; want compacted through 3 with events 4 and 5 kept", cj)
	}
	rows := table(t, ok(t, ctl("compaction", "2")).Stdout)
	if len(rows) != 2 || rows[1][0] != "3" {
		t.Fatalf("compaction 2, below the point: %v; want COMPACTED 3 still", rows)
	}
	decode(t, ctl("-o", "json", "status"), &st)
	if st.Compacted != 3 {
		t.Fatalf("status after: compacted %d, want 3", st.Compacted)
	}
	var sj statsJSON
	decode(t, ctl("-o", "json", "stats"), &sj)
	if sj.HistoryCompacted != 3 || sj.HistoryEvents != cj.Events {
		t.Fatalf("stats after: history compacted %d, events %d; want 3, %d", sj.HistoryCompacted, sj.HistoryEvents, cj.Events)
	}
	fails(t, ctl("compaction", "9"), exitUsage, "the revision is in the future")
	fails(t, ctl("compaction", "three"), exitUsage, `REV "three" is not a revision`)
}
