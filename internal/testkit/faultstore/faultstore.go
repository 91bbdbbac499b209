// Package faultstore wraps a store.Store so that tests can make its
// storage fail on demand, as a full or broken disk would. Only tests use
// it.
package faultstore

import (
	"fmt"
	"sync"
	"time"

	"github.com/leased/leased/store"
)

// Store is a store.Store whose Apply and Reopen fail while a fault is set,
// before the inner store sees them. Like a real store, it refuses every
// Apply with store.ErrFailed after a failed Apply, until a Reopen
// succeeds. Get and State always pass through to the inner store, which a
// fault never reached and so holds exactly what was applied before it.
//
// Store follows the store.Store contract for its own methods: Apply calls
// may overlap, and it serializes them, holding its lock through each call
// to the inner store. Fail, Heal and Faults
// may be called from any goroutine at any time, concurrently with every
// other method. The zero value is not usable: call New.
type Store struct {
	inner store.Store

	mu     sync.Mutex // guards fault, failed, closed, faults; held through inner.Apply and inner.Reopen
	fault  error      // set by Fail, cleared by Heal
	failed bool       // an Apply or a Reopen failed; a successful Reopen clears it
	closed bool
	faults int64 // Apply calls refused because of fault
}

var _ store.Store = (*Store)(nil)

// New returns a Store that wraps inner, with no fault set. The Store owns
// inner from then on: callers may still Get and State from inner, but
// Apply, Reopen and Close only through the Store.
func New(inner store.Store) *Store { return &Store{inner: inner} }

// Fail makes every later Apply and Reopen fail, with an error that wraps
// err, until Heal. A Reopen fails too because a disk that cannot persist
// a change cannot persist the marker a Reopen writes either. An Apply
// or a Reopen already running is not affected: Fail waits for it to
// return. err must not be nil.
func (s *Store) Fail(err error) {
	if err == nil {
		panic("faultstore: Fail(nil)")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = err
}

// Heal clears the fault set by Fail. A Store whose Apply failed still
// refuses Apply with store.ErrFailed until a Reopen succeeds.
func (s *Store) Heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = nil
}

// Faults returns how many Apply calls have failed because a fault was set:
// those that found the store healthy and those refused afterwards while
// the fault lasted.
func (s *Store) Faults() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// Apply applies cmds to the inner store, unless a fault is set or an
// earlier Apply failed. While a fault is set it returns no results and an
// error wrapping the fault, and also store.ErrFailed once the store has
// failed. See store.Store.
func (s *Store) Apply(cmds []store.Command) ([]store.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, store.ErrClosed
	case s.fault != nil && s.failed:
		s.faults++
		return nil, fmt.Errorf("faultstore: %w: %w", store.ErrFailed, s.fault)
	case s.fault != nil:
		s.faults++
		s.failed = true
		return nil, fmt.Errorf("faultstore: injected fault: %w", s.fault)
	case s.failed:
		return nil, store.ErrFailed
	}
	rs, err := s.inner.Apply(cmds)
	if err != nil {
		s.failed = true
	}
	return rs, err
}

// Get passes through to the inner store.
func (s *Store) Get(key []byte) (store.Record, error) { return s.inner.Get(key) }

// Range passes through to the inner store.
func (s *Store) Range(opts store.RangeOptions) (store.Range, error) { return s.inner.Range(opts) }

// History passes through to the inner store.
func (s *Store) History(opts store.HistoryOptions) (store.HistoryPage, error) {
	return s.inner.History(opts)
}

// State passes through to the inner store.
func (s *Store) State() (store.State, error) { return s.inner.State() }

// Kept passes through to the inner store.
func (s *Store) Kept(c store.Command) (store.Result, bool, error) { return s.inner.Kept(c) }

// TTLLease passes through to the inner store.
func (s *Store) WriteLease(key []byte) (store.WriteLease, bool, error) {
	return s.inner.WriteLease(key)
}

// TTLLease passes through to the inner store.
func (s *Store) TTLLease(id uint64) (store.TTLLease, []string, bool, error) {
	return s.inner.TTLLease(id)
}

// TTLLeases passes through to the inner store.
func (s *Store) TTLLeases(fn func(store.TTLLease) error) error { return s.inner.TTLLeases(fn) }

// IdleClients passes through to the inner store.
func (s *Store) IdleClients(cutoff time.Time, limit int) ([]uint64, error) {
	return s.inner.IdleClients(cutoff, limit)
}

// Reopen reopens the inner store, unless a fault is set: then it fails
// with an error wrapping the fault and the store stays failed. See
// store.Store.
func (s *Store) Reopen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return store.ErrClosed
	case s.fault != nil:
		s.failed = true
		return fmt.Errorf("faultstore: reopen: injected fault: %w", s.fault)
	}
	if err := s.inner.Reopen(); err != nil {
		s.failed = true
		return err
	}
	s.failed = false
	return nil
}

// Close closes the inner store. Every later call returns store.ErrClosed,
// but Close, which returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.inner.Close()
}
