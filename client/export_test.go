package client

import "time"

// LockFills takes the lock that fills, invalidations and new requests
// take, as a long queue of them would hold it. It returns the unlock.
func LockFills(c *Client) (unlock func()) {
	c.imu.Lock()
	return c.imu.Unlock
}

// CachedEntry returns the entry cached for key and its deadline.
func CachedEntry(c *Client, key string) (e *Entry, deadline time.Time, ok bool) {
	return c.cache.Peek(key)
}

// FetchInFlight reports whether a read or write of key is in flight.
func FetchInFlight(c *Client, key string) bool {
	c.imu.Lock()
	defer c.imu.Unlock()
	return c.fetches[key] != nil
}

// Pause stops c as a stopped process would be: its callers, its notice and
// reply readers and its renewals wait at their next step until resume is
// called. Packets are not held: pair it with a paused packet conn.
func Pause(c *Client) (resume func()) {
	ch := make(chan struct{})
	c.testPause.Store(&ch)
	return func() {
		c.testPause.Store(nil)
		close(ch)
	}
}

// IgnoreInvalidations makes c a broken client for negative controls: it
// acknowledges invalidations but keeps serving the entries they name.
func IgnoreInvalidations(c *Client) { c.testIgnore.Store(true) }
