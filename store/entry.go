// Applying one log entry of a replicated log (package replica): ApplyEntry, in one transaction that
// also records the entry's index (AppliedIndex), Sync, and the locks that each use of a Badger takes.

package store

import "fmt"

// metaApplied is the index of the last log entry applied (ApplyEntry).
var metaApplied = []byte("m/applied")

// AppliedIndex returns the index of the last log entry applied with
// ApplyEntry or restored with Restore; 0 if none.
func (b *Badger) AppliedIndex() (uint64, error) {
	b.amu.Lock()
	defer b.amu.Unlock()
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.usable(); err != nil {
		return 0, err
	}
	return b.applied, nil
}

// ApplyEntry applies cmds, the commands of log entry index, in one
// transaction that also records index as the applied index, so that a
// restart knows exactly which entries its state holds. index must be above
// the applied index. An entry too large for one transaction is refused with
// an error, and nothing of it is applied; the leader keeps entries well
// below badger's limit. Like Apply, a failure makes the store refuse
// further entries until Reopen.
func (b *Badger) ApplyEntry(index uint64, cmds []Command) ([]Result, error) {
	unlock, err := b.lockChange()
	defer unlock()
	if err != nil {
		return nil, err
	}
	t := b.db.NewTransaction(true)
	defer t.Discard()
	tx := newCachingTxn(badgerTxn{t}, &b.clients)
	if index <= b.applied {
		return nil, fmt.Errorf("log entry %d is at or below the applied index %d", index, b.applied)
	}
	ct := b.ct
	rs := make([]Result, 0, len(cmds))
	for _, c := range cmds {
		r, err := exec(tx, &ct, c)
		if err != nil {
			b.fail()
			return nil, fmt.Errorf("log entry %d: %w", index, err)
		}
		rs = append(rs, r)
	}
	if err := saveCounters(tx, b.ct, ct); err != nil {
		b.fail()
		return nil, err
	}
	if err := setUint(tx, metaApplied, index); err != nil {
		b.fail()
		return nil, err
	}
	if err := t.Commit(); err != nil {
		b.fail()
		return nil, fmt.Errorf("log entry %d: %w", index, err)
	}
	tx.committed()
	b.ct, b.applied = ct, index
	return rs, nil
}

// Sync makes every change applied so far durable. A store opened without
// synchronous writes (see NoSync) calls for it before a snapshot lets the
// log drop the entries the snapshot covers.
func (b *Badger) Sync() error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.usable(); err != nil {
		return err
	}
	return b.db.Sync()
}

// usable reports why the database cannot be read, if it cannot. b.mu
// must be held.
func (b *Badger) usable() error {
	switch {
	case b.closed:
		return ErrClosed
	case b.db == nil:
		return ErrFailed
	}
	return nil
}

// lockChange takes the locks of a change to the database (amu, and mu
// shared) and returns unlock, which the caller defers whatever the error,
// and why the database takes no change, if it does not (writable).
func (b *Badger) lockChange() (unlock func(), err error) {
	b.amu.Lock()
	b.mu.RLock()
	return func() {
		b.mu.RUnlock()
		b.amu.Unlock()
	}, b.writable()
}

// writable reports why the database takes no change, if it does not:
// it is closed, a change failed and Reopen has not settled it, or its
// folder cannot be written (ErrNotWritable, folder.go). b.amu and b.mu
// must be held.
func (b *Badger) writable() error {
	switch {
	case b.closed:
		return ErrClosed
	case b.failed:
		return ErrFailed
	}
	return folderWritable(b.dir)
}
