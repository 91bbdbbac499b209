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
