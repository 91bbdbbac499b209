package clitest

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePorts: the ports handed out can be bound, lie below the kernel's
// ephemeral range where it is known, so that no port-0 socket or outgoing
// connection takes one before its server binds it, and are never handed
// out twice, so that no test takes a port of another test's server while
// that server is down for a restart.
func TestFreePorts(t *testing.T) {
	lo := ephemeralLow()
	for _, tc := range []struct {
		name string
		free func() (int, error)
		bind func(addr string) error
	}{
		{"udp", FreeUDPPort, func(addr string) error {
			pc, err := net.ListenPacket("udp", addr)
			if err == nil {
				pc.Close()
			}
			return err
		}},
		{"tcp", FreeTCPPort, func(addr string) error {
			l, err := net.Listen("tcp", addr)
			if err == nil {
				l.Close()
			}
			return err
		}},
	} {
		seen := map[int]bool{}
		for range 400 {
			port, err := tc.free()
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if seen[port] {
				t.Errorf("%s: port %d handed out twice", tc.name, port)
			}
			seen[port] = true
			if lo > minTestPort+1000 && (port < minTestPort || port >= lo) {
				t.Errorf("%s: port %d, outside [%d, %d)", tc.name, port, minTestPort, lo)
			}
			if err := tc.bind(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err != nil {
				t.Errorf("%s: port %d cannot be bound: %v", tc.name, port, err)
			}
		}
	}
}
