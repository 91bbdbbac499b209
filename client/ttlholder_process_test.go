//go:build linux

package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
)

// TestE2ETTLHolderKilledLongTerm: the read term (10 s, leased's default)
// is longer than the TTL. The holder process puts its key under its TTL
// lease, keeps the lease alive and reads the key, so that it holds read
// leases on it, and is killed with SIGKILL. Its read leases on its own
// key end no later than its TTL lease could, so the key goes about ttl + ε
// after the last keep-alive acknowledged (checkExpiry), not a read term
// after the holder's last read or write.
func TestE2ETTLHolderKilledLongTerm(t *testing.T) {
	const (
		ttl  = 2 * time.Second
		eps  = 100 * time.Millisecond
		term = 10 * time.Second
	)
	t.Setenv(helperReread, "1") // the holder process inherits it
	srv := clitest.StartServer(t, linBinaries(t), t.TempDir(), t.TempDir(), "--ttl-min", "1s", "--lease-term", term.String(), "--epsilon", eps.String())
	keys := []string{"task/1"}
	put := time.Now()
	h := startTTLHolder(t, srv.Addr, srv.CA, ttl, keys...)
	h.waitRenewals(t, 2, 2*ttl)

	cfg := srv.ClientConfig()
	cfg.Name = "reader"
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	reader, err := client.Dial(ctx, srv.Addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	w := watchKeys(t, reader, keys...)
	h.waitRenewals(t, 1, ttl)
	sent, acked := h.kill(t)
	killed := time.Now()
	// The expiry waits for the reader's acknowledgement, which a loaded
	// machine may hold up; without the bound on the holder's read leases,
	// the key would live a read term (10 s) after the holder's last read.
	const slack = time.Second
	var gone time.Time
	checkExpiry(t, w, func() bool {
		st, err := reader.ServerStats(context.Background())
		if err != nil || st.TTLExpired == 0 {
			return false
		}
		if gone.IsZero() {
			gone = time.Now()
		}
		return true
	}, ttl, eps, slack, sent, acked)
	t.Logf("the key went %v after the last keep-alive was acknowledged, %v after the kill, %v after the holder's put (TTL %v, read term %v)",
		gone.Sub(acked), gone.Sub(killed), gone.Sub(put), ttl, term)
}
