// Package cache is the bounded local store of the leased client library.
//
// Each cached value is covered by a time-bound read lease: while the lease
// lasts the client serves reads from memory. The cache knows nothing of the
// network or the wire; it only holds entries, their lease deadlines and the
// bookkeeping the client needs to renew leases (TakeRenewals), to notice
// expiry (Expired) and to release the leases of evicted entries (the evicted
// keys returned by Put).
//
// The cache never reads the clock itself: every method that needs the time
// takes it as an argument, so callers decide which clock is authoritative
// (see package internal/clock). Put has no time argument; when it must
// evict, it treats as expired the entries whose deadline is at or before the
// latest now passed to TakeRenewals or Expired.
//
// Eviction is CLOCK (second chance): Get takes no lock (the key's entry
// comes from a concurrent map, its deadline from an atomic) and only sets
// an atomic referenced bit, so cached reads run in parallel and do not
// allocate;
// Put, under the write lock, sweeps a hand over a ring of entries, evicting
// expired entries at once and unreferenced entries otherwise, and clearing
// the bit of referenced entries it passes.
package cache
