package server

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/internal/atomicfile"
)

// resetKeyFile holds the QUIC stateless reset key, in the data folder.
const resetKeyFile = "stateless-reset.key"

// loadOrCreateResetKey returns the QUIC stateless reset key kept in dir,
// creating it on first use. The key outlives the process, so that a server
// restarted on the same address after a crash can tell clients at once
// that their old connections are gone (a stateless reset), instead of
// leaving them to wait out their idle timeout before they reconnect.
func loadOrCreateResetKey(dir string) (*quic.StatelessResetKey, error) {
	path := filepath.Join(dir, resetKeyFile)
	var key quic.StatelessResetKey
	b, err := os.ReadFile(path)
	switch {
	case err == nil && len(b) == len(key):
		copy(key[:], b)
		return &key, nil
	case err == nil:
		return nil, fmt.Errorf("stateless reset key %s has %d bytes, want %d; remove it to make a new one", path, len(b), len(key))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("stateless reset key: %w", err)
	}
	if _, err := rand.Read(key[:]); err != nil {
		return nil, fmt.Errorf("stateless reset key: %w", err)
	}
	if err := atomicfile.Write(path, key[:], 0o600); err != nil {
		return nil, fmt.Errorf("stateless reset key: %w", err)
	}
	return &key, nil
}
