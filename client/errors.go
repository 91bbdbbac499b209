package client

import (
	"errors"
	"fmt"

	"github.com/leased/leased/protocol"
)

// Sentinel errors. Every error that crosses the wire is turned back into
// one of them: test with errors.Is. The server's message is kept in the
// error's text.
var (
	ErrNotFound          = errors.New("leased: not found")
	ErrVersionMismatch   = errors.New("leased: version mismatch")
	ErrFenced            = errors.New("leased: fenced")
	ErrTooLarge          = errors.New("leased: too large")
	ErrInvalidArgument   = errors.New("leased: invalid argument")
	ErrUnavailable       = errors.New("leased: unavailable")
	ErrResourceExhausted = errors.New("leased: resource exhausted")
	ErrPermissionDenied  = errors.New("leased: permission denied")
	ErrProtocol          = errors.New("leased: protocol error")
	ErrClosed            = errors.New("leased: closed")
	ErrInternal          = errors.New("leased: internal server error")
	// ErrCanceled: a write was abandoned before it committed, and nothing
	// changed. The write's context ended, or the server shut down.
	ErrCanceled = errors.New("leased: write abandoned")
	// ErrUnauthenticated: the server refused the connection for the
	// client's certificate: it requires one and got none (set
	// Config.CertFile and KeyFile), or it does not trust the one it got
	// (signed by another CA, or expired). Trying again does not help.
	ErrUnauthenticated = errors.New("leased: unauthenticated")
	// ErrCompacted: a watch asked for a revision that the server's event
	// history no longer holds, or fell behind its compaction
	// (WatchResponse.CompactRevision names the compaction point). List
	// again, and watch from the listing's revision + 1 (ListWatch does).
	ErrCompacted = errors.New("leased: required revision has been compacted")
	// ErrLocked: an acquisition that would not wait (AcquireTry, or
	// Mutex.TryLock) found the key held by another client, or others
	// waiting for it.
	ErrLocked = errors.New("leased: locked")
)

// codeErrors maps wire codes to sentinels: the one table of the client.
var codeErrors = map[protocol.Code]error{
	protocol.CodeNotFound:          ErrNotFound,
	protocol.CodeVersionMismatch:   ErrVersionMismatch,
	protocol.CodeFenced:            ErrFenced,
	protocol.CodeTooLarge:          ErrTooLarge,
	protocol.CodeInvalidArgument:   ErrInvalidArgument,
	protocol.CodeUnavailable:       ErrUnavailable,
	protocol.CodeResourceExhausted: ErrResourceExhausted,
	protocol.CodePermissionDenied:  ErrPermissionDenied,
	protocol.CodeProtocol:          ErrProtocol,
	protocol.CodeClosed:            ErrClosed,
	protocol.CodeInternal:          ErrInternal,
	protocol.CodeCanceled:          ErrCanceled,
	protocol.CodeCompacted:         ErrCompacted,
	protocol.CodeLocked:            ErrLocked,
	// CodeNotLeader: the node does not lead its cluster. The client
	// follows the leader itself: Dial and every reconnection find the
	// node that leads among the endpoints given and those learned from the
	// cluster, or that a refusal names (see dial), and a session whose
	// node stops leading under a write, grant, revocation or keep-alive is
	// dropped for one with the next leader, on which writes, grants and
	// keep-alives are sent again (see write). Where the code still reaches
	// the caller, such as a revocation (its outcome unknown), a write that
	// is never sent twice, a Dial whose context ended before any node led,
	// or an Admin request, it means unavailable for now; Dial's and
	// Admin's errors name the leader in ServerError.Leader when a node
	// named one.
	protocol.CodeNotLeader: ErrUnavailable,
}

// ServerError is an error reported by the server. It unwraps to the
// sentinel for its code.
type ServerError struct {
	Code    protocol.Code
	Message string
	// Leader, with CodeNotLeader, is the client address of the node that
	// leads the cluster, if the server knew it. Only the errors of Dial and
	// of Admin carry it: a Client follows the leader itself.
	Leader string
	// Compacted, with CodeCompacted, is the compaction point of the
	// server's event history.
	Compacted uint64
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("leased: %s: %s", e.Code, e.Message)
}

// Unwrap returns the sentinel error for the code.
func (e *ServerError) Unwrap() error {
	if s, ok := codeErrors[e.Code]; ok {
		return s
	}
	return ErrInternal
}

func wireError(e *protocol.Error) error {
	return &ServerError{Code: e.Code, Message: e.Message, Compacted: e.Compacted}
}

// unexpected reports a reply of the wrong type.
func unexpected(m protocol.Message) error {
	if e, ok := m.(*protocol.Error); ok {
		return wireError(e)
	}
	return fmt.Errorf("%w: unexpected reply %s", ErrProtocol, m.Type())
}
