package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// etcdctlElsewhere says, for each etcdctl command that leasectl does not
// have, in one sentence, where leased does the same work, or that it has
// none. A key is the command line after the program's name: a command and
// its subcommand ("snapshot restore"), or a command alone ("auth"), which
// stands for all of its subcommands.
var etcdctlElsewhere = map[string]string{
	"snapshot restore": `A snapshot is restored by the server's binary: "leased restore FILE --data DIR" makes the data folder of a new node from FILE.`,
	"snapshot status":  `A snapshot file is checked by the server's binary: "leased snapshot status FILE".`,
	"move-leader":      `To hand the lead to another member, run "leasectl member transfer NAME".`,
	"member update":    `leased cannot change a member's peer address: remove the member ("leasectl member remove NAME") and add a node under a new name at the new address ("leasectl member add NAME PEER_ADDR").`,
	"member promote":   `leased has no learners to promote: "leasectl member add" adds a voter.`,
	"endpoint hashkv":  `leased keeps no hash of its keys; "leasectl endpoint status" shows each node's commit and applied index.`,
	"auth":             authElsewhere,
	"user":             authElsewhere,
	"role":             authElsewhere,
	"defrag":           `leased has no defrag: its database reclaims the space of overwritten and deleted values by itself.`,
	"alarm":            `leased has no alarm command: "leasectl status" and "leasectl endpoint health" show the NOSPACE alarm, which clears by itself once the data folder has room again.`,
	"make-mirror":      `leased has no make-mirror: copy a cluster's keys with "leasectl snapshot save FILE" and "leased restore FILE".`,
	"check":            `leased has no check: leasebench (cmd/leasebench) measures read and write latency against the lease term.`,
}

const authElsewhere = `leased has no users, roles or passwords: a client is known by its TLS certificate ("leased cert create-client"), and the server's access policy ("leased --auth-policy FILE") says what each may do.`

// unknownCommand is the Args of every command that has subcommands (set
// by newRootCmd): without arguments the command prints its help; with
// any, the first names no subcommand (cobra has found none), and it
// returns a usage error that says so, says where leased does what the
// etcdctl command of that name does (etcdctlElsewhere), or else suggests
// a command of a similar name, and lists the command's subcommands.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	path := cmd.CommandPath()
	msg := fmt.Sprintf("unknown command %q for %q", args[0], path)
	// The command line after "leasectl", such as "snapshot restore".
	words := append(strings.Fields(path)[1:], args[0])
	if where, ok := etcdctlElsewhere[strings.Join(words, " ")]; ok {
		msg += "\n" + where
	} else if s := cmd.SuggestionsFor(args[0]); len(s) > 0 && args[0] != "" {
		for i := range s {
			s[i] = fmt.Sprintf("%q", s[i])
		}
		msg += fmt.Sprintf("; did you mean %s?", strings.Join(s, " or "))
	}
	msg += fmt.Sprintf("\nThe commands of %s: %s.", path, strings.Join(names, ", "))
	return &cliError{code: exitUsage, err: fmt.Errorf("%s", msg), help: path}
}
