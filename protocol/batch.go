package protocol

// SplitKeys cuts a batch of keys (for Renew, Release, Ack or Invalidate)
// into batches of at most limit key bytes, counting a few bytes of framing
// per key, so that each message stays well under a frame limit of twice
// limit. Every batch has at least one key; the batches share keys' backing
// array.
func SplitKeys(keys [][]byte, limit int) [][][]byte {
	var out [][][]byte
	start, size := 0, 0
	for i, k := range keys {
		n := len(k) + 8 // msgpack bin header, with room to spare
		if i > start && size+n > limit {
			out = append(out, keys[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(keys) {
		out = append(out, keys[start:])
	}
	return out
}
