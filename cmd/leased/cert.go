package main

// This file holds `leased cert` and its subcommands, which make the
// certificates of a cluster.

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leased/leased/internal/tlsfiles"
)

// newCertCmd builds `leased cert` and its subcommands, which make the
// certificates of a cluster (DESIGN.md §13) with package tlsfiles. Each
// prints the files it wrote, one a line. A file that exists is never
// replaced: the command fails (status 1) and names it. Missing flags, a bad
// name or a bad host are a bad command line (status 2).
func newCertCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Make the CA, node and client certificates of a cluster",
		Long: `The cert subcommands make the certificates of a cluster.

create-ca makes the CA that every node and client trusts. create-node issues
a node certificate from it: a node serves clients and peers and dials peers
with it, and peers verify it against the address they dial, so --host must
name every address and host name other nodes and clients use to reach it,
within the names the CA permits (create-ca --permit-host).
create-client issues a client certificate, whose name is the client's
identity; it cannot serve, nor join the peer network.

A name (--name) is 1 to 64 letters, digits, '.', '_' and '-', starting with a
letter or digit, and not "ca". No file is ever replaced. Private keys are
written with mode 0600.

Exit status: 0 when the files are written; 1 when they cannot be, such as
when one exists already (it is named, and nothing is written), or when the
CA in --ca-dir cannot be read or used; 2 for a bad command line: a missing
flag, a bad name, or a --host or --permit-host that is malformed or that the
CA does not permit.`,
		Example: `  leased cert create-ca --dir ./ca
  leased cert create-node --ca-dir ./ca --name n1 --host n1.example.com --host 10.0.0.1 --out ./n1
  leased cert create-client --ca-dir ./ca --name app --out ./app`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return usagef("%s needs a subcommand: create-ca, create-node or create-client", cmd.CommandPath())
		},
	}
	cmd.AddCommand(newCreateCACmd(), newCreateNodeCmd(), newCreateClientCmd())
	return cmd
}

// newCreateCACmd builds `leased cert create-ca`.
func newCreateCACmd() *cobra.Command {
	var dir string
	var permit []string
	cmd := &cobra.Command{
		Use:   "create-ca --dir DIR [--permit-host HOST ...]",
		Short: "Create a cluster CA: DIR/ca.pem and DIR/ca-key.pem",
		Long: `create-ca creates a new cluster CA (ECDSA P-256, valid 10 years) in DIR,
which it creates if missing: ca.pem, the certificate every node and client
trusts, and ca-key.pem, the private key that create-node and create-client
sign with. Keep ca-key.pem secret: only a node that issues its own
certificate needs it.

--permit-host limits the names the CA may sign for (critical X.509 name
constraints): a DNS name permits itself and every name under it, an IP
address itself, and a range such as 10.0.0.0/8 its addresses; localhost,
127.0.0.1 and ::1 are always permitted, since every node certificate names
them. Clients then refuse a certificate from this CA for any other name,
even one signed with a stolen ca-key.pem, and create-node refuses to issue
one. Without --permit-host the CA may sign for any name.

Exit statuses: see "leased cert --help".`,
		Example: `  leased cert create-ca --dir ./ca
  leased cert create-ca --dir ./ca --permit-host db.example.com --permit-host 10.0.0.0/8`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required("--dir", dir); err != nil {
				return err
			}
			for _, h := range permit {
				if strings.TrimSpace(h) == "" {
					return usagef("--permit-host must not be empty")
				}
			}
			if err := tlsfiles.CreateCA(dir, permit...); err != nil {
				return certError(err)
			}
			return printFiles(cmd.OutOrStdout(), filepath.Join(dir, tlsfiles.CAFileName), filepath.Join(dir, tlsfiles.CAKeyFileName))
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "folder to create the CA in (created if missing)")
	cmd.Flags().StringArrayVar(&permit, "permit-host", nil, "DNS name (with every name under it), IP address or CIDR range the CA may sign for (repeatable, one a flag; default: any name)")
	return cmd
}

// newCreateNodeCmd builds `leased cert create-node`.
func newCreateNodeCmd() *cobra.Command {
	var caDir, name, out string
	var hosts []string
	cmd := &cobra.Command{
		Use:   "create-node --ca-dir DIR --name NAME [--host HOST ...] --out DIR",
		Short: "Issue a node certificate: OUT/NAME.pem and OUT/NAME-key.pem",
		Long: `create-node issues a node certificate from the CA in --ca-dir and writes it
and its key to --out, as NAME.pem and NAME-key.pem. It is valid for server and
client authentication, names localhost, 127.0.0.1, ::1 and every --host, and
expires after 825 days, or with the CA if that is sooner.

Exit statuses: see "leased cert --help".`,
		Example: `  leased cert create-node --ca-dir ./ca --name n1 --host n1.example.com --host 10.0.0.1 --out ./n1`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range [][2]string{{"--ca-dir", caDir}, {"--name", name}, {"--out", out}} {
				if err := required(f[0], f[1]); err != nil {
					return err
				}
			}
			for _, h := range hosts {
				if strings.TrimSpace(h) == "" {
					return usagef("--host must not be empty")
				}
			}
			cert, key, err := tlsfiles.IssueNode(caDir, out, name, hosts)
			if err != nil {
				return certError(err)
			}
			return printFiles(cmd.OutOrStdout(), cert, key)
		},
	}
	f := cmd.Flags()
	f.StringVar(&caDir, "ca-dir", "", "folder of the CA (ca.pem and ca-key.pem)")
	f.StringVar(&name, "name", "", "node name: the certificate's CommonName and file names (1 to 64 letters, digits, '.', '_', '-')")
	f.StringArrayVar(&hosts, "host", nil, "host name or IP address that peers and clients reach the node at (repeatable, one a flag)")
	f.StringVar(&out, "out", "", "folder to write the certificate and key in (created if missing)")
	return cmd
}

// newCreateClientCmd builds `leased cert create-client`.
func newCreateClientCmd() *cobra.Command {
	var caDir, name, out string
	cmd := &cobra.Command{
		Use:   "create-client --ca-dir DIR --name NAME --out DIR",
		Short: "Issue a client certificate: OUT/NAME.pem and OUT/NAME-key.pem",
		Long: `create-client issues a client certificate from the CA in --ca-dir and writes
it and its key to --out, as NAME.pem and NAME-key.pem. It is valid for client
authentication only, its CommonName NAME is the client's identity, and it
expires after 825 days, or with the CA if that is sooner.

A leased takes it if the CA is its --client-ca (a node of a cluster: its
cluster CA by default). Under an access policy (--auth-policy), NAME is the
identity the policy grants rights to: read, write, write-lease and ttl-lease
on key prefixes; "admin: true" to change the members of a cluster, save
snapshots, use other clients' TTL leases and read the metrics; "metrics:
true" for the metrics alone.

Exit statuses: see "leased cert --help".`,
		Example: `  leased cert create-client --ca-dir ./ca --name app --out ./app`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range [][2]string{{"--ca-dir", caDir}, {"--name", name}, {"--out", out}} {
				if err := required(f[0], f[1]); err != nil {
					return err
				}
			}
			cert, key, err := tlsfiles.IssueClient(caDir, out, name)
			if err != nil {
				return certError(err)
			}
			return printFiles(cmd.OutOrStdout(), cert, key)
		},
	}
	f := cmd.Flags()
	f.StringVar(&caDir, "ca-dir", "", "folder of the CA (ca.pem and ca-key.pem)")
	f.StringVar(&name, "name", "", "client name: the certificate's CommonName, file names and identity (1 to 64 letters, digits, '.', '_', '-')")
	f.StringVar(&out, "out", "", "folder to write the certificate and key in (created if missing)")
	return cmd
}

// certError makes a bad name or host from tlsfiles a bad command line.
func certError(err error) error {
	if errors.Is(err, tlsfiles.ErrBadName) || errors.Is(err, tlsfiles.ErrBadHost) {
		return usageError{err}
	}
	return err
}

// printFiles prints the paths of the files a cert command wrote.
func printFiles(w io.Writer, paths ...string) error {
	for _, p := range paths {
		if _, err := fmt.Fprintln(w, p); err != nil {
			return err
		}
	}
	return nil
}
