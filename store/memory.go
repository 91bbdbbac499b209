package store

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Memory is a Store in memory, for tests and in-process tools: the same
// commands with the same outcomes as Badger, one atomic step per Apply, and
// nothing that survives the process. It never fails by itself; wrap it to
// inject faults. The zero value is not usable: call NewMemory.
type Memory struct {
	mu     sync.RWMutex // guards data, ct, failed, closed
	data   map[string][]byte
	ct     counters
	failed bool
	closed bool
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{data: make(map[string][]byte)} }

// Apply applies cmds in one atomic step. See Store.
func (m *Memory) Apply(cmds []Command) ([]Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return nil, ErrClosed
	case m.failed:
		return nil, ErrFailed
	}
	tx := memTxn{m: m, staged: make(map[string][]byte)}
	ct := m.ct
	rs := make([]Result, 0, len(cmds))
	for _, c := range cmds {
		r, err := exec(tx, &ct, c)
		if err != nil {
			m.failed = true
			return nil, err
		}
		rs = append(rs, r)
	}
	if err := saveCounters(tx, m.ct, ct); err != nil {
		m.failed = true
		return nil, err
	}
	for k, v := range tx.staged {
		if v == nil {
			delete(m.data, k)
		} else {
			m.data[k] = v
		}
	}
	m.ct = ct
	return rs, nil
}

// Get returns the committed record of key.
func (m *Memory) Get(key []byte) (Record, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return Record{}, ErrClosed
	}
	return getRecord(memTxn{m: m}, prefixed(dataPrefix, key))
}

// WriteLease returns the write lease recorded on key. See Store.
func (m *Memory) WriteLease(key []byte) (WriteLease, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return WriteLease{}, false, ErrClosed
	}
	return getWriteLease(memTxn{m: m}, key)
}

// Range returns the live keys opts names, in key order, and the revision
// they were read at. It sorts the keys under its lock: fine for tests.
// See Store.
func (m *Memory) Range(opts RangeOptions) (Range, error) {
	if err := opts.check(); err != nil {
		return Range{}, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return Range{}, ErrClosed
	}
	return readRange(memTxn{m: m}, opts)
}

// History reads a page of the event history. See Store.
func (m *Memory) History(opts HistoryOptions) (HistoryPage, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return HistoryPage{}, ErrClosed
	}
	return readHistory(memTxn{m: m}, m.ct, opts)
}

// State returns the counters, horizon and write leases.
func (m *Memory) State() (State, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return State{}, ErrClosed
	}
	st := State{Revision: m.ct.rev, Fence: m.ct.fence, TTLLeaseID: m.ct.ttl, History: m.ct.historyState()}
	if err := loadMeta(memTxn{m: m}, &st); err != nil {
		return st, err
	}
	for k, v := range m.data {
		if key, ok := strings.CutPrefix(k, string(wleasPrefix)); ok {
			wl, err := decodeWriteLease([]byte(key), v)
			if err != nil {
				return st, err
			}
			st.WriteLeases = append(st.WriteLeases, wl)
		}
	}
	sort.Slice(st.WriteLeases, func(i, j int) bool { return st.WriteLeases[i].Key < st.WriteLeases[j].Key })
	return st, nil
}

// Reopen clears a failure. Memory has nothing durable to reload: an Apply
// that failed changed nothing.
func (m *Memory) Reopen() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.failed = false
	return nil
}

// Kept returns the kept outcome of the write or grant c. See Store.
func (m *Memory) Kept(c Command) (Result, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return Result{}, false, ErrClosed
	}
	r, ok, _, err := kept(memTxn{m: m}, c)
	return r, ok, err
}

// IdleClients returns up to limit clients whose last write was before
// cutoff. See Store.
func (m *Memory) IdleClients(cutoff time.Time, limit int) ([]uint64, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, ErrClosed
	}
	var ids []uint64
	for k, v := range m.data {
		if !strings.HasPrefix(k, string(clientPrefix)) {
			continue
		}
		if id, ok := idleClient([]byte(k), v, cutoff); ok && len(ids) < limit {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// TTLLease returns TTL lease id and its keys. See Store.
func (m *Memory) TTLLease(id uint64) (TTLLease, []string, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return TTLLease{}, nil, false, ErrClosed
	}
	tx := memTxn{m: m}
	l, ok, err := getTTLLease(tx, id)
	if err != nil || !ok {
		return l, nil, ok, err
	}
	keys, err := ttlKeys(tx, id)
	if err != nil {
		return l, nil, true, err
	}
	l.Locks, err = boundLocks(tx, id)
	return l, keys, true, err
}

// TTLLeases calls fn with every TTL lease, in id order. See Store.
func (m *Memory) TTLLeases(fn func(TTLLease) error) error {
	return eachTTLLease(func(from uint64) ([]TTLLease, error) {
		m.mu.RLock()
		defer m.mu.RUnlock()
		if m.closed {
			return nil, ErrClosed
		}
		return ttlPage(memTxn{m: m}, from)
	}, fn)
}

// Close makes every later call fail with ErrClosed.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// memTxn is a step of a Memory: writes are staged (nil: deleted) and
// reads see them first. The caller holds m.mu.
type memTxn struct {
	m      *Memory
	staged map[string][]byte
}

func (x memTxn) get(key []byte) ([]byte, bool, error) {
	if v, ok := x.staged[string(key)]; ok {
		return v, v != nil, nil
	}
	v, ok := x.m.data[string(key)]
	return v, ok, nil
}

func (x memTxn) has(key []byte) (bool, error) {
	_, ok, err := x.get(key)
	return ok, err
}

// scan sorts the keys under prefix first: a Memory keeps them in a map.
func (x memTxn) scan(prefix, from []byte, fn func(key, value []byte) error) error {
	var keys []string
	for k := range x.m.data {
		if _, ok := x.staged[k]; !ok && strings.HasPrefix(k, string(prefix)) && k >= string(from) {
			keys = append(keys, k)
		}
	}
	for k, v := range x.staged {
		if v != nil && strings.HasPrefix(k, string(prefix)) && k >= string(from) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, _, _ := x.get([]byte(k))
		if err := fn([]byte(k), v); err != nil {
			return err
		}
	}
	return nil
}

func (x memTxn) set(key, value []byte) error {
	x.staged[string(key)] = append([]byte{}, value...)
	return nil
}

func (x memTxn) del(key []byte) error {
	x.staged[string(key)] = nil
	return nil
}
