package protocol

// Code classifies an error that crosses the wire. The server maps its
// domain errors to codes in one table, and the client maps codes back to
// its exported sentinel errors in another.
type Code uint16

// Error codes. The zero value is not an error.
const (
	CodeOK                Code = 0
	CodeNotFound          Code = 1  // absence is an error here, e.g. release of an unknown write lease
	CodeVersionMismatch   Code = 2  // CompareAndSwap saw another version
	CodeFenced            Code = 3  // the write's fencing token is not the live one
	CodeTooLarge          Code = 4  // a key, value or frame over its limit
	CodeInvalidArgument   Code = 5  // a malformed argument, such as an empty key
	CodeUnavailable       Code = 6  // the server cannot serve this now; try again
	CodeResourceExhausted Code = 7  // a limit on sessions or requests in flight
	CodePermissionDenied  Code = 8  // not allowed
	CodeProtocol          Code = 9  // incompatible version or malformed message
	CodeClosed            Code = 10 // the server or session is closing
	CodeInternal          Code = 11 // a fault inside the server, such as a storage error
	CodeCanceled          Code = 12 // the write was abandoned before it committed; nothing changed
	CodeNotLeader         Code = 13 // this node does not lead its cluster; Error.Leader names the one that does, if known
	CodeCompacted         Code = 14 // the history no longer holds the revision asked for; Error.Compacted names its compaction point
	CodeLocked            Code = 15 // an acquisition that would not wait (AcquireTry) found the key locked
	codeLimit             Code = 16
)

var codeNames = [...]string{
	CodeOK:                "ok",
	CodeNotFound:          "not found",
	CodeVersionMismatch:   "version mismatch",
	CodeFenced:            "fenced",
	CodeTooLarge:          "too large",
	CodeInvalidArgument:   "invalid argument",
	CodeUnavailable:       "unavailable",
	CodeResourceExhausted: "resource exhausted",
	CodePermissionDenied:  "permission denied",
	CodeProtocol:          "protocol error",
	CodeClosed:            "closed",
	CodeInternal:          "internal error",
	CodeCanceled:          "canceled",
	CodeNotLeader:         "not the leader",
	CodeCompacted:         "compacted",
	CodeLocked:            "locked",
}

// String returns the code's name.
func (c Code) String() string {
	if c < codeLimit {
		return codeNames[c]
	}
	return "unknown code"
}

// Valid reports whether c is a known code.
func (c Code) Valid() bool { return c < codeLimit }
