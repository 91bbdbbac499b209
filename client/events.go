package client

// EventKind says what happened.
type EventKind int

// Events, after Chubby's jeopardy, safe and expired.
const (
	// EventDisconnected: the connection to the server was lost. Cached
	// entries are still served until their leases run out.
	EventDisconnected EventKind = iota + 1
	// EventReconnected: a new session is open.
	EventReconnected
	// EventLeasesExpired: the leases of Keys ran out; reads of them go to
	// the server again, or fail with ErrUnavailable while disconnected.
	EventLeasesExpired
	// EventWriteLeaseLost: the write lease on Keys[0] was recalled by the
	// server, or ran out: it was not renewed by its deadline. A lost
	// connection alone does not lose it: the server gives it to the
	// client's next session, which renews it.
	EventWriteLeaseLost
)

func (k EventKind) String() string {
	switch k {
	case EventDisconnected:
		return "disconnected"
	case EventReconnected:
		return "reconnected"
	case EventLeasesExpired:
		return "leases expired"
	case EventWriteLeaseLost:
		return "write lease lost"
	}
	return "unknown"
}

// Event is a connection or lease event.
type Event struct {
	Kind EventKind
	Keys []string // EventLeasesExpired, EventWriteLeaseLost
	Err  error    // EventDisconnected: why
}

// emit queues an event for OnEvent. If the application falls far behind,
// events are dropped and logged rather than blocking the client.
func (c *Client) emit(ev Event) {
	if c.cfg.OnEvent == nil {
		return
	}
	select {
	case c.events <- ev:
	default:
		c.log.Warn("event dropped: OnEvent is too slow", "event", ev.Kind.String())
	}
}

func (c *Client) deliverEvents() {
	defer c.wg.Done()
	for {
		select {
		case ev := <-c.events:
			c.cfg.OnEvent(ev)
		case <-c.ctx.Done():
			return
		}
	}
}
