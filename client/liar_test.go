//go:build linux

package client_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/protocol"
)

// liar is the broken client of the negative control
// "ignores-invalidations": it acknowledges every invalidation at once, so
// writers do not wait for it, but keeps serving what it cached until the
// lease it was granted runs out on its own clock (the time it sent the
// read plus the term). It speaks the raw protocol (protoclient), with a
// cache of its own, so no hook in the client library is needed to break
// it. Its methods are those of *client.Client that the history's workers
// call, and are safe for concurrent use.
type liar struct {
	raw *protoclient.Client
	tr  *quic.Transport
	wg  sync.WaitGroup // the acknowledging goroutine

	mu    sync.Mutex // guards cache
	cache map[string]liarEntry
}

type liarEntry struct {
	item     client.Item
	deadline time.Time
}

// dialLiar opens a liar's session to addr over pc, trusting the CA in
// caFile. Close ends it; the caller closes pc afterwards.
func dialLiar(ctx context.Context, addr, caFile string, pc net.PacketConn, name string) (*liar, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	opts := protoclient.Options{CAFile: caFile, Name: name}
	tlsConf, err := protoclient.TLSConfig(opts, ua.IP.String())
	if err != nil {
		return nil, err
	}
	tr := &quic.Transport{Conn: pc}
	qc, err := tr.Dial(ctx, ua, tlsConf, &quic.Config{MaxIdleTimeout: 30 * time.Second, KeepAlivePeriod: 5 * time.Second})
	if err != nil {
		tr.Close()
		return nil, err
	}
	raw, err := protoclient.New(ctx, qc, opts)
	if err != nil {
		tr.Close()
		return nil, err
	}
	l := &liar{raw: raw, tr: tr, cache: make(map[string]liarEntry)}
	l.wg.Go(l.acknowledge)
	return l, nil
}

// acknowledge acknowledges every invalidation, and drops nothing, until
// the session ends.
func (l *liar) acknowledge() {
	for {
		m, err := l.raw.RecvNotice(context.Background())
		if err != nil {
			return
		}
		if inv, ok := m.(*protocol.Invalidate); ok {
			if l.raw.Send(&protocol.Ack{Keys: inv.Keys}) != nil {
				return
			}
		}
	}
}

// Close ends the session and waits for the liar's goroutines.
func (l *liar) Close() error {
	err := l.raw.Close()
	l.wg.Wait()
	l.tr.Close()
	return err
}

// Get serves key from the liar's cache while the lease it was granted
// lasts, whatever invalidations said, and otherwise reads it from the
// server and caches the answer under its term.
func (l *liar) Get(ctx context.Context, key string) (client.Item, error) {
	l.mu.Lock()
	e, ok := l.cache[key]
	l.mu.Unlock()
	if ok && time.Now().Before(e.deadline) {
		it := e.item
		it.Cached = true
		return it, nil
	}
	sent := time.Now()
	m, err := l.raw.Call(ctx, &protocol.Get{Key: []byte(key)})
	if err != nil {
		return client.Item{}, err
	}
	r, ok := m.(*protocol.GetReply)
	if !ok {
		return client.Item{}, replyError(m)
	}
	it := client.Item{Value: r.Value, Found: r.Found, Version: r.Version}
	l.keep(key, it, sent, r.Term)
	return it, nil
}

// keep caches it under a lease of term counted from sent, if there is one.
func (l *liar) keep(key string, it client.Item, sent time.Time, term time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if term > 0 {
		l.cache[key] = liarEntry{item: it, deadline: sent.Add(term)}
	} else {
		delete(l.cache, key)
	}
}

// Put writes key and caches the value under the lease the reply carries.
func (l *liar) Put(ctx context.Context, key string, value []byte, _ ...client.WriteOption) (uint64, error) {
	return l.write(ctx, &protocol.Write{Op: protocol.OpPut, Key: []byte(key), Value: value})
}

// Delete deletes key.
func (l *liar) Delete(ctx context.Context, key string, _ ...client.WriteOption) (client.DeleteResult, error) {
	r, err := l.writeReply(ctx, &protocol.Write{Op: protocol.OpDelete, Key: []byte(key)})
	if err != nil {
		return client.DeleteResult{}, err
	}
	d := client.DeleteResult{Version: r.Version, Deleted: 1}
	if r.Unchanged {
		d.Deleted = 0
	}
	return d, nil
}

// CompareAndSwap writes key if its version is still oldVersion.
func (l *liar) CompareAndSwap(ctx context.Context, key string, oldVersion uint64, value []byte, _ ...client.WriteOption) (uint64, error) {
	return l.write(ctx, &protocol.Write{Op: protocol.OpCAS, Key: []byte(key), Value: value, Expect: oldVersion})
}

func (l *liar) write(ctx context.Context, w *protocol.Write) (uint64, error) {
	r, err := l.writeReply(ctx, w)
	if err != nil {
		return 0, err
	}
	return r.Version, nil
}

// writeReply sends w and keeps what it wrote as a cache entry under the
// lease the reply carries.
func (l *liar) writeReply(ctx context.Context, w *protocol.Write) (*protocol.WriteReply, error) {
	if dl, ok := ctx.Deadline(); ok {
		w.Timeout = max(time.Until(dl), time.Nanosecond)
	}
	sent := time.Now()
	m, err := l.raw.Call(ctx, w)
	if err != nil {
		return nil, err
	}
	r, ok := m.(*protocol.WriteReply)
	if !ok {
		return nil, replyError(m)
	}
	found := w.Op != protocol.OpDelete
	l.keep(string(w.Key), client.Item{Value: w.Value, Found: found, Version: r.Version}, sent, r.Term)
	return r, nil
}

// replyError is the error a reply other than the expected one stands for,
// as the client library reports it.
func replyError(m protocol.Message) error {
	if e, ok := m.(*protocol.Error); ok {
		return &client.ServerError{Code: e.Code, Message: e.Message}
	}
	return fmt.Errorf("%w: unexpected reply %s", client.ErrProtocol, m.Type())
}
