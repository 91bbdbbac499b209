// Backups: a snapshot streamed to a file (leasectl snapshot save) is the stream raft's snapshots hold;
// these summarize it, as Summarize (digest.go) summarizes a database, to check and compare the file.

package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// WriteSummary streams the snapshot to w, as WriteTo, and returns the
// summary of what it streamed: the applied index, the state, the number of
// keys and the digest, the same as Summarize of a database that restored
// the stream, and the number of bytes written.
func (s *Snapshot) WriteSummary(w io.Writer) (Summary, int64, error) {
	sm := newStreamSummary()
	n, err := s.write(w, sm.add)
	if err != nil {
		return Summary{}, n, err
	}
	sum, err := sm.finish(s.applied)
	return sum, n, err
}

// ReadSnapshot reads a whole snapshot stream, checks it, and returns its
// summary (see WriteSummary) and its length in bytes. A stream that is cut
// short, corrupt, or not a snapshot is ErrCorruptSnapshot. It holds one key
// and value in memory at a time, and the metadata.
func ReadSnapshot(r io.Reader) (Summary, int64, error) {
	cr := &countReader{r: r}
	sm := newStreamSummary()
	// A record that does not decode, behind a sum that matches, is as
	// corrupt to the reader as a sum that does not.
	add := func(key, value []byte) error {
		if err := sm.add(key, value); err != nil {
			return fmt.Errorf("%w: %v", ErrCorruptSnapshot, err)
		}
		return nil
	}
	applied, err := readSnapshot(cr, add)
	if err != nil {
		return Summary{}, cr.n, err
	}
	sum, err := sm.finish(applied)
	if err != nil {
		return Summary{}, cr.n, fmt.Errorf("%w: %v", ErrCorruptSnapshot, err)
	}
	return sum, cr.n, nil
}

// streamSummary builds a Summary from the keys of a snapshot stream, in key
// order: it sums every key, and keeps the metadata and write leases.
type streamSummary struct {
	s    *summarizer
	meta metaTxn
	wls  []WriteLease
}

func newStreamSummary() *streamSummary {
	return &streamSummary{s: newSummarizer(), meta: metaTxn{}}
}

func (m *streamSummary) add(key, value []byte) error {
	switch {
	case bytes.HasPrefix(key, metaPrefix):
		m.meta[string(key)] = bytes.Clone(value)
	case bytes.HasPrefix(key, wleasPrefix):
		wl, err := decodeWriteLease(key[len(wleasPrefix):], value)
		if err != nil {
			return err
		}
		m.wls = append(m.wls, wl)
	}
	return m.s.add(key, value)
}

func (m *streamSummary) finish(applied uint64) (Summary, error) {
	sum := Summary{Applied: applied}
	ct, err := loadCounters(m.meta)
	if err != nil {
		return sum, err
	}
	sum.State.Revision, sum.State.Fence, sum.State.TTLLeaseID = ct.rev, ct.fence, ct.ttl
	if err := loadMeta(m.meta, &sum.State); err != nil {
		return sum, err
	}
	sum.State.WriteLeases = m.wls
	m.s.finish(&sum)
	return sum, nil
}

// metaPrefix opens the keys of the metadata: counters, horizon, leader.
var metaPrefix = []byte("m/")

// metaTxn is a read-only txn over the metadata a snapshot stream holds.
type metaTxn map[string][]byte

func (t metaTxn) get(key []byte) ([]byte, bool, error) {
	v, ok := t[string(key)]
	return v, ok, nil
}

func (t metaTxn) has(key []byte) (bool, error) {
	_, ok := t[string(key)]
	return ok, nil
}

// scan finds nothing: a summary keeps only the metadata.
func (t metaTxn) scan(prefix, from []byte, fn func(key, value []byte) error) error { return nil }

func (t metaTxn) set(key, value []byte) error { return errSummaryOnly }
func (t metaTxn) del(key []byte) error        { return errSummaryOnly }

var errSummaryOnly = errors.New("a snapshot's summary changes nothing")

// countReader counts the bytes read from r.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
