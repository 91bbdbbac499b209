package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
	"github.com/leased/leased/store"
)

// TestSaveSnapshot: a follower asked for a snapshot names the leader; the
// leader streams one that holds every acknowledged write, large values
// included, and that the store reads back to the summary the leader
// reported, while writes go on beside it.
func TestSaveSnapshot(t *testing.T) {
	t.Parallel()
	cl := testkit.NewCluster(t, 3, server.Config{Cluster: testkit.RelaxedRaft(), LeaseTerm: time.Second})
	leader := cl.Leader()
	c := dialAddr(t, cl.Endpoints(), cl.CAFile, client.Config{})
	big := strings.Repeat("b", 200<<10)
	for i := range 20 {
		v := fmt.Sprint(i)
		if i%5 == 0 {
			v = big
		}
		mustPut(t, c, fmt.Sprintf("k%02d", i), v)
	}
	var follower string
	for name := range cl.Nodes {
		if name != leader {
			follower = name
		}
	}
	fa, err := client.DialAdmin(stepCtx(t), cl.Addrs[follower], client.Config{CAFile: cl.CAFile, Logger: testkit.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	var se *client.ServerError
	_, err = fa.SaveSnapshot(stepCtx(t), &bytes.Buffer{}, 5*time.Second)
	if !errors.As(err, &se) || se.Code != protocol.CodeNotLeader || se.Leader != cl.Addrs[leader] {
		t.Errorf("snapshot from a follower: %v; want CodeNotLeader naming %s", err, cl.Addrs[leader])
	}
	// The follower's session still serves.
	if _, err := fa.Status(stepCtx(t)); err != nil {
		t.Errorf("status after the refused snapshot: %v", err)
	}

	la, err := client.DialAdmin(stepCtx(t), cl.Addrs[leader], client.Config{CAFile: cl.CAFile, Logger: testkit.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	writing := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				writing <- nil
				return
			default:
			}
			if _, err := c.Put(stepCtx(t), fmt.Sprintf("later%d", i%10), []byte("x")); err != nil {
				writing <- err
				return
			}
		}
	}()
	var buf bytes.Buffer
	info, err := la.SaveSnapshot(stepCtx(t), &buf, 5*time.Second)
	close(stop)
	if err != nil {
		t.Fatalf("snapshot from the leader: %v", err)
	}
	if err := <-writing; err != nil {
		t.Errorf("a write beside the snapshot: %v", err)
	}
	sum, n, err := store.ReadSnapshot(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("the saved snapshot: %v", err)
	}
	if n != info.Bytes || sum.Applied != info.AppliedIndex || sum.State.Revision != info.Revision ||
		sum.Keys != info.Keys || sum.Digest.String() != info.Digest || info.Keys < 20 || info.Revision < 20 {
		t.Errorf("the leader reported %+v; the stream holds %d bytes, %+v", info, n, sum)
	}
	// The session goes on after a snapshot.
	if st, err := la.Status(stepCtx(t)); err != nil || st.Role != protocol.RoleLeader {
		t.Errorf("status after the snapshot: %+v, %v", st, err)
	}
}
