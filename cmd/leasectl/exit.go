package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/leased/leased/client"
)

// Exit statuses. exitStatuses says what each means.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitUnavailable = 3
	exitNotFound    = 4
	exitConflict    = 5
	exitLockLost    = 6
	exitInterrupted = 130
)

// exitStatus is one row of the table of exit statuses.
type exitStatus struct {
	code    int
	meaning string
}

// exitStatuses is leasectl's one table of exit statuses. "leasectl --help"
// prints it (exitStatusHelp), README.md's leasectl section holds it
// (exitStatusMarkdown; TestREADMEExitStatuses keeps the two the same),
// exitCode maps every error to one of its rows, and TestExitStatusTable
// brings the real binary to each row.
var exitStatuses = []exitStatus{
	{exitOK, "success"},
	{exitError, "an error that no other status covers, such as a permission the server's access policy does not grant, or its NOSPACE alarm"},
	{exitUsage, "bad command line: an unknown command or flag, a malformed argument, or one the server refuses as invalid " +
		"(a TTL out of its range, a key or value over its limit, a member command it cannot take); a file that cannot be used, " +
		"checked before connecting: no CA found, a CA, certificate or key file that cannot be read, a snapshot file that " +
		"cannot be written; or TLS files that do not fit the server: a CA that did not sign " +
		"the server's certificate, a certificate that does not name the endpoint's host, or a client certificate the server " +
		"requires or refuses"},
	{exitUnavailable, "unavailable: the server could not be reached or did not answer within --timeout; " +
		"endpoint status and endpoint health: an endpoint did not answer, or is unhealthy"},
	{exitNotFound, `not found: get of a missing key (table output; with -o json get prints "found": false and exits 0), ` +
		"or a lease or member that does not exist"},
	{exitConflict, "conflict: cas saw another version, a write was fenced (--guard, queue complete and fail), or a held write lease was lost"},
	{exitLockLost, "lock lost or token not current: lock's lock was lost while its COMMAND ran (COMMAND was stopped), " +
		"or elect's leadership was lost; check-token: TOKEN is not the current token of the lock"},
	{exitInterrupted, "interrupted by Ctrl-C or SIGTERM (lease keep-alive, watch, elect and write-lease --hold end with 0; " +
		"lock, once its COMMAND runs, exits with COMMAND's status)"},
}

// exitStatusHelp returns the "Exit status:" section of the root command's
// help, made from exitStatuses.
func exitStatusHelp() string {
	const indent, width = 7, 80
	var b strings.Builder
	b.WriteString("Exit status:")
	for _, s := range exitStatuses {
		code := strconv.Itoa(s.code)
		b.WriteString("\n  " + code + strings.Repeat(" ", indent-2-len(code)))
		col := indent
		for i, w := range strings.Fields(s.meaning) {
			if i > 0 && col+1+len(w) > width {
				b.WriteString("\n" + strings.Repeat(" ", indent))
				col = indent
			} else if i > 0 {
				b.WriteString(" ")
				col++
			}
			b.WriteString(w)
			col += len(w)
		}
	}
	return b.String()
}

// exitStatusMarkdown returns exitStatuses as the Markdown table that
// README.md holds.
func exitStatusMarkdown() string {
	var b strings.Builder
	b.WriteString("| Status | Meaning |\n| --- | --- |\n")
	for _, s := range exitStatuses {
		fmt.Fprintf(&b, "| %d | %s |\n", s.code, s.meaning)
	}
	return b.String()
}

// exitCode returns the exit status for err, a row of exitStatuses.
func (a *app) exitCode(err error) int {
	var ce *cliError
	switch {
	case errors.As(err, &ce):
		return ce.code
	case a.interrupted(err):
		return exitInterrupted
	case refusesCommandLine(err):
		return exitUsage
	case errors.Is(err, errKeyNotFound), errors.Is(err, client.ErrNotFound):
		return exitNotFound
	case errors.Is(err, errLockLost), errors.Is(err, errNotCurrent):
		return exitLockLost
	case errors.Is(err, client.ErrVersionMismatch), errors.Is(err, client.ErrFenced), errors.Is(err, errLeaseLost):
		return exitConflict
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return exitUnavailable
	case errors.Is(err, client.ErrCanceled):
		// The write was abandoned when --timeout ran out (an interrupt
		// is told apart above): whether the server said so first or
		// the context ended first is a race, and both are no answer in
		// time.
		return exitUnavailable
	}
	return exitError
}

// refusesCommandLine reports whether err says that the command line, as
// given, cannot work with this server, whatever else happens: the server
// refused an argument as invalid or too large, or the TLS files do not fit
// it (its certificate is not verified by the CA, or it does not take the
// client certificate). Retrying does not help; such an error is a usage
// error (status 2).
func refusesCommandLine(err error) bool {
	return isCertError(err) || errors.Is(err, client.ErrUnauthenticated) ||
		errors.Is(err, client.ErrInvalidArgument) || errors.Is(err, client.ErrTooLarge)
}

// isCertError reports whether err is a failure to verify the server's
// certificate.
func isCertError(err error) bool {
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var verifyErr *tls.CertificateVerificationError
	return errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &verifyErr)
}
