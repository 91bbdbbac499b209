package server

import (
	"errors"
	"unicode/utf8"

	"github.com/leased/leased/auth"
	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/diskguard"
	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/node"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("leased: server closed")

// Domain errors of the server. They reach clients as codes through
// errorCodes, the one table that maps errors to codes.
var (
	errTooLarge          = errors.New("too large")
	errInvalidArgument   = errors.New("invalid argument")
	errResourceExhausted = errors.New("resource exhausted")
	errProtocol          = errors.New("protocol error")
	errCanceled          = core.ErrCanceled
	errClosed            = core.ErrClosed
	errInternal          = core.ErrInternal
	errUnavailable       = core.ErrUnavailable
	errNotFound          = errors.New("not found")
)

// errorCodes maps domain errors to wire codes. Errors not listed are
// CodeInternal.
var errorCodes = []struct {
	err  error
	code protocol.Code
}{
	{auth.ErrPermissionDenied, protocol.CodePermissionDenied},
	{store.ErrVersionMismatch, protocol.CodeVersionMismatch},
	{store.ErrAnswered, protocol.CodeInvalidArgument},
	{leasetable.ErrFenced, protocol.CodeFenced},
	{store.ErrFenced, protocol.CodeFenced},
	{core.ErrLocked, protocol.CodeLocked},
	{leasetable.ErrNotFound, protocol.CodeNotFound},
	{leasetable.ErrUnknownSession, protocol.CodeClosed},
	{errTooLarge, protocol.CodeTooLarge},
	{protocol.ErrFrameTooLarge, protocol.CodeTooLarge},
	{errInvalidArgument, protocol.CodeInvalidArgument},
	{errNotFound, protocol.CodeNotFound},
	{store.ErrCompacted, protocol.CodeCompacted},
	{errResourceExhausted, protocol.CodeResourceExhausted},
	{core.ErrLeaseLimit, protocol.CodeResourceExhausted},
	{leasetable.ErrWriteLeaseLimit, protocol.CodeResourceExhausted},
	{errProtocol, protocol.CodeProtocol},
	{protocol.ErrMalformed, protocol.CodeProtocol},
	{core.ErrNotLeader, protocol.CodeNotLeader},
	{errCanceled, protocol.CodeCanceled},
	{errClosed, protocol.CodeClosed},
	{diskguard.ErrNoSpace, protocol.CodeResourceExhausted},
	{diskguard.ErrNotWritable, protocol.CodeResourceExhausted},
	{store.ErrNotWritable, protocol.CodeResourceExhausted},
	{diskguard.ErrFolderLost, protocol.CodeInternal},
	{errInternal, protocol.CodeInternal},
	{errUnavailable, protocol.CodeUnavailable},
	{node.ErrNotLeader, protocol.CodeNotLeader},
	{node.ErrUnknownMember, protocol.CodeNotFound},
	{node.ErrInvalidArgument, protocol.CodeInvalidArgument},
	{store.ErrLeaseNotFound, protocol.CodeNotFound},
	{store.ErrLeaseFull, protocol.CodeResourceExhausted},
	{store.ErrInvalidCommand, protocol.CodeInvalidArgument},
	{core.ErrTTLOutOfRange, protocol.CodeInvalidArgument},
	{core.ErrTTLLeaseLimit, protocol.CodeResourceExhausted},
	{core.ErrInvalidArgument, protocol.CodeInvalidArgument},
	{core.ErrFutureRevision, protocol.CodeInvalidArgument},
}

// codeOf returns the wire code for err.
func codeOf(err error) protocol.Code {
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return protocol.CodeInternal
}

// maxErrorMessage bounds the message of an Error reply. Messages quote
// keys, which may be long and, quoted, four times longer; a reply must stay
// well within the frame limit a client reads with.
const maxErrorMessage = 1024

// errorReply builds the Error reply for request id.
func errorReply(id uint64, err error) *protocol.Error {
	return &protocol.Error{ID: id, Code: codeOf(err), Message: shorten(err.Error(), maxErrorMessage)}
}

// shorten cuts s to at most n bytes, on a rune boundary, and marks the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
