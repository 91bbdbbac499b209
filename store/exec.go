// What a command does: exec applies one Command within one step of any Store, to the keys laid out
// here. The TTL lease commands are in ttl.go; a client's writes applied once only, in clients.go.

package store

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Keys of the stored state, in badger and in memory alike. Each kind has a
// prefix of its own, so that metadata can never collide with a user key.
var (
	dataPrefix  = []byte("d/")
	wleasPrefix = []byte("w/")
	metaRev     = []byte("m/rev")
	metaFence   = []byte("m/fence")
	// The number of keys that hold a record, a value or a deletion: a
	// start compares it with the keys it finds (Badger.Check), so that
	// tables lost from under a database whose newest changes survived
	// (as its MANIFEST cut short after a crash) cannot go unnoticed.
	metaRecords = []byte("m/records")
	// The lease horizon (DESIGN §7): a wall-clock time (Unix ns) after
	// which no lease granted by an earlier run can still be live, and how
	// far past the moment it was written it reached (ns), which bounds the
	// wait when the wall clock has stepped back since.
	metaHorizon     = []byte("m/horizon")
	metaHorizonSpan = []byte("m/horizonspan")
	// The clock the horizon was read on (State.HorizonBy), if given.
	metaHorizonBy = []byte("m/horizonby")
	// The leader's name and client address, a zero byte between them.
	metaLeader = []byte("m/leader")
	// The leases of the last handoff, if no horizon was set since.
	metaHandoff = []byte("m/handoff")
	// The keys whose reads the leader holds, recorded with the horizon
	// (State.Holds); absent when it holds none.
	metaHolds = []byte("m/holds")
	// The members' NOSPACE alarms (OpSetAlarm, State.Alarms); absent
	// when none is raised.
	metaAlarms = []byte("m/alarms")
)

// txn is what exec needs of one atomic step of a store: reads that see the
// step's own writes, and writes. get reports a missing key as nil, false.
type txn interface {
	get(key []byte) ([]byte, bool, error)
	// has reports whether key is stored, without reading its value.
	has(key []byte) (bool, error)
	set(key, value []byte) error
	del(key []byte) error
	// scan calls fn with every stored key under prefix, from the key from
	// on (nil: the first), and its value, in key order, until fn returns an
	// error, which it returns. fn must not change the step.
	scan(prefix, from []byte, fn func(key, value []byte) error) error
}

// counters are the revision, the fencing-token counter, the number of
// records (metaRecords), the TTL lease counter (metaTTL) and the
// history's counters (history.go) as a step moves them.
type counters struct {
	rev, fence, records, ttl uint64
	history                  history
}

// exec applies c within tx, moving ct, and returns its result. This one
// function defines what every command does, for every Store. An error is a
// failure of the step (tx must then be discarded), never the command's
// outcome.
func exec(tx txn, ct *counters, c Command) (Result, error) {
	first := ct.rev == 0
	r, err := execCommand(tx, ct, c)
	if err == nil && first && ct.rev > 0 {
		err = startHistory(tx)
	}
	return r, err
}

// execCommand is exec, but for the record of the first revision.
func execCommand(tx txn, ct *counters, c Command) (Result, error) {
	switch c.Op {
	case OpPut, OpDelete, OpCAS:
		if c.Client != 0 {
			return execOnce(tx, ct, c)
		}
		return execWrite(tx, ct, c)
	case OpGrantWriteLease:
		return grantWriteLease(tx, ct, c)
	case OpEndWriteLease:
		return endWriteLease(tx, c)
	case OpSetHorizon:
		if err := tx.del(metaHandoff); err != nil {
			return Result{}, err
		}
		if err := setHolds(tx, c.Holds); err != nil {
			return Result{}, err
		}
		return Result{}, setHorizon(tx, c.Horizon, c.Span, c.Key)
	case OpHandoff:
		longest := Longest(c.Handoff)
		if err := tx.set(metaHandoff, encodeHandoff(c.Handoff)); err != nil {
			return Result{}, err
		}
		if err := setHolds(tx, nil); err != nil {
			return Result{}, err
		}
		return Result{}, setHorizon(tx, c.At.Add(longest), longest, c.Key)
	case OpSetLeader:
		v := append(append(append([]byte{}, c.Key...), 0), c.Value...)
		return Result{}, tx.set(metaLeader, v)
	case OpForgetClients:
		return Result{}, forgetClients(tx, c)
	case OpGrantTTL:
		if c.Client != 0 {
			return execOnce(tx, ct, c)
		}
		return execTTL(tx, ct, c)
	case OpRevokeTTL, OpCheckpointTTL, OpKeptAliveTTL:
		return execTTL(tx, ct, c)
	case OpCollectTombstones:
		return collectTombstones(tx, ct, c.Through)
	case OpCompact:
		return compactHistory(tx, ct, c.Through, c.KeepBytes)
	case OpSetAlarm:
		return setAlarm(tx, c)
	case OpTxn:
		if c.Client != 0 {
			return execOnce(tx, ct, c)
		}
		return execTxn(tx, ct, c)
	}
	return Result{}, fmt.Errorf("unknown command %v", c.Op)
}

// execWrite applies the write c (OpPut, OpDelete or OpCAS), and attaches
// its key to c.Lease, or detaches it.
func execWrite(tx txn, ct *counters, c Command) (Result, error) {
	if r, err := checkGuard(tx, c.Guard); err != nil || r.Err != nil {
		return r, err
	}
	lease := c.Lease
	if c.Op == OpDelete {
		lease = 0
	} else if r, err := checkAttach(tx, c); err != nil || r.Err != nil {
		return r, err
	}
	dk := prefixed(dataPrefix, c.Key)
	var stored bool
	switch c.Op {
	case OpCAS:
		// Only a compare-and-swap and a delete read the key's record: a
		// put does not depend on what it replaces.
		cur, err := getRecord(tx, dk)
		if err != nil {
			return Result{}, err
		}
		// Version 0 means "absent": a deleted key matches it too.
		if cur.Version != c.Expect && (c.Expect != 0 || cur.Found) {
			return Result{Version: cur.Version, Err: mismatch(cur.Version, c.Expect)}, nil
		}
		stored = cur.Version > 0
	case OpDelete:
		// A delete of a key that does not exist removes nothing, and
		// spends no revision.
		cur, err := getRecord(tx, dk)
		if err != nil {
			return Result{}, err
		}
		if !cur.Found {
			return Result{Version: cur.Version, Unchanged: true}, nil
		}
		stored = true
	default:
		var err error
		if stored, err = tx.has(dk); err != nil {
			return Result{}, err
		}
	}
	if !stored {
		ct.records++
	}
	r := Record{Version: ct.rev + 1, Found: c.Op != OpDelete, Value: c.Value}
	kind := EventPut
	if c.Op == OpDelete {
		kind = EventDelete
	}
	if err := recordEvent(tx, ct, r.Version, kind, c.Key, r.Value, lease); err != nil {
		return Result{}, err
	}
	if err := tx.set(dk, encodeRecord(r)); err != nil {
		return Result{}, err
	}
	if err := attach(tx, c.Key, lease); err != nil {
		return Result{}, err
	}
	if c.Op == OpDelete {
		if err := noteDeletion(tx, r.Version, c.Key); err != nil {
			return Result{}, err
		}
	}
	ct.rev++
	return Result{Version: ct.rev}, nil
}

// mismatch is the outcome of a compare-and-swap that expected version
// expect of a key at version cur.
func mismatch(cur, expect uint64) error {
	return fmt.Errorf("%w: key is at version %d, not %d", ErrVersionMismatch, cur, expect)
}

// saveCounters writes the counters of a step that moved them from was.
func saveCounters(tx txn, was, ct counters) error {
	if ct.rev != was.rev || ct.records != was.records {
		// The count goes with the revision, even unchanged, so that a
		// database that kept one kept the other (countRecords). A
		// collection of tombstones changes the count alone.
		if err := setUint(tx, metaRev, ct.rev); err != nil {
			return err
		}
		if err := setUint(tx, metaRecords, ct.records); err != nil {
			return err
		}
	}
	if ct.ttl != was.ttl {
		if err := setUint(tx, metaTTL, ct.ttl); err != nil {
			return err
		}
	}
	if err := saveHistory(tx, was.history, ct.history); err != nil {
		return err
	}
	if ct.fence != was.fence {
		return setUint(tx, metaFence, ct.fence)
	}
	return nil
}

// loadCounters reads the counters.
func loadCounters(tx txn) (counters, error) {
	var ct counters
	var err error
	if ct.rev, err = getUint(tx, metaRev); err != nil {
		return ct, err
	}
	if ct.records, err = getUint(tx, metaRecords); err != nil {
		return ct, err
	}
	if ct.ttl, err = getUint(tx, metaTTL); err != nil {
		return ct, err
	}
	if ct.history, err = loadHistory(tx, ct.rev); err != nil {
		return ct, err
	}
	ct.fence, err = getUint(tx, metaFence)
	return ct, err
}

// loadMeta reads the lease horizon, the holds recorded with it, the last
// handoff and the leader into st.
func loadMeta(tx txn, st *State) error {
	if err := loadHorizon(tx, st); err != nil {
		return err
	}
	if err := loadLockDelays(tx, st); err != nil {
		return err
	}
	if b, ok, err := tx.get(metaHolds); err != nil {
		return err
	} else if ok {
		if st.Holds, err = decodeHolds(b); err != nil {
			return err
		}
	}
	if b, ok, err := tx.get(metaHandoff); err != nil {
		return err
	} else if ok {
		if st.Handoff, err = decodeHandoff(b); err != nil {
			return err
		}
		st.HandedOff = true
	}
	if b, ok, err := tx.get(metaAlarms); err != nil {
		return err
	} else if ok {
		if st.Alarms, err = decodeAlarms(b); err != nil {
			return err
		}
	}
	v, ok, err := tx.get(metaLeader)
	if err != nil || !ok {
		return err
	}
	name, addr, found := strings.Cut(string(v), "\x00")
	if !found {
		return fmt.Errorf("corrupt leader record of %d bytes", len(v))
	}
	st.Leader, st.LeaderAddr = name, addr
	return nil
}

// setHorizon records the lease horizon h, span after it was written on
// the clock that by names.
func setHorizon(tx txn, h time.Time, span time.Duration, by []byte) error {
	if err := setUint(tx, metaHorizon, uint64(h.UnixNano())); err != nil {
		return err
	}
	if err := setUint(tx, metaHorizonSpan, uint64(max(span, 0))); err != nil {
		return err
	}
	if len(by) == 0 {
		return tx.del(metaHorizonBy)
	}
	return tx.set(metaHorizonBy, by)
}

// encodeHandoff lays handed-over leases out as, for each, its client,
// token and time left (8 bytes each; the top bit of the time left marks a
// prefix lease, handedPrefix), then its key's length (uvarint) and key.
func encodeHandoff(ls []HandedLease) []byte {
	var b []byte
	for _, l := range ls {
		b = binary.BigEndian.AppendUint64(b, l.Client)
		b = binary.BigEndian.AppendUint64(b, l.Token)
		left := uint64(max(l.Left, 0))
		if l.Prefix {
			left |= handedPrefix
		}
		b = binary.BigEndian.AppendUint64(b, left)
		b = binary.AppendUvarint(b, uint64(len(l.Key)))
		b = append(b, l.Key...)
	}
	return b
}

// handedPrefix marks a prefix lease in an encoded handoff: the top bit of
// its time left, which a duration that is not negative never sets.
const handedPrefix = 1 << 63

func decodeHandoff(b []byte) ([]HandedLease, error) {
	ls := []HandedLease{}
	for len(b) > 0 {
		if len(b) < 25 {
			return nil, fmt.Errorf("corrupt handoff record: %d bytes left", len(b))
		}
		left := binary.BigEndian.Uint64(b[16:])
		l := HandedLease{Client: binary.BigEndian.Uint64(b), Token: binary.BigEndian.Uint64(b[8:]), Left: time.Duration(left &^ handedPrefix), Prefix: left&handedPrefix != 0}
		if l.Left < 0 || l.Prefix && l.Token != 0 {
			return nil, fmt.Errorf("corrupt handoff record: %v left", l.Left)
		}
		n, w := binary.Uvarint(b[24:])
		if w <= 0 || w != len(binary.AppendUvarint(nil, n)) || uint64(len(b)-24-w) < n {
			return nil, fmt.Errorf("corrupt handoff record: key of %d bytes", n)
		}
		b = b[24+w:]
		l.Key, b = string(b[:n]), b[n:]
		ls = append(ls, l)
	}
	return ls, nil
}

// setHolds records the keys whose reads the leader holds (OpSetHorizon),
// in place of those recorded before; none deletes the record.
func setHolds(tx txn, hs []HeldKey) error {
	if len(hs) == 0 {
		return tx.del(metaHolds)
	}
	return tx.set(metaHolds, encodeHolds(hs))
}

// encodeHolds lays held keys out as, for each, its time left (8 bytes),
// then its key's length (uvarint) and key. A negative time left is
// recorded as 0.
func encodeHolds(hs []HeldKey) []byte {
	var b []byte
	for _, h := range hs {
		b = binary.BigEndian.AppendUint64(b, uint64(max(h.Left, 0)))
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
	}
	return b
}

func decodeHolds(b []byte) ([]HeldKey, error) {
	var hs []HeldKey
	for len(b) > 0 {
		if len(b) < 9 {
			return nil, fmt.Errorf("corrupt record of held keys: %d bytes left", len(b))
		}
		h := HeldKey{Left: time.Duration(binary.BigEndian.Uint64(b))}
		if h.Left < 0 {
			return nil, fmt.Errorf("corrupt record of held keys: %v left", h.Left)
		}
		n, w := binary.Uvarint(b[8:])
		if w <= 0 || w != len(binary.AppendUvarint(nil, n)) || uint64(len(b)-8-w) < n {
			return nil, fmt.Errorf("corrupt record of held keys: key of %d bytes", n)
		}
		b = b[8+w:]
		h.Key, b = string(b[:n]), b[n:]
		hs = append(hs, h)
	}
	return hs, nil
}

// setAlarm applies OpSetAlarm: it raises, updates or clears the alarm of
// member c.Key in the record of alarms, kept sorted by member.
func setAlarm(tx txn, c Command) (Result, error) {
	if len(c.Key) == 0 || len(c.Key) > MaxAlarmMemberBytes || len(c.Value) > MaxAlarmBytes {
		return Result{Err: fmt.Errorf("%w: an alarm needs a member of 1 to %d bytes and at most %d bytes of alarm, not %d and %d",
			ErrInvalidCommand, MaxAlarmMemberBytes, MaxAlarmBytes, len(c.Key), len(c.Value))}, nil
	}
	var as []MemberAlarm
	if b, ok, err := tx.get(metaAlarms); err != nil {
		return Result{}, err
	} else if ok {
		if as, err = decodeAlarms(b); err != nil {
			return Result{}, err
		}
	}
	member := string(c.Key)
	i, found := slices.BinarySearchFunc(as, member, func(a MemberAlarm, m string) int { return strings.Compare(a.Member, m) })
	switch {
	case len(c.Value) == 0 && !found:
		return Result{}, nil
	case len(c.Value) == 0:
		as = slices.Delete(as, i, i+1)
	case found:
		as[i].Alarm = string(c.Value)
	case len(as) >= MaxAlarms:
		return Result{Err: fmt.Errorf("%w: %d alarms are raised already, the most recorded", ErrInvalidCommand, len(as))}, nil
	default:
		as = slices.Insert(as, i, MemberAlarm{Member: member, Alarm: string(c.Value)})
	}
	if len(as) == 0 {
		return Result{}, tx.del(metaAlarms)
	}
	return Result{}, tx.set(metaAlarms, encodeAlarms(as))
}

// encodeAlarms lays alarms out as, for each, its member's length
// (uvarint) and member, then its alarm's length (uvarint) and alarm.
func encodeAlarms(as []MemberAlarm) []byte {
	var b []byte
	for _, a := range as {
		b = binary.AppendUvarint(b, uint64(len(a.Member)))
		b = append(b, a.Member...)
		b = binary.AppendUvarint(b, uint64(len(a.Alarm)))
		b = append(b, a.Alarm...)
	}
	return b
}

func decodeAlarms(b []byte) ([]MemberAlarm, error) {
	var as []MemberAlarm
	next := func() (string, bool) {
		n, w := binary.Uvarint(b)
		if w <= 0 || w != len(binary.AppendUvarint(nil, n)) || uint64(len(b)-w) < n {
			return "", false
		}
		s := string(b[w : w+int(n)])
		b = b[w+int(n):]
		return s, true
	}
	for len(b) > 0 {
		member, ok := next()
		if !ok || member == "" {
			return nil, fmt.Errorf("corrupt record of alarms: bad member after %d alarms", len(as))
		}
		alarm, ok := next()
		if !ok || alarm == "" {
			return nil, fmt.Errorf("corrupt record of alarms: bad alarm of member %q", member)
		}
		as = append(as, MemberAlarm{Member: member, Alarm: alarm})
	}
	return as, nil
}

// loadHorizon reads the lease horizon into st.
func loadHorizon(tx txn, st *State) error {
	h, err := getUint(tx, metaHorizon)
	if err != nil || h == 0 {
		return err
	}
	span, err := getUint(tx, metaHorizonSpan)
	if err != nil {
		return err
	}
	st.Horizon, st.Span = time.Unix(0, int64(h)), time.Duration(span)
	by, _, err := tx.get(metaHorizonBy)
	st.HorizonBy = string(by)
	return err
}

func prefixed(prefix, key []byte) []byte {
	k := make([]byte, 0, len(prefix)+len(key))
	return append(append(k, prefix...), key...)
}

func getUint(tx txn, key []byte) (uint64, error) {
	b, ok, err := tx.get(key)
	if err != nil || !ok {
		return 0, err
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("metadata %s: %d bytes, want 8", key, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

func setUint(tx txn, key []byte, v uint64) error {
	return tx.set(key, binary.BigEndian.AppendUint64(nil, v))
}

func getRecord(tx txn, dk []byte) (Record, error) {
	b, ok, err := tx.get(dk)
	if err != nil || !ok {
		return Record{}, err
	}
	return decodeRecord(b)
}

// encodeRecord lays a record out as an 8-byte version, a flag byte (1:
// found) and the value.
func encodeRecord(r Record) []byte {
	b := make([]byte, 9+len(r.Value))
	binary.BigEndian.PutUint64(b, r.Version)
	if r.Found {
		b[8] = 1
	}
	copy(b[9:], r.Value)
	return b
}

func decodeRecord(b []byte) (Record, error) {
	if len(b) < 9 || b[8] > 1 {
		return Record{}, fmt.Errorf("corrupt record of %d bytes", len(b))
	}
	r := Record{Version: binary.BigEndian.Uint64(b), Found: b[8] == 1}
	if r.Found {
		r.Value = append([]byte{}, b[9:]...)
	}
	return r, nil
}

// encodeWriteLease lays a write lease out as its token, session and term,
// 8 bytes each, then its client, 8 bytes, if it has one or is bound to a
// TTL lease, and then that lease's id, 8 bytes, if it is bound. A lease
// without a client nor a TTL lease has the layout of the records written
// before leases had one.
func encodeWriteLease(wl WriteLease) []byte {
	b := make([]byte, 0, 40)
	b = binary.BigEndian.AppendUint64(b, wl.Token)
	b = binary.BigEndian.AppendUint64(b, wl.Session)
	b = binary.BigEndian.AppendUint64(b, uint64(wl.Term))
	if wl.Client != 0 || wl.Lease != 0 {
		b = binary.BigEndian.AppendUint64(b, wl.Client)
	}
	if wl.Lease != 0 {
		b = binary.BigEndian.AppendUint64(b, wl.Lease)
		if wl.LockDelay > 0 {
			b = binary.BigEndian.AppendUint64(b, uint64(wl.LockDelay))
		}
	}
	return b
}

func decodeWriteLease(key, b []byte) (WriteLease, error) {
	if len(b) != 24 && len(b) != 32 && len(b) != 40 && len(b) != 48 {
		return WriteLease{}, fmt.Errorf("corrupt write lease of %d bytes on %q", len(b), key)
	}
	if len(b) == 48 {
		wl, err := decodeWriteLease(key, b[:40])
		wl.LockDelay = time.Duration(binary.BigEndian.Uint64(b[40:]))
		if err == nil && wl.LockDelay <= 0 {
			err = fmt.Errorf("corrupt write lease on %q: lock delay %v written out", key, wl.LockDelay)
		}
		return wl, err
	}
	if len(b) == 40 {
		wl, err := decodeWriteLease(key, b[:24])
		wl.Client, wl.Lease = binary.BigEndian.Uint64(b[24:]), binary.BigEndian.Uint64(b[32:])
		if err == nil && wl.Lease == 0 {
			err = fmt.Errorf("corrupt write lease on %q: TTL lease 0 written out", key)
		}
		return wl, err
	}
	wl := WriteLease{
		Key:     string(key),
		Token:   binary.BigEndian.Uint64(b),
		Session: binary.BigEndian.Uint64(b[8:]),
		Term:    time.Duration(binary.BigEndian.Uint64(b[16:])),
	}
	if len(b) == 32 {
		if wl.Client = binary.BigEndian.Uint64(b[24:]); wl.Client == 0 {
			return WriteLease{}, fmt.Errorf("corrupt write lease on %q: client 0 written out", key)
		}
	}
	return wl, nil
}
