package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/server"
)

// exampleServer starts an embedded leased for one example: on a free port
// of 127.0.0.1, with its data, and the CA it makes for its clients, in a new
// temporary folder. It returns the server's address, the CA file a client
// passes as Config.CAFile, and a function that stops the server and removes
// the folder. A program of your own dials a leased it runs (see README.md),
// or embeds one the same way.
func exampleServer() (addr, caFile string, stop func()) {
	dir, err := os.MkdirTemp("", "leased-example-")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.New(server.Config{Dir: dir, Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	return srv.Addr().String(), client.CAPath(dir), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			log.Fatal(err)
		}
		if err := <-served; !errors.Is(err, server.ErrServerClosed) {
			log.Fatal(err)
		}
		os.RemoveAll(dir)
	}
}

// A read takes a lease on its key, so the next read of the key is served
// from the client's memory (Item.Cached). Before another client's write
// commits, the server invalidates that entry, so the next read goes to the
// server again and sees the new value.
func ExampleClient_Get() {
	addr, caFile, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	writer, err := client.Dial(ctx, addr, client.Config{CAFile: caFile})
	if err != nil {
		log.Fatal(err)
	}
	defer writer.Close()
	reader, err := client.Dial(ctx, addr, client.Config{CAFile: caFile})
	if err != nil {
		log.Fatal(err)
	}
	defer reader.Close()

	ver, err := writer.Put(ctx, "/svc/db/primary", []byte("10.0.0.8:5432"))
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		it, err := reader.Get(ctx, "/svc/db/primary")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (version of the put: %v, cached: %v)\n", it.Value, it.Version == ver, it.Cached)
	}

	// The write waits until the reader has dropped its cached entry.
	if _, err := writer.Put(ctx, "/svc/db/primary", []byte("10.0.0.9:5432")); err != nil {
		log.Fatal(err)
	}
	it, err := reader.Get(ctx, "/svc/db/primary")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (cached: %v)\n", it.Value, it.Cached)

	it, err = reader.Get(ctx, "/svc/db/replica")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("a missing key is found:", it.Found)

	// Delete says how many keys it removed: 0 for a key that is not there.
	for range 2 {
		d, err := writer.Delete(ctx, "/svc/db/primary")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("deleted:", d.Deleted)
	}
	// Output:
	// 10.0.0.8:5432 (version of the put: true, cached: false)
	// 10.0.0.8:5432 (version of the put: true, cached: true)
	// 10.0.0.9:5432 (cached: false)
	// a missing key is found: false
	// deleted: 1
	// deleted: 0
}

// A write lease makes one client the only writer of a key for a while.
// Its writes carry the lease's fencing token; once the lease is released
// (or recalled, or lost), the server refuses writes with that token, so a
// holder that was paused past its lease cannot overwrite newer data. Each
// grant has a larger token than the one before.
func ExampleClient_AcquireWriteLease() {
	addr, caFile, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.Dial(ctx, addr, client.Config{CAFile: caFile})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	wl, err := c.AcquireWriteLease(ctx, "/svc/leader")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := wl.Put(ctx, []byte("node-a")); err != nil {
		log.Fatal(err)
	}
	fmt.Println("valid while held:", wl.Valid())
	if err := wl.Release(ctx); err != nil {
		log.Fatal(err)
	}
	<-wl.Done() // closed at once by Release
	_, err = wl.Put(ctx, []byte("node-a, late"))
	fmt.Println("a write after the release is fenced:", errors.Is(err, client.ErrFenced))

	next, err := c.AcquireWriteLease(ctx, "/svc/leader")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("token grew:", next.Token() > wl.Token())
	if err := next.Release(ctx); err != nil {
		log.Fatal(err)
	}

	it, err := c.Get(ctx, "/svc/leader")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", it.Value)
	// Output:
	// valid while held: true
	// a write after the release is fenced: true
	// token grew: true
	// node-a
}

// A TTL lease, as in etcd, lives for its TTL unless kept alive (KeepAlive).
// Keys attached to it with WithLease are deleted when it is revoked or runs
// out.
func ExampleClient_Grant() {
	addr, caFile, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.Dial(ctx, addr, client.Config{CAFile: caFile})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	g, err := c.Grant(ctx, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("granted for", g.TTL)
	if _, err := c.Put(ctx, "/workers/a", []byte("up"), client.WithLease(g.ID)); err != nil {
		log.Fatal(err)
	}
	ttl, err := c.TimeToLive(ctx, g.ID, true)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("attached:", ttl.Keys)

	r, err := c.Revoke(ctx, g.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("revoked, keys deleted:", r.Keys)
	it, err := c.Get(ctx, "/workers/a")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("/workers/a found:", it.Found)
	_, err = c.Revoke(ctx, g.ID)
	fmt.Println("the lease is gone:", errors.Is(err, client.ErrNotFound))
	// Output:
	// granted for 1m0s
	// attached: [/workers/a]
	// revoked, keys deleted: 1
	// /workers/a found: false
	// the lease is gone: true
}

// A Session keeps a TTL lease alive while the program holds it, as etcd's
// concurrency.Session does: a process attaches keys to it to announce that
// it is alive. Closing the session revokes the lease and deletes the keys;
// if the process dies instead, they go when the TTL runs out.
func ExampleNewSession() {
	addr, caFile, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.Dial(ctx, addr, client.Config{CAFile: caFile})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	s, err := client.NewSession(ctx, c, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Put(ctx, "/members/node-a", []byte("10.0.0.8"), client.WithLease(s.Lease())); err != nil {
		log.Fatal(err)
	}
	it, err := c.Get(ctx, "/members/node-a")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("while the session lives:", it.Found)

	if err := s.Close(); err != nil {
		log.Fatal(err)
	}
	<-s.Done() // closed once the session ends
	it, err = c.Get(ctx, "/members/node-a")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after Close:", it.Found)
	// Output:
	// while the session lives: true
	// after Close: false
}

// An admin session asks one node for its status and its cluster's
// members, as leasectl endpoint status and member list do. A server that
// is not a node of a cluster leads itself, alone, with no peer address.
func ExampleDialAdmin() {
	addr, caFile, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	a, err := client.DialAdmin(ctx, addr, client.Config{CAFile: caFile})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()

	st, err := a.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("role:", st.Role, "serving:", st.Serving, "at its address:", st.ClientAddr == addr)
	ms, err := a.Members(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range ms {
		fmt.Println("member leads:", m.Leads, "voter:", m.Voter, "peer address:", m.PeerAddr != "")
	}
	// Output:
	// role: leader serving: true at its address: true
	// member leads: true voter: true peer address: false
}

// List reads the keys under a prefix in key order, at one revision; a
// directory of a file system is a prefix. A page holds at most Limit keys,
// and More says there are more: StartAfter the last key reads the next
// page, which skips and repeats no key, whatever is written between pages.
func ExampleClient_List() {
	addr, caFile, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Config{CAFile: caFile})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for _, name := range []string{"/home/ann/c.txt", "/home/ann/a.txt", "/home/ann/b.txt", "/home/bob/x.txt"} {
		if _, err := c.Put(ctx, name, []byte("contents of "+name)); err != nil {
			log.Fatal(err)
		}
	}
	after := ""
	for {
		opts := []client.ListOption{client.Limit(2), client.KeysOnly()}
		if after != "" {
			opts = append(opts, client.StartAfter(after))
		}
		page, err := c.List(ctx, "/home/ann/", opts...)
		if err != nil {
			log.Fatal(err)
		}
		for _, kv := range page.KVs {
			fmt.Printf("%s (version %d)\n", kv.Key, kv.Version)
		}
		if !page.More {
			break
		}
		after = page.KVs[len(page.KVs)-1].Key
		fmt.Println("-- next page")
	}
	// Output:
	// /home/ann/a.txt (version 2)
	// /home/ann/b.txt (version 3)
	// -- next page
	// /home/ann/c.txt (version 1)
}
