package client

import "github.com/leased/leased/internal/layout"

// DefaultDataDir is the data folder of a leased started with no flags,
// relative to its working directory.
const DefaultDataDir = layout.DefaultDir

// CAPath returns <dataDir>/tls/ca.pem: the CA certificate that a leased
// started on the data folder dataDir made for its clients, which a client on
// the same machine passes as Config.CAFile (CAPath(DefaultDataDir) for a
// leased started with no flags, from its working directory). It only joins
// paths, reading nothing, and does not link the server. Any goroutine may
// call it.
func CAPath(dataDir string) string { return layout.CAPath(dataDir) }
