package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/leased/leased/client"
)

// Example is the README's library example: the lines between the markers
// are the README's snippet, word for word, one tab less (TestREADMEExample
// checks it). It needs a leased on 127.0.0.1:7400 started from the working
// directory, so go test compiles it but does not run it.
func Example() {
	// README: begin
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel() // bounds every call below, Dial too: nothing waits forever

	c, err := client.Dial(ctx, "127.0.0.1:7400", client.Config{CAFile: client.CAPath("leased-data")})
	if err != nil {
		log.Fatal(err) // such as ErrUnavailable: is leased running?
	}
	defer c.Close() // drops the cache and frees every lease at once

	var res client.WriteResult
	ver, err := c.Put(ctx, "/svc/db/primary", []byte("10.0.0.8:5432"), client.Result(&res)) // res.Waited, res.Holders
	if err != nil {
		log.Fatal(err)
	}
	it, err := c.Get(ctx, "/svc/db/primary") // it.Value, it.Found, it.Version, it.Cached
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s at version %d\n", it.Value, it.Version) // the next Get is served from memory
	ver, err = c.CompareAndSwap(ctx, "/svc/db/primary", ver, []byte("10.0.0.9:5432"))
	if errors.Is(err, client.ErrVersionMismatch) {
		fmt.Println("another client wrote first")
	} else if err != nil {
		log.Fatal(err)
	}

	wl, err := c.AcquireWriteLease(ctx, "/svc/leader")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := wl.Put(ctx, []byte("node-a")); err != nil { // carries wl.Token(); ErrFenced once the lease is gone
		log.Fatal(err)
	}
	fmt.Println("leader with fencing token", wl.Token(), "at version", ver)
	// <-wl.Done() would wait until the lease is recalled or lost: hold it
	// while working, and release it when done.
	if err := wl.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// README: end
}
