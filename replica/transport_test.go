package replica

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/internal/tlsfiles"
)

// Bounds of the real-time waits below. They only bound failures; a passing
// run takes well under a second. They are generous because -race tests of
// several packages may share a small machine.
const (
	peerElectionWithin = 30 * time.Second
	peerRPCTimeout     = 5 * time.Second
)

// peerCA is a cluster CA in a temporary folder.
type peerCA struct{ dir string }

func newPeerCA(t *testing.T) peerCA {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	if err := tlsfiles.CreateCA(dir); err != nil {
		t.Fatal(err)
	}
	return peerCA{dir}
}

func (ca peerCA) file() string { return filepath.Join(ca.dir, tlsfiles.CAFileName) }

// peerTLS issues a node certificate for name on loopback and returns its
// peer configs.
func (ca peerCA) peerTLS(t *testing.T, name string) (server, client *tls.Config) {
	t.Helper()
	cert, key, err := tlsfiles.IssueNode(ca.dir, t.TempDir(), name, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	server, client, err = tlsfiles.PeerTLS(ca.file(), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return server, client
}

// clientCertTLS returns peer configs built, as a peer that does not play by
// the rules would build them, around a client certificate of ca, which
// PeerTLS refuses to use.
func (ca peerCA) clientCertTLS(t *testing.T, name string) (server, client *tls.Config) {
	t.Helper()
	cert, key, err := tlsfiles.IssueClient(ca.dir, t.TempDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(ca.file())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	server = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	client = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, RootCAs: pool}
	return server, client
}

// listenLayer listens on a free loopback TCP port and returns a
// StreamLayer on it with the given configs.
func listenLayer(t *testing.T, server, client *tls.Config) *StreamLayer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return NewStreamLayer(ln, nil, server, client)
}

// layer returns a StreamLayer on a free loopback TCP port with a node
// certificate of ca for name.
func (ca peerCA) layer(t *testing.T, name string) *StreamLayer {
	t.Helper()
	server, client := ca.peerTLS(t, name)
	return listenLayer(t, server, client)
}

// peerLogBuffer is a bytes.Buffer that raft's goroutines may write to while
// the test reads it.
type peerLogBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *peerLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *peerLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// peerLogger returns a raft logger whose output is shown only if the test
// fails. Cleanups run last-in first-out, so a node shut down by a cleanup
// registered later has stopped logging by the time it is shown.
func peerLogger(t *testing.T, name string) hclog.Logger {
	t.Helper()
	buf := &peerLogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, buf.String())
		}
	})
	return hclog.New(&hclog.LoggerOptions{Name: name, Output: buf, Level: hclog.Debug})
}

// newPeerTransport returns a raft NetworkTransport over layer, closed when
// the test ends.
func newPeerTransport(t *testing.T, name string, layer *StreamLayer) *raft.NetworkTransport {
	t.Helper()
	trans := raft.NewNetworkTransportWithLogger(layer, 3, peerRPCTimeout, peerLogger(t, name))
	t.Cleanup(func() { trans.Close() })
	return trans
}

// peerFSM records the commands it applies.
type peerFSM struct {
	mu      sync.Mutex // guards entries
	entries [][]byte
}

func (f *peerFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, slices.Clone(l.Data))
	return nil
}

func (f *peerFSM) Snapshot() (raft.FSMSnapshot, error) { return peerSnapshot{}, nil }

func (f *peerFSM) Restore(rc io.ReadCloser) error { return rc.Close() }

func (f *peerFSM) applied() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries)
}

// peerSnapshot is the snapshot of a peerFSM; the tests never restore one.
type peerSnapshot struct{}

func (peerSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }
func (peerSnapshot) Release()                             {}

// peerNode is a raft node over a StreamLayer.
type peerNode struct {
	raft  *raft.Raft
	fsm   *peerFSM
	trans *raft.NetworkTransport
}

// startPeerNode starts a raft node named name over layer with in-memory
// stores and short timeouts, shut down when the test ends.
func startPeerNode(t *testing.T, name string, layer *StreamLayer) *peerNode {
	t.Helper()
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(name)
	conf.HeartbeatTimeout = 200 * time.Millisecond
	conf.ElectionTimeout = 200 * time.Millisecond
	conf.LeaderLeaseTimeout = 100 * time.Millisecond
	conf.CommitTimeout = 10 * time.Millisecond
	conf.Logger = peerLogger(t, name)
	n := &peerNode{fsm: &peerFSM{}, trans: newPeerTransport(t, name, layer)}
	store := raft.NewInmemStore()
	r, err := raft.NewRaft(conf, n.fsm, store, store, raft.NewInmemSnapshotStore(), n.trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Shutdown().Error(); err != nil {
			t.Errorf("shut down %s: %v", name, err)
		}
	})
	n.raft = r
	return n
}

// TestRaftOverTLS bootstraps a two-node cluster whose nodes talk through
// StreamLayers with mutual TLS and replicates one command to both.
func TestRaftOverTLS(t *testing.T) {
	ca := newPeerCA(t)
	var nodes []*peerNode
	var servers []raft.Server
	for _, name := range []string{"a", "b"} {
		n := startPeerNode(t, name, ca.layer(t, name))
		nodes = append(nodes, n)
		servers = append(servers, raft.Server{ID: raft.ServerID(name), Address: n.trans.LocalAddr()})
	}
	for _, n := range nodes {
		if err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatalf("bootstrap: %v", err)
		}
	}

	// Apply through whichever node leads; an election may move the lead,
	// so try again until a command is committed.
	cmd := []byte("put k v")
	wait.For(t, peerElectionWithin, "a leader to commit a command", func() bool {
		for _, n := range nodes {
			if n.raft.State() == raft.Leader {
				return n.raft.Apply(cmd, time.Second).Error() == nil
			}
		}
		return false
	})
	// Both apply it. A retried Apply may have committed it twice, but
	// never anything else.
	for i, n := range nodes {
		wait.For(t, peerElectionWithin, "node "+string(servers[i].ID)+" to apply the command", func() bool {
			return len(n.fsm.applied()) > 0
		})
		for _, e := range n.fsm.applied() {
			if !bytes.Equal(e, cmd) {
				t.Errorf("node %s applied %q, want only %q", servers[i].ID, e, cmd)
			}
		}
	}
}

// TestRefusedPeers checks, with raft's own requests, that a peer whose
// certificate is from another CA, or is a client certificate of the
// cluster's CA, can neither reach a node nor be reached by it.
func TestRefusedPeers(t *testing.T) {
	ca := newPeerCA(t)
	good := newPeerTransport(t, "good", ca.layer(t, "good"))
	// The good node answers every AppendEntries, and counts them.
	var (
		mu        sync.Mutex
		delivered int
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case rpc := <-good.Consumer():
				mu.Lock()
				delivered++
				mu.Unlock()
				rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { close(done); wg.Wait() })

	appendEntries := func(from *raft.NetworkTransport, to raft.ServerAddress) error {
		var resp raft.AppendEntriesResponse
		return from.AppendEntries("to", to, &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("from")}, Term: 1}, &resp)
	}

	// The control: a node of the same CA gets through.
	peer := newPeerTransport(t, "peer", ca.layer(t, "peer"))
	if err := appendEntries(peer, good.LocalAddr()); err != nil {
		t.Fatalf("a node of the same CA: %v", err)
	}

	foreignCA := newPeerCA(t)
	for _, tc := range []struct {
		name string
		tls  func(t *testing.T) (server, client *tls.Config)
	}{
		{"foreign CA", func(t *testing.T) (server, client *tls.Config) {
			// The rogue trusts the cluster's CA too, whose certificate is
			// no secret, so that the node is the one to refuse it.
			server, client = foreignCA.peerTLS(t, "rogue")
			client = client.Clone()
			client.RootCAs = x509.NewCertPool()
			for _, ca := range []peerCA{foreignCA, ca} {
				caPEM, err := os.ReadFile(ca.file())
				if err != nil {
					t.Fatal(err)
				}
				client.RootCAs.AppendCertsFromPEM(caPEM)
			}
			return server, client
		}},
		{"client certificate", func(t *testing.T) (server, client *tls.Config) { return ca.clientCertTLS(t, "rogue") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, client := tc.tls(t)
			rogue := newPeerTransport(t, "rogue", listenLayer(t, server, client))
			if err := appendEntries(rogue, good.LocalAddr()); err == nil {
				t.Error("the rogue peer reached the node")
			} else {
				t.Logf("rogue to node: %v", err)
			}
			if err := appendEntries(good, rogue.LocalAddr()); err == nil {
				t.Error("the node reached the rogue peer")
			} else {
				t.Logf("node to rogue: %v", err)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if delivered != 1 {
		t.Errorf("the node received %d requests, want only the control's", delivered)
	}
}

// peerPipeListener is a net.Listener of in-memory connections, for tests
// under testing/synctest.
type peerPipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPeerPipeListener() *peerPipeListener {
	return &peerPipeListener{conns: make(chan net.Conn, 8), done: make(chan struct{})}
}

// dial queues a new connection for Accept and returns the dialler's end.
func (l *peerPipeListener) dial() net.Conn {
	server, client := net.Pipe()
	l.conns <- server
	return client
}

func (l *peerPipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *peerPipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *peerPipeListener) Addr() net.Addr { return peerPipeAddr{} }

type peerPipeAddr struct{}

func (peerPipeAddr) Network() string { return "pipe" }
func (peerPipeAddr) String() string  { return "pipe" }

// TestStreamLayerAcceptDoesNotWait checks that Accept returns connections
// before their handshake, so that a silent peer holds up no one else, and
// that the handshake of a silent peer gives up after handshakeTimeout.
func TestStreamLayerAcceptDoesNotWait(t *testing.T) {
	ca := newPeerCA(t)
	server, client := ca.peerTLS(t, "a")
	// The bubble's clock starts in 2000, before the certificates are
	// valid; verify them at the real time instead.
	now := time.Now()
	server, client = server.Clone(), client.Clone()
	server.Time = func() time.Time { return now }
	client.Time = server.Time
	synctest.Test(t, func(t *testing.T) {
		ln := newPeerPipeListener()
		s := NewStreamLayer(ln, nil, server, client)
		defer s.Close()

		silent := ln.dial() // never says a word
		defer silent.Close()
		first, err := s.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()

		// A second peer is accepted, and can shake hands, while the first
		// is silent.
		talker := tls.Client(ln.dial(), withPeerServerName(client, "127.0.0.1"))
		defer talker.Close()
		second, err := s.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer second.Close()
		wrote := make(chan error, 1)
		go func() {
			_, err := talker.Write([]byte("x"))
			wrote <- err
		}()
		buf := make([]byte, 1)
		if _, err := second.Read(buf); err != nil || buf[0] != 'x' {
			t.Fatalf("second peer: read %q, %v", buf, err)
		}
		if err := <-wrote; err != nil {
			t.Fatalf("talker: %v", err)
		}

		// The silent peer's handshake gives up after handshakeTimeout.
		start := time.Now()
		if _, err := first.Read(buf); err == nil {
			t.Fatal("read from a peer that never shook hands")
		}
		if got := time.Since(start); got != handshakeTimeout {
			t.Errorf("the handshake gave up after %v, want %v", got, handshakeTimeout)
		}
		// Writes fail the same way, at once.
		if _, err := first.Write(buf); err == nil {
			t.Error("wrote to a peer that never shook hands")
		}

		s.Close()
		if _, err := s.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	})
}

func withPeerServerName(cfg *tls.Config, name string) *tls.Config {
	cfg = cfg.Clone()
	cfg.ServerName = name
	return cfg
}

// TestStreamLayerDialTimeout checks that Dial gives up, within its timeout,
// on a peer that accepts the TCP connection but never answers the handshake.
func TestStreamLayerDialTimeout(t *testing.T) {
	ca := newPeerCA(t)
	// A listener that nobody accepts from: the kernel completes the TCP
	// handshake, and then nothing is said.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	s := ca.layer(t, "a")
	defer s.Close()

	const timeout = 100 * time.Millisecond
	start := time.Now()
	c, err := s.Dial(raft.ServerAddress(mute.Addr().String()), timeout)
	if err == nil {
		c.Close()
		t.Fatal("Dial succeeded against a peer that never answered")
	}
	// Real time: the bound only catches a Dial that ignores its timeout.
	if got := time.Since(start); got < timeout || got > timeout+5*time.Second {
		t.Errorf("Dial gave up after %v, want about %v", got, timeout)
	}
	if _, err := s.Dial("no port", timeout); err == nil {
		t.Error("Dial accepted an address without a port")
	}
}

func TestStreamLayerAddr(t *testing.T) {
	ca := newPeerCA(t)
	server, client := ca.peerTLS(t, "a")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewStreamLayer(ln, nil, server, client)
	defer s.Close()
	if s.Addr() != ln.Addr() {
		t.Errorf("Addr() = %v, want the listener's %v", s.Addr(), ln.Addr())
	}
	adv := &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 7500}
	if got := NewStreamLayer(ln, adv, server, client).Addr(); got != adv {
		t.Errorf("Addr() = %v, want the advertised %v", got, adv)
	}
}

func TestNewStreamLayerRefusesOpenServer(t *testing.T) {
	ca := newPeerCA(t)
	server, client := ca.peerTLS(t, "a")
	open := server.Clone()
	open.ClientAuth = tls.VerifyClientCertIfGiven
	for name, cfgs := range map[string][2]*tls.Config{
		"no server config":      {nil, client},
		"no client config":      {server, nil},
		"client certs optional": {open, client},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			NewStreamLayer(newPeerPipeListener(), nil, cfgs[0], cfgs[1])
		}()
	}
}
