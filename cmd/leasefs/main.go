// Command leasefs mounts a file system whose metadata lives in leased (see
// package leasefs): every mount of it, on any machine, sees one file
// system, and a change made through one mount is seen by the others as
// soon as it commits.
//
//	leasefs --mount /mnt/fs                       # against the local leased
//	leasefs --mount /mnt/fs --endpoints a:7400,b:7400,c:7400 --cacert ca.pem --data /shared/fs-data
//
// It runs in the foreground and unmounts on SIGINT or SIGTERM. It mounts
// through /dev/fuse directly, which needs root (CAP_SYS_ADMIN).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/internal/version"
	"github.com/leased/leased/leasefs"
)

// Exit statuses.
const (
	exitError = 1 // leased or the mount failed
	exitUsage = 2 // bad flags, or no FUSE here
)

// defaultEndpoint is the local leased that `go run ./cmd/leased` starts.
const defaultEndpoint = "127.0.0.1:7400"

type app struct {
	mount      string
	endpoints  string
	cacert     string
	cert, key  string
	serverData string
	data       string
	prefix     string
	name       string
	debug      bool
	kernelTTL  time.Duration
	stderr     io.Writer
}

func main() {
	a := &app{stderr: os.Stderr}
	cmd := a.command()
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "leasefs:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(exitUsage)
		}
		os.Exit(exitError)
	}
}

// usageError is a mistake of the caller's, or a machine without FUSE:
// exit status 2.
type usageError struct{ error }

func (a *app) command() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "leasefs --mount DIR",
		Short: "Mount a file system whose metadata lives in leased",
		Long: `leasefs mounts a file system whose metadata (inodes, directory entries,
symlinks) lives in leased, and whose file data lives in a folder that
every mount shares (--data). Several mounts, each its own leasefs
process, see one file system: lookups, stat and listings are answered
from the mount's read leases, and a change made through one mount is
seen by the others as soon as it commits. File data follows
close-to-open consistency: a reader that opens a file after a writer
closed it reads what was written.

The server's CA is found as leasectl finds it: --cacert, then
$` + layout.EnvCACert + `, then, for a local endpoint, the CA in
--server-data (leased-data/tls/ca.pem, where 'go run ./cmd/leased' keeps it).

leasefs runs in the foreground and unmounts on SIGINT or SIGTERM. It
mounts through /dev/fuse directly, which needs root.`,
		Example: `  leasefs --mount /mnt/fs
  leasefs --mount /mnt/fs --endpoints n1:7400,n2:7400,n3:7400 --cacert ca.pem --data /shared/fs-data`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.String(),
		RunE:          func(cmd *cobra.Command, _ []string) error { return a.run(cmd.Context()) },
	}
	f := cmd.Flags()
	f.StringVar(&a.mount, "mount", "", "the folder to mount the file system on (required)")
	f.StringVar(&a.endpoints, "endpoints", defaultEndpoint, "leased's address, host:port, or the nodes of a cluster, separated by commas")
	f.StringVar(&a.endpoints, "endpoint", defaultEndpoint, "the same as --endpoints")
	f.StringVar(&a.cacert, "cacert", "", "PEM file of the CA that signed the server's certificate (default: see above)")
	f.StringVar(&a.cert, "cert", "", "client certificate (PEM), for a server that requires one")
	f.StringVar(&a.key, "key", "", "private key (PEM) of --cert")
	f.StringVar(&a.serverData, "server-data", layout.DefaultDir, "the local server's data folder, to find its CA")
	f.StringVar(&a.data, "data", "leasefs-data", "the folder of file data, shared by every mount of the file system")
	f.StringVar(&a.prefix, "prefix", leasefs.DefaultPrefix, "the prefix of the file system's keys in leased")
	f.StringVar(&a.name, "name", "", "this mount's name in leased's logs (default leasefs:HOSTNAME)")
	f.BoolVar(&a.debug, "debug", false, "log every FUSE request")
	f.DurationVar(&a.kernelTTL, "kernel-ttl", 0, "let the kernel keep entries and attributes this long, without the leases' invalidations: answers may be stale for that long after another mount's change (for comparisons; 0 keeps every answer coherent)")
	f.MarkHidden("kernel-ttl")
	return cmd
}

func (a *app) run(ctx context.Context) error {
	if a.mount == "" {
		return usageError{errors.New("--mount DIR is required")}
	}
	if !strings.HasSuffix(a.prefix, "/") {
		return usageError{fmt.Errorf("--prefix %q must end with /", a.prefix)}
	}
	if err := leasefs.CheckFUSE(); err != nil {
		return usageError{err}
	}
	mount, err := filepath.Abs(a.mount)
	if err != nil {
		return usageError{err}
	}
	if err := leasefs.UnmountStale(mount); err != nil {
		return err
	}
	if fi, err := os.Stat(mount); err != nil || !fi.IsDir() {
		return usageError{fmt.Errorf("--mount %s is not a folder", mount)}
	}
	first, _, _ := strings.Cut(a.endpoints, ",")
	ca, local := layout.FindCA(first, a.serverData, a.cacert, os.Getenv(layout.EnvCACert))
	if ca == "" {
		if local {
			return usageError{fmt.Errorf("no CA certificate: pass --cacert, or run leasefs where leased keeps its data (%s), or set %s", layout.CAPath(a.serverData), layout.EnvCACert)}
		}
		return usageError{fmt.Errorf("no CA certificate for %s: pass --cacert, or set %s", a.endpoints, layout.EnvCACert)}
	}
	log := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	name := a.name
	if name == "" {
		host, _ := os.Hostname()
		name = "leasefs:" + host
	}
	cfg := client.Config{CAFile: ca, CertFile: a.cert, KeyFile: a.key, Name: name, Logger: log}
	mountCtx, cancel := context.WithTimeout(ctx, mountWait)
	m, err := leasefs.Mount(mountCtx, mount, a.endpoints, cfg,
		leasefs.Options{Data: a.data, Prefix: a.prefix, Logger: log, KernelTTL: a.kernelTTL}, a.debug)
	cancel()
	if err != nil {
		return err
	}
	log.Info("leasefs mounted", "mount", mount, "endpoints", a.endpoints, "data", a.data, "prefix", a.prefix)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { m.Server.Wait(); close(done) }()
	for {
		select {
		case <-done:
			log.Info("leasefs unmounted", "mount", mount)
			return m.Client.Close()
		case s := <-sigs:
			log.Info("unmounting", "signal", s.String())
			if err := m.Server.Unmount(); err != nil {
				// Busy: detach it, so that it goes once its last user
				// lets go; the mount serves them until then.
				log.Warn("the mount is busy; detaching it", "err", err)
				if err := syscall.Unmount(mount, syscall.MNT_DETACH); err != nil {
					log.Error("detaching the mount", "err", err)
				}
			}
		}
	}
}

// mountWait bounds the wait for leased, and for the root's creation, at
// start.
const mountWait = 30 * time.Second
