package store

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// committedClient reads client id's record from badger itself.
func committedClient(t *testing.T, b *Badger, id uint64) ([]byte, bool) {
	t.Helper()
	var v []byte
	var ok bool
	err := b.db.View(func(tx *badger.Txn) error {
		var err error
		v, ok, err = badgerTxn{tx}.get(clientKey(id))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return v, ok
}

// TestClientCacheFollowsCommits: the cached client records are what badger
// holds, through writes, forgetting and Reopen, and a failed write empties
// the cache.
func TestClientCacheFollowsCommits(t *testing.T) {
	const threshold = 64 << 10
	b := openWith(t, func(o badger.Options) badger.Options {
		return o.WithValueThreshold(threshold).WithMemTableSize((threshold*100 + 99) / 15)
	})
	at := time.Unix(100, 0)
	w := func(client, request uint64, key string) Command {
		return Command{Op: OpPut, Key: []byte(key), Value: []byte("v"), Client: client, Request: request, Acked: 1, At: at}
	}
	same := func(what string, id uint64) {
		t.Helper()
		cached, inCache := b.clients.get(clientKey(id))
		stored, inStore := committedClient(t, b, id)
		if inCache && (!inStore || !bytes.Equal(cached, stored)) {
			t.Errorf("%s: client %d cached as %x, stored as %x (%v)", what, id, cached, stored, inStore)
		}
	}
	if _, err := b.Apply([]Command{w(7, 1, "a"), w(7, 2, "b"), w(8, 1, "a")}); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.clients.get(clientKey(7)); !ok {
		t.Error("client 7's record is not cached after its writes")
	}
	same("after the writes", 7)
	same("after the writes", 8)
	if r, ok, err := b.Kept(w(7, 2, "b")); err != nil || !ok || r.Version != 2 {
		t.Errorf("Kept(7, 2) = %+v, %v, %v; want version 2", r, ok, err)
	}

	// Forgotten clients leave the cache with badger.
	if _, err := b.Apply([]Command{{Op: OpForgetClients, Clients: []uint64{7}, At: at.Add(time.Second)}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.clients.get(clientKey(7)); ok {
		t.Error("client 7 is still cached after it was forgotten")
	}
	if _, ok, err := b.Kept(w(7, 2, "b")); err != nil || ok {
		t.Errorf("Kept(7, 2) after forgetting = %v, %v; want none", ok, err)
	}
	rs, err := b.Apply([]Command{w(7, 2, "b")})
	if err != nil || rs[0].Duplicate || rs[0].Version != 4 {
		t.Errorf("request 2 of a forgotten client = %+v, %v; want it applied at version 4", rs, err)
	}
	same("after a write of a forgotten client", 7)

	// A failed write empties the cache; what Reopen finds is served.
	if _, err := b.Apply([]Command{w(8, 2, "c"), {Op: OpPut, Key: []byte("k"), Value: make([]byte, threshold-10)}}); !errors.Is(err, badger.ErrTxnTooBig) {
		t.Fatalf("a command too big: %v, want ErrTxnTooBig", err)
	}
	if len(b.clients.m) != 0 {
		t.Errorf("%d client records cached after a failed write", len(b.clients.m))
	}
	if err := b.Reopen(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{7, 8} {
		rs, err := b.Apply([]Command{w(id, 1, "a")})
		if err != nil || len(rs) != 1 {
			t.Fatalf("after Reopen: %v, %v", rs, err)
		}
		same(fmt.Sprintf("after Reopen, client %d", id), id)
	}
}

// TestClientCacheBounds: the cache holds at most maxCachedClients records,
// none larger than maxCachedRecord, and a record grown too large is
// forgotten rather than kept stale.
func TestClientCacheBounds(t *testing.T) {
	var c clientCache
	for i := range maxCachedClients + 10 {
		c.put(string(clientKey(uint64(i))), []byte{1})
	}
	if len(c.m) != maxCachedClients {
		t.Errorf("%d records cached, want the bound %d", len(c.m), maxCachedClients)
	}
	key := string(clientKey(1 << 40))
	c.put(key, []byte{1})
	c.put(key, make([]byte, maxCachedRecord+1))
	if _, ok := c.get([]byte(key)); ok {
		t.Error("a record grown past the bound is still cached")
	}
}
