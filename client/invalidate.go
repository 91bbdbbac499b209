package client

import (
	"time"

	"github.com/leased/leased/protocol"
)

// invalidate drops keys from the cache, and the listings of prefixes,
// before the client acknowledges, and poisons reads and Lists of them in
// flight. The notice reader calls it with the time
// the invalidation arrived.
//
// The acknowledgement goes out under c.smu, so that a read begun after the
// invalidation reaches the server after the acknowledgement: otherwise the
// acknowledgement could relinquish the lease that read is granted, and the
// read's answer would be cached without a lease behind it. Reads begun
// before are poisoned, and their record is dropped so that later reads
// start a clean one. The cost: an acknowledgement waits behind a request
// that is being written, such as a large Put held up by flow control, and
// behind the holders of c.imu. The writer waits for it meanwhile, so an
// acknowledgement held up for longer than slowAck is logged. That clock
// read, between dropping the entries and acknowledging, is where
// TestAckAfterReRead holds the notice reader through Config.Clock.
func (c *Client) invalidate(cn *conn, keys, prefixes [][]byte, arrived time.Time) error {
	c.smu.Lock()
	defer c.smu.Unlock()
	c.imu.Lock()
	for _, k := range keys {
		if f := c.fetches[string(k)]; f != nil {
			f.poisoned = true
			delete(c.fetches, string(k))
		}
		c.cache.Remove(string(k))
	}
	c.dropPrefixes(prefixes)
	c.imu.Unlock()
	c.notify(keys, prefixes)
	if h := c.cfg.OnInvalidate; h != nil {
		h(strs(keys), strs(prefixes))
	}
	if held := c.clock.Now().Sub(arrived); held > slowAck {
		c.log.Warn("acknowledgement of an invalidation held up", "keys", len(keys), "held", held)
	}
	return cn.write(&protocol.Ack{Keys: keys, Prefixes: prefixes})
}

// slowAck is how long an acknowledgement may be held up in the client
// before it is logged.
const slowAck = 100 * time.Millisecond

// strs returns bs as strings.
func strs(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}
