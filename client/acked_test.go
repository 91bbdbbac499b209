package client

import (
	"sync"
	"testing"
)

// TestAckedNeverPassesAWriteInFlight: concurrent writes, as the server
// sees them. Each write's Acked says that the client has the outcome of
// every write below it, and the server refuses, as answered already, a
// write below an Acked it has seen. So no write may be sent after a
// write whose Acked is above its ID. The writes here take their IDs,
// send (in the order of a log, as a session's stream orders frames),
// sometimes send again, and end.
func TestAckedNeverPassesAWriteInFlight(t *testing.T) {
	c := &Client{writing: make(map[uint64]struct{})}
	var (
		mu        sync.Mutex
		watermark uint64 // the highest Acked the "server" has seen
		refused   []uint64
	)
	send := func(id uint64) {
		mu.Lock()
		defer mu.Unlock()
		acked := c.beginWrite(id)
		if acked > id {
			t.Errorf("write %d sent with Acked %d, above its own ID", id, acked)
		}
		if id < watermark {
			refused = append(refused, id)
		}
		watermark = max(watermark, acked)
	}
	const goroutines, writes = 16, 2000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range writes {
				id := c.newWriteID()
				send(id)
				if (i+g)%7 == 0 {
					send(id) // sent again after a lost connection
				}
				c.endWrite(id)
			}
		})
	}
	wg.Wait()
	if len(refused) > 0 {
		t.Fatalf("%d writes were sent after an Acked above their ID, and the server would refuse them as answered already: %v", len(refused), refused[:min(len(refused), 10)])
	}
	if len(c.writing) != 0 || c.lowest != 0 {
		t.Fatalf("after every write ended: %d writes in flight, lowest %d; want none", len(c.writing), c.lowest)
	}
}
