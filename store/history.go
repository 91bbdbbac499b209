// The event history (DESIGN §16): each change of a key, kept by revision in the same step that
// makes it, read back from a revision (History), and compacted through the log (OpCompact).

package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Every command that changes keys records, in the same step, one event per
// key it changes: the revision, how (EventPut, EventDelete, EventExpire),
// the new value of a put, and the TTL lease. Every replica applies the
// same commands and so holds the same history, which is part of the state
// like any key, and travels in snapshots. The raft log is not the history:
// it is truncated at each snapshot.
//
// Layout:
//
//   - e/<revision, 8 bytes big-endian><key> holds an event: its kind (one
//     byte), its lease and the revision of the key's previous event still
//     held (uvarints, 0: none), and, for a put, the value. A revision's
//     events are adjacent, in key order, and revisions follow each other.
//   - h/<key> holds the revision of the key's newest event (8 bytes), for
//     as long as the key has one.
//
// The previous value of an event (Event.PrevValue) is the value of the
// event its previous revision names. So that it is there for every event
// the history holds, compaction keeps, below the compaction point, the
// newest event of a key whose next event it keeps (a base); and a key
// changed for the first time since the history lost its events gets a
// base made from its record, at the record's version, in the step that
// changes it.
var (
	eventPrefix = []byte("e/")
	headPrefix  = []byte("h/")
	// metaHistory holds, 8 bytes each, the compaction point (the history
	// holds every event of the revisions above it, and none, but bases,
	// at or below it), and the bytes (keys and values of e/ and h/
	// records) and the events the history holds, bases included: one
	// record, which every change rewrites. Absent in a database at a
	// revision above 0: it was written before the history was kept, and
	// its history starts at the first revision taken since
	// (counters.history).
	metaHistory = []byte("m/history")
	// metaHistoryFloor is the revision a restore's Bump raised the
	// counters to: a read of the history from it or below fails with
	// ErrCompacted, as etcd's restore marks the revision compacted, so
	// that a watcher of the state before the restore lists again rather
	// than miss the changes lost with it. Compaction goes on from the
	// compaction point; the floor only bounds reads.
	metaHistoryFloor = []byte("m/historyfloor")
)

// EventKind says how an event changed its key.
type EventKind uint8

// Kinds of events.
const (
	// EventPut set the key to Event.Value, attached to Event.Lease (0:
	// none).
	EventPut EventKind = iota + 1
	// EventDelete deleted the key: a delete, or a TTL lease revoked by
	// its holder (Event.Lease names it then).
	EventDelete
	// EventExpire deleted the key because its TTL lease, Event.Lease,
	// expired.
	EventExpire
)

func (k EventKind) String() string {
	switch k {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	case EventExpire:
		return "expire"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one change of one key, as the history holds it.
type Event struct {
	Kind EventKind
	Key  []byte
	// Revision is the revision of the change, the key's version after it.
	Revision uint64
	// Value is the value a put set; nil otherwise.
	Value []byte
	// Lease is the TTL lease a put attached the key to, or whose
	// revocation or expiry deleted it; 0: none.
	Lease uint64
	// PrevFound says that the key held a value before the change, and
	// PrevValue is that value, PrevRevision the revision that set it:
	// filled by History only when HistoryOptions.Prev asks.
	PrevFound    bool
	PrevValue    []byte
	PrevRevision uint64
}

// history is the part of the counters that describe the history: the
// compaction point, the bytes and events held, whether the compaction
// point is known (see metaHistory), and the floor of reads
// (metaHistoryFloor).
type history struct {
	compacted, bytes, events, floor uint64
	known                           bool
}

// historyState returns what State tells of the history: its compaction
// point as reads see it (readFrom).
func (ct counters) historyState() HistoryState {
	return HistoryState{Compacted: ct.readFrom() - 1, Bytes: ct.history.bytes, Events: ct.history.events}
}

// readFrom returns the oldest revision a read of the history may start
// from: above the compaction point, the floor, and, before the history
// is known, the revision.
func (ct counters) readFrom() uint64 {
	h := ct.history
	c := max(h.compacted, h.floor)
	if !h.known {
		c = max(c, ct.rev)
	}
	return c + 1
}

// loadHistory reads the history's counters in a store at revision rev.
func loadHistory(tx txn, rev uint64) (history, error) {
	var h history
	var err error
	if h.floor, err = getUint(tx, metaHistoryFloor); err != nil {
		return h, err
	}
	b, ok, err := tx.get(metaHistory)
	switch {
	case err != nil:
		return h, err
	case !ok:
		h.known = rev == 0
		return h, nil
	case len(b) != 24:
		return h, fmt.Errorf("metadata %s: %d bytes, want 24", metaHistory, len(b))
	}
	h.known = true
	h.compacted = binary.BigEndian.Uint64(b)
	h.bytes = binary.BigEndian.Uint64(b[8:])
	h.events = binary.BigEndian.Uint64(b[16:])
	return h, nil
}

// saveHistory writes the history's counters h, which were was.
func saveHistory(tx txn, was, h history) error {
	if h.floor != was.floor {
		if err := setUint(tx, metaHistoryFloor, h.floor); err != nil {
			return err
		}
	}
	if h == was || !h.known {
		return nil
	}
	b := make([]byte, 0, 24)
	b = binary.BigEndian.AppendUint64(b, h.compacted)
	b = binary.BigEndian.AppendUint64(b, h.bytes)
	b = binary.BigEndian.AppendUint64(b, h.events)
	return tx.set(metaHistory, b)
}

// eventKey is the key of the event of key at revision rev.
func eventKey(rev uint64, key []byte) []byte {
	b := make([]byte, 0, len(eventPrefix)+8+len(key))
	b = binary.BigEndian.AppendUint64(append(b, eventPrefix...), rev)
	return append(b, key...)
}

// parseEventKey returns the revision and the key of an event's key.
func parseEventKey(k []byte) (uint64, []byte, error) {
	if !bytes.HasPrefix(k, eventPrefix) || len(k) < len(eventPrefix)+8 {
		return 0, nil, fmt.Errorf("event key %x", k)
	}
	return binary.BigEndian.Uint64(k[len(eventPrefix):]), k[len(eventPrefix)+8:], nil
}

// encodeEvent lays an event out as its kind, its lease and the revision of
// its key's previous event (uvarints), then the value of a put.
func encodeEvent(kind EventKind, lease, prev uint64, value []byte) []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(value))
	b = append(b, byte(kind))
	b = binary.AppendUvarint(b, lease)
	b = binary.AppendUvarint(b, prev)
	return append(b, value...)
}

// decodeEvent reads an event that encodeEvent laid out, of the key at
// revision rev: its kind is known, its previous revision below rev, and
// only a put has a value.
func decodeEvent(rev uint64, key, b []byte) (Event, uint64, error) {
	if len(b) == 0 {
		return Event{}, 0, errors.New("empty event")
	}
	e := Event{Kind: EventKind(b[0]), Key: key, Revision: rev}
	if e.Kind < EventPut || e.Kind > EventExpire {
		return Event{}, 0, fmt.Errorf("event of unknown kind %d", b[0])
	}
	b = b[1:]
	lease, n := binary.Uvarint(b)
	if n <= 0 || n != uvarintLen(lease) {
		return Event{}, 0, errors.New("event lease does not decode")
	}
	b = b[n:]
	prev, n := binary.Uvarint(b)
	if n <= 0 || n != uvarintLen(prev) || prev >= rev && rev > 0 {
		return Event{}, 0, fmt.Errorf("event previous revision does not decode or is not below %d", rev)
	}
	b = b[n:]
	if e.Kind != EventPut && len(b) > 0 {
		return Event{}, 0, fmt.Errorf("a %v event with a value of %d bytes", e.Kind, len(b))
	}
	e.Lease = lease
	if e.Kind == EventPut {
		e.Value = append([]byte{}, b...)
	}
	return e, prev, nil
}

// uvarintLen is the length of v as a uvarint, as encodeEvent writes it:
// a longer encoding of the same number is refused.
func uvarintLen(v uint64) int { return len(binary.AppendUvarint(nil, v)) }

// recordEvent records, in a step at counters ct, the event of key at
// revision rev: kind, with value (a put's) and lease. The caller calls it
// before it writes the key's record and its attachment, so that a key
// with no event held gets a base made from its record as it was.
func recordEvent(tx txn, ct *counters, rev uint64, kind EventKind, key, value []byte, lease uint64) error {
	h := &ct.history
	if !h.known {
		// The first revision taken since the history was kept: it starts
		// after the revision before.
		h.compacted, h.known = ct.rev, true
	}
	hk := prefixed(headPrefix, key)
	b, ok, err := tx.get(hk)
	if err != nil {
		return err
	}
	var prev uint64
	switch {
	case ok && len(b) == 8:
		prev = binary.BigEndian.Uint64(b)
	case ok:
		return fmt.Errorf("corrupt head of the history of %q: %d bytes", key, len(b))
	default:
		// The key has no event held: its state before this change is its
		// record, whose event (if it had one) was compacted.
		h.bytes += uint64(len(hk) + 8)
		rec, err := getRecord(tx, prefixed(dataPrefix, key))
		if err != nil {
			return err
		}
		if rec.Found && rec.Version < rev {
			l, err := keyLease(tx, key)
			if err != nil {
				return err
			}
			if err := putEvent(tx, h, eventKey(rec.Version, key), encodeEvent(EventPut, l, 0, rec.Value)); err != nil {
				return err
			}
			prev = rec.Version
		}
	}
	if err := putEvent(tx, h, eventKey(rev, key), encodeEvent(kind, lease, prev, value)); err != nil {
		return err
	}
	return tx.set(hk, binary.BigEndian.AppendUint64(nil, rev))
}

// putEvent writes an event record and counts it.
func putEvent(tx txn, h *history, k, v []byte) error {
	h.bytes += uint64(len(k) + len(v))
	h.events++
	return tx.set(k, v)
}

// dropEvent deletes an event record of size bytes, key and value, and
// uncounts it.
func dropEvent(tx txn, h *history, k []byte, size int) error {
	h.bytes -= min(h.bytes, uint64(size))
	h.events -= min(h.events, 1)
	return tx.del(k)
}

// Bounds of one OpCompact: the events it visits, at least one whole
// revision's. Like MaxTombstonesPerCommand, they keep its step small.
const MaxCompactEvents = 1000

// compactHistory applies OpCompact: it drops the events of the oldest
// revisions, up to through and until the history holds at most keepBytes
// (0: no bound), whole revisions at a time, at most MaxCompactEvents
// events but always one revision, and moves the compaction point to the
// last revision dropped. It keeps, as a base, the newest event of a key
// whose next event it keeps, and drops a base whose next event it drops.
// It takes no revision. Result.More says that it stopped at its bound with
// revisions up to through left to drop.
func compactHistory(tx txn, ct *counters, through, keepBytes uint64) (Result, error) {
	h := &ct.history
	through = min(through, ct.rev)
	if !h.known {
		// Nothing held: the history starts after the revision now.
		h.compacted, h.known = ct.rev, true
	}
	if through <= h.compacted {
		return Result{}, nil
	}
	type visit struct {
		rev     uint64
		key, ek []byte
		prev    uint64
		size    int
	}
	var (
		visits []visit
		stop   uint64 // the last revision whose events are all visited
		seen   uint64 // the bytes of the visits
		// Why the scan stopped: the bound of events (more), the bound of
		// bytes (enough), or neither: no event of a revision up to
		// through is left.
		more, enough bool
	)
	err := tx.scan(eventPrefix, eventKey(h.compacted+1, nil), func(k, v []byte) error {
		rev, key, err := parseEventKey(k)
		if err != nil {
			return err
		}
		if rev > through {
			return errStopScan
		}
		if rev != stop {
			// A revision boundary: the bounds are checked here only.
			if len(visits) >= MaxCompactEvents {
				more = true
				return errStopScan
			}
			if keepBytes > 0 && h.bytes-min(h.bytes, seen) <= keepBytes {
				enough = true
				return errStopScan
			}
			stop = rev
		}
		_, prev, err := decodeEvent(rev, key, v)
		if err != nil {
			return err
		}
		visits = append(visits, visit{rev: rev, key: bytes.Clone(key), ek: bytes.Clone(k), prev: prev, size: len(k) + len(v)})
		seen += uint64(len(k) + len(v))
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return Result{}, err
	}
	newest := make(map[string]uint64, len(visits))
	for _, v := range visits {
		newest[string(v.key)] = v.rev
	}
	for _, v := range visits {
		if v.prev != 0 && v.prev <= h.compacted {
			// A base kept for this event alone.
			bk := eventKey(v.prev, v.key)
			b, ok, err := tx.get(bk)
			if err != nil {
				return Result{}, err
			}
			if ok {
				if err := dropEvent(tx, h, bk, len(bk)+len(b)); err != nil {
					return Result{}, err
				}
			}
		}
		hk := prefixed(headPrefix, v.key)
		head, err := getUint(tx, hk)
		if err != nil {
			return Result{}, err
		}
		switch {
		case head == v.rev:
			// The key's newest event: a later change makes a base from
			// its record.
			if err := dropEvent(tx, h, v.ek, v.size); err != nil {
				return Result{}, err
			}
			h.bytes -= min(h.bytes, uint64(len(hk)+8))
			if err := tx.del(hk); err != nil {
				return Result{}, err
			}
		case newest[string(v.key)] > v.rev:
			if err := dropEvent(tx, h, v.ek, v.size); err != nil {
				return Result{}, err
			}
		}
		// Otherwise the key's next event is past stop: this one stays
		// as its base.
	}
	switch {
	case more || enough:
		h.compacted = max(h.compacted, stop)
	default:
		// Every event up to through is visited: the revisions between
		// the last one and through changed no key.
		h.compacted = through
	}
	return Result{More: more}, nil
}

// ErrCompacted is the error of a read of the history from a revision it
// no longer holds (CompactedError).
var ErrCompacted = errors.New("required revision has been compacted")

// CompactedError is a read of the history from a revision at or below its
// compaction point, Compacted: the history holds revisions from
// Compacted+1 on. It wraps ErrCompacted.
type CompactedError struct {
	Compacted uint64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("%v: compacted through revision %d; read from revision %d or later", ErrCompacted, e.Compacted, e.Compacted+1)
}

// Unwrap returns ErrCompacted.
func (e *CompactedError) Unwrap() error { return ErrCompacted }

// HistoryOptions say which events History reads.
type HistoryOptions struct {
	// From is the first revision read: above the compaction point, or
	// the read fails with a CompactedError. 0 means the compaction point
	// plus one.
	From uint64
	// Start and End bound the keys: Start <= key < End; a nil or empty End
	// has no upper bound.
	Start, End []byte
	// Prev fills each event's previous value (Event.PrevFound).
	Prev bool
	// MaxEvents and MaxBytes (keys and values of the events returned)
	// bound a page, which ends at the first revision boundary past
	// either; a single revision's events always come whole. MaxScan
	// bounds the events read, matching or not. Zero: no bound but
	// MaxScan's default, DefaultHistoryScan.
	MaxEvents, MaxBytes, MaxScan int
}

// DefaultHistoryScan is how many events a History page reads at most when
// HistoryOptions.MaxScan is zero.
const DefaultHistoryScan = 10000

// HistoryPage is a page of the history.
type HistoryPage struct {
	// Events are the events of the keys asked for, in revision order,
	// and in key order within a revision.
	Events []Event
	// Next is where the next page starts: every event asked for of a
	// revision below it is in this page or an earlier one. At the end of
	// the history, Next is Revision + 1.
	Next uint64
	// Revision is the store's revision, and Compacted its compaction
	// point, as of the read.
	Revision, Compacted uint64
}

// readHistory reads a page of the history of a store at counters ct.
func readHistory(tx txn, ct counters, opts HistoryOptions) (HistoryPage, error) {
	compacted := ct.readFrom() - 1
	from := opts.From
	if from == 0 {
		from = compacted + 1
	}
	p := HistoryPage{Revision: ct.rev, Compacted: compacted, Next: from}
	if from <= compacted {
		return p, &CompactedError{Compacted: compacted}
	}
	if from > ct.rev {
		return p, nil
	}
	maxScan := opts.MaxScan
	if maxScan <= 0 {
		maxScan = DefaultHistoryScan
	}
	var (
		cur     uint64 // the revision being read
		scanned int
		size    int
		full    bool
	)
	p.Next = ct.rev + 1
	err := tx.scan(eventPrefix, eventKey(from, nil), func(k, v []byte) error {
		rev, key, err := parseEventKey(k)
		if err != nil {
			return err
		}
		if rev != cur {
			if full || scanned >= maxScan {
				p.Next = rev
				return errStopScan
			}
			cur = rev
		}
		scanned++
		if bytes.Compare(key, opts.Start) < 0 || len(opts.End) > 0 && bytes.Compare(key, opts.End) >= 0 {
			return nil
		}
		e, prev, err := decodeEvent(rev, bytes.Clone(key), v)
		if err != nil {
			return err
		}
		if opts.Prev && prev != 0 {
			b, ok, err := tx.get(eventKey(prev, key))
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("the previous event of %q at %d, revision %d, is not held", key, rev, prev)
			}
			pe, _, err := decodeEvent(prev, e.Key, b)
			if err != nil {
				return err
			}
			if pe.Kind == EventPut {
				e.PrevFound, e.PrevValue, e.PrevRevision = true, pe.Value, prev
			}
		}
		p.Events = append(p.Events, e)
		size += len(e.Key) + len(e.Value) + len(e.PrevValue)
		full = opts.MaxEvents > 0 && len(p.Events) >= opts.MaxEvents || opts.MaxBytes > 0 && size >= opts.MaxBytes
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return HistoryPage{}, fmt.Errorf("%w: the history: %v", ErrDamaged, err)
	}
	return p, nil
}

// checkHistoryItem checks one record of the history against the counters:
// an event decodes and is not above the revision; a head is 8 bytes and
// not above the revision.
func checkHistoryItem(key, v []byte, ct counters) error {
	switch {
	case bytes.HasPrefix(key, eventPrefix):
		rev, k, err := parseEventKey(key)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrDamaged, err)
		}
		if rev > ct.rev {
			return fmt.Errorf("%w: an event at revision %d is above the revision %d", ErrDamaged, rev, ct.rev)
		}
		if _, _, err := decodeEvent(rev, k, v); err != nil {
			return fmt.Errorf("%w: %v", ErrDamaged, err)
		}
	case bytes.HasPrefix(key, headPrefix):
		if len(v) != 8 {
			return fmt.Errorf("%w: a head of the history of %d bytes", ErrDamaged, len(v))
		}
		if rev := binary.BigEndian.Uint64(v); rev > ct.rev {
			return fmt.Errorf("%w: a key's newest event at revision %d is above the revision %d", ErrDamaged, rev, ct.rev)
		}
	}
	return nil
}
