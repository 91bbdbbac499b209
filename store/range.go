// Range reads: the live keys in [Start, End), a page at a time, read within one step of any Store.

package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// check returns an error wrapping ErrInvalidRange if o names no range.
func (o RangeOptions) check() error {
	switch {
	case len(o.End) > 0 && bytes.Compare(o.Start, o.End) > 0:
		return fmt.Errorf("%w: start %q is past end %q", ErrInvalidRange, o.Start, o.End)
	case o.Limit < 0:
		return fmt.Errorf("%w: limit %d", ErrInvalidRange, o.Limit)
	case o.MaxBytes < 0:
		return fmt.Errorf("%w: max bytes %d", ErrInvalidRange, o.MaxBytes)
	}
	return nil
}

// errRangeDone ends readRange's scan once the page is full or past End.
var errRangeDone = errors.New("range read")

// readRange reads the range opts names within tx, a step of a store that
// no change interleaves with, and the revision from the same step, so
// that every key is as of it. It copies what it returns out of tx. With
// KeysOnly it decodes only each record's header, never copying its value.
// It notes the highest version of the records it reads, the deletions'
// included: with Known, a range read whole whose records are all of Known
// or earlier, and no deletion after Known collected since, is Unchanged.
// opts must have passed check.
func readRange(tx txn, opts RangeOptions) (Range, error) {
	rev, err := getUint(tx, metaRev)
	if err != nil {
		return Range{}, err
	}
	r := Range{Revision: rev}
	from := opts.Start
	if len(opts.After) > 0 && bytes.Compare(opts.After, opts.Start) >= 0 {
		from = append(append([]byte{}, opts.After...), 0)
	}
	var size int // bytes of the keys and values in r.KVs
	// The page's keys and values are copied into one buffer, which grows
	// as a slice does, and each KV slices it: a few allocations a page,
	// not two a key.
	var buf []byte
	full := false
	var newest uint64 // the highest version of a record read, live or not
	err = tx.scan(dataPrefix, prefixed(dataPrefix, from), func(dk, v []byte) error {
		key := dk[len(dataPrefix):]
		if len(opts.End) > 0 && bytes.Compare(key, opts.End) >= 0 {
			return errRangeDone
		}
		if len(v) < 9 || v[8] > 1 {
			return fmt.Errorf("corrupt record of %d bytes on %q", len(v), key)
		}
		newest = max(newest, binary.BigEndian.Uint64(v))
		if v[8] == 0 {
			return nil // a tombstone: not live
		}
		if full {
			// One live key past the page.
			r.More = true
			return errRangeDone
		}
		n := len(key)
		if !opts.KeysOnly {
			n += len(v) - 9
		}
		if opts.MaxBytes > 0 && len(r.KVs) > 0 && size+n > opts.MaxBytes {
			r.More = true
			return errRangeDone
		}
		kv := KV{Version: binary.BigEndian.Uint64(v)}
		start := len(buf)
		buf = append(buf, key...)
		kv.Key = buf[start:len(buf):len(buf)]
		if !opts.KeysOnly {
			start = len(buf)
			buf = append(buf, v[9:]...)
			kv.Value = buf[start:len(buf):len(buf)]
		}
		r.KVs = append(r.KVs, kv)
		size += n
		full = opts.Limit > 0 && len(r.KVs) == opts.Limit
		return nil
	})
	if err != nil && !errors.Is(err, errRangeDone) {
		return Range{}, err
	}
	if opts.Known > 0 && !r.More && newest <= opts.Known && opts.Known <= rev {
		// Every record of the range, a deletion's included, is of Known
		// or earlier: the range is as it was then, unless a deletion
		// after Known was collected since.
		forgotten, known, err := loadForgotten(tx, rev)
		if err != nil {
			return Range{}, err
		}
		if known && opts.Known >= forgotten {
			r.KVs, r.Unchanged = nil, true
		}
	}
	return r, nil
}
