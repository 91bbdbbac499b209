package client

// LearnedAddrs returns the client addresses c learned from its cluster.
func LearnedAddrs(c *Client) []string {
	c.learned.mu.Lock()
	defer c.learned.mu.Unlock()
	return append([]string(nil), c.learned.addrs...)
}
