package client

import (
	"errors"
	"io"
	"testing"

	"github.com/quic-go/quic-go"
)

// TestLostErrorCertificateRefused: a server's refusal of the client's
// certificate is ErrUnauthenticated, not ErrUnavailable, however late it
// reaches the client: as it connects, as it sends its hello (TLS 1.3
// lets the client finish its side of the handshake before the server
// checks the certificate), or with the connection lost.
func TestLostErrorCertificateRefused(t *testing.T) {
	refused := &quic.TransportError{Remote: true, ErrorCode: quic.TransportErrorCode(0x100 + 116)} // certificate_required
	for _, err := range []error{
		lostError("send", refused),
		lostError("connection lost", refused),
		connectError("hello from", "127.0.0.1:7400", refused),
	} {
		if !errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrUnavailable) {
			t.Errorf("%v: want ErrUnauthenticated, not ErrUnavailable", err)
		}
	}
	if err := lostError("send", io.EOF); !errors.Is(err, ErrUnavailable) || !errors.Is(err, io.EOF) {
		t.Errorf("%v: want ErrUnavailable wrapping io.EOF", err)
	}
}
