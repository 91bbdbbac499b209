// Package protocol defines the wire protocol of leased: the msgpack message
// types, their framing, the protocol version, the ALPN string and the error
// codes. It never dials, retries or times out; the server and the client own
// the connections.
package protocol

// ALPN is the TLS application protocol that leased speaks over QUIC.
const ALPN = "leased/1"

// Version is the protocol version named in the hello exchange. A server
// refuses a hello with any other version.
const Version uint16 = 1
