package client

import (
	"strings"
	"sync"
)

// Change notices for the coordination types (Election.Observe,
// Queue.Claim): they wait for the server to invalidate a key or a listing
// they read under a lease, instead of asking again and again. A notice
// says only that something may have changed: the waiter reads again.

// notices are the waiters for invalidations, by key and by prefix. mu is
// a leaf lock.
type notices struct {
	mu       sync.Mutex
	keys     map[string][]chan struct{}
	prefixes map[string][]chan struct{}
}

// waitFor returns a channel that is closed when the server invalidates
// one of keys, or a listing of one of prefixes or of a key under one of
// them, or when the client drops every lease (a suspend, Close); and a
// function that stops the wait.
func (c *Client) waitFor(keys, prefixes []string) (<-chan struct{}, func()) {
	n := &c.notices
	ch := make(chan struct{})
	n.mu.Lock()
	if n.keys == nil {
		n.keys = make(map[string][]chan struct{})
		n.prefixes = make(map[string][]chan struct{})
	}
	for _, k := range keys {
		n.keys[k] = append(n.keys[k], ch)
	}
	for _, p := range prefixes {
		n.prefixes[p] = append(n.prefixes[p], ch)
	}
	n.mu.Unlock()
	stop := func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		drop := func(m map[string][]chan struct{}, k string) {
			l := m[k]
			for i, c := range l {
				if c == ch {
					l = append(l[:i], l[i+1:]...)
					break
				}
			}
			if len(l) == 0 {
				delete(m, k)
			} else {
				m[k] = l
			}
		}
		for _, k := range keys {
			drop(n.keys, k)
		}
		for _, p := range prefixes {
			drop(n.prefixes, p)
		}
	}
	return ch, stop
}

// notify wakes the waiters for keys and prefixes that were invalidated: a
// key wakes its own waiters and those of every prefix it is under; a
// listing of prefix p wakes the waiters of p. It must be called with no
// lock of the client held but those of a caller that takes it as a leaf.
func (c *Client) notify(keys, prefixes [][]byte) {
	n := &c.notices
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.keys) == 0 && len(n.prefixes) == 0 {
		return
	}
	wake := func(l []chan struct{}) {
		for _, ch := range l {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	}
	for _, k := range keys {
		wake(n.keys[string(k)])
		for p, l := range n.prefixes {
			if strings.HasPrefix(string(k), p) {
				wake(l)
			}
		}
	}
	for _, p := range prefixes {
		wake(n.prefixes[string(p)])
	}
}

// notifyAll wakes every waiter: the client dropped every lease.
func (c *Client) notifyAll() {
	n := &c.notices
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range []map[string][]chan struct{}{n.keys, n.prefixes} {
		for _, l := range m {
			for _, ch := range l {
				select {
				case <-ch:
				default:
					close(ch)
				}
			}
		}
	}
}
