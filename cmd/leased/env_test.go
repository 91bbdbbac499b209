package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/wait"
)

// parseWithEnv parses args as leased's command line and then applies
// environ, as the root command does before it runs the server.
func parseWithEnv(t *testing.T, args, environ []string) (*cobra.Command, envFlags, error) {
	t.Helper()
	cmd := newRootCmd(io.Discard, nil, environ)
	// As cobra does before it parses the command line.
	cmd.InitDefaultHelpFlag()
	cmd.InitDefaultVersionFlag()
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	ef, err := applyEnv(cmd.Flags(), environ)
	return cmd, ef, err
}

func TestApplyEnv(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		environ []string
		want    map[string]string // flag → its value's String
		used    []string          // variables used
		unknown []string
	}{
		{
			name:    "scalars",
			environ: []string{"LEASED_LISTEN=127.0.0.1:7500", "LEASED_LEASE_TERM=3s", "LEASED_MAX_SESSIONS=7", "LEASED_QUOTA_BYTES=0"},
			want:    map[string]string{"listen": "127.0.0.1:7500", "lease-term": "3s", "max-sessions": "7", "quota-bytes": "0"},
			used:    []string{"LEASED_LEASE_TERM", "LEASED_LISTEN", "LEASED_MAX_SESSIONS", "LEASED_QUOTA_BYTES"},
		},
		{
			name:    "the flag wins",
			args:    []string{"--lease-term", "2s", "--term", "/x/=1s", "--tls-host", "c.example.com"},
			environ: []string{"LEASED_LEASE_TERM=3s", "LEASED_TERM=/hot/=1s", "LEASED_TLS_HOST=a.example.com", "LEASED_EPSILON=150ms"},
			want:    map[string]string{"lease-term": "2s", "term": "[/x/=1s]", "tls-host": "[c.example.com]", "epsilon": "150ms"},
			used:    []string{"LEASED_EPSILON"},
		},
		{
			name:    "an empty variable is unset",
			environ: []string{"LEASED_DATA=", "LEASED_LEASE_TERM="},
			want:    map[string]string{"data": "leased-data", "lease-term": "10s"},
		},
		{
			name:    "repeatable flags split on commas",
			environ: []string{"LEASED_TERM=/hot/=1s, /cold/=1m,", "LEASED_TLS_HOST=a.example.com,10.0.0.1", "LEASED_PEER_ROUTE=n2=127.0.0.1:9"},
			want:    map[string]string{"term": "[/hot/=1s,/cold/=1m]", "tls-host": "[a.example.com,10.0.0.1]", "peer-route": "[n2=127.0.0.1:9]"},
			used:    []string{"LEASED_PEER_ROUTE", "LEASED_TERM", "LEASED_TLS_HOST"},
		},
		{
			name:    "hidden test flags only from the command line",
			environ: []string{"LEASED_UNSAFE_SKIP_HORIZON_WAIT=true", "LEASED_WAL_SEGMENT_SIZE=4096"},
			want:    map[string]string{"unsafe-skip-horizon-wait": "false", "wal-segment-size": "0"},
		},
		{
			name:    "unknown and foreign variables",
			environ: []string{"LEASED_LEASETERM=3s", "LEASED_HELP=true", "LEASED_VERSION=true", "HOME=/root", "LEASED", "LEASED_LISTEN"},
			want:    map[string]string{"lease-term": "10s", "help": "false", "version": "false"},
			unknown: []string{"LEASED_LEASETERM"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, ef, err := parseWithEnv(t, tt.args, tt.environ)
			if err != nil {
				t.Fatal(err)
			}
			for flag, want := range tt.want {
				f := cmd.Flags().Lookup(flag)
				if got := f.Value.String(); got != want {
					t.Errorf("--%s = %q, want %q", flag, got, want)
				}
			}
			if got := ef.names(); !slices.Equal(got, tt.used) {
				t.Errorf("used %q, want %q", got, tt.used)
			}
			if !slices.Equal(ef.unknown, tt.unknown) {
				t.Errorf("unknown %q, want %q", ef.unknown, tt.unknown)
			}
		})
	}
}

// TestEveryFlagFromEnv checks that every flag of the server, but the
// hidden ones, can come from its variable, and that --help names it.
func TestEveryFlagFromEnv(t *testing.T) {
	cmd := newRootCmd(io.Discard, nil, nil)
	var environ, want []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		v := f.DefValue
		if _, ok := f.Value.(pflag.SliceValue); ok || v == "" {
			v = "x"
		}
		environ = append(environ, envName(f.Name)+"="+v)
		want = append(want, envName(f.Name))
	})
	if len(want) < 40 {
		t.Fatalf("only %d flags: %q", len(want), want)
	}
	_, ef, err := parseWithEnv(t, nil, environ)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	if got := ef.names(); !slices.Equal(got, want) {
		t.Errorf("variables used:\n%q\nwant:\n%q", got, want)
	}

	var out bytes.Buffer
	if code := execute([]string{"--help"}, nil, &out, io.Discard, nil); code != 0 {
		t.Fatalf("--help: status %d", code)
	}
	for _, name := range want {
		if !strings.Contains(out.String(), "[$"+name+"]") {
			t.Errorf("--help does not name $%s", name)
		}
	}
	for _, s := range []string{"LEASED_LEASE_TERM", "commas", "command line wins"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("--help does not say %q", s)
		}
	}
}

// TestEnvBadValue checks that a bad value in the environment is a usage
// error (status 2) that names the variable, whether the flag refuses it or
// the validation of the options does, and that no server starts.
func TestEnvBadValue(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	tests := []struct {
		environ []string
		want    string
	}{
		{[]string{"LEASED_LEASE_TERM=soon"}, `environment variable LEASED_LEASE_TERM="soon": invalid value for --lease-term`},
		{[]string{"LEASED_MAX_SESSIONS=many"}, `LEASED_MAX_SESSIONS="many"`},
		{[]string{"LEASED_RETRY_HANDSHAKES=1.5"}, `LEASED_RETRY_HANDSHAKES="1.5"`},
		{[]string{"LEASED_EPSILON=-1ms"}, "--epsilon: Epsilon -1ms is negative (--epsilon came from $LEASED_EPSILON)"},
		{[]string{"LEASED_CACERT=" + filepath.Join(dir, "ca.pem")}, "--cacert is for a node of a cluster: give --peer-listen too (--cacert came from $LEASED_CACERT)"},
		{[]string{"LEASED_TERM=/a/=1s,/a/=2s"}, `prefix "/a/" is given twice (--term came from $LEASED_TERM)`},
		{[]string{"LEASED_LISTEN=nowhere"}, `--listen "nowhere"`},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := execute([]string{"--data", data}, tt.environ, &stdout, &stderr, nil)
		if code != exitUsage || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%q: status %d, stderr %q; want status %d and %q", tt.environ, code, stderr.String(), exitUsage, tt.want)
		}
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "*")); len(matches) > 0 {
		t.Errorf("a bad environment left files: %q", matches)
	}
}

func TestExplainOnlyNamedFlags(t *testing.T) {
	ef := envFlags{used: map[string]string{"listen": "LEASED_LISTEN", "cert": "LEASED_CERT"}}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{usagef("--peer-listen %q: want host:port", "x"), `--peer-listen "x": want host:port`},
		{usagef("--certificate is odd"), "--certificate is odd"},
		{usagef("--cacert, --cert and --key go together"), "--cacert, --cert and --key go together (--cert came from $LEASED_CERT)"},
		{errors.New("--listen in use"), "--listen in use"},
	} {
		got := ef.explain(tt.err)
		if got.Error() != tt.want {
			t.Errorf("explain(%q) = %q, want %q", tt.err, got, tt.want)
		}
		var ue usageError
		if errors.As(tt.err, &ue) != errors.As(got, &ue) {
			t.Errorf("explain(%q) changed whether it is a usage error", tt.err)
		}
	}
}

// TestServerFromEnv starts the real binary configured by the environment
// alone, but for one flag that wins over its variable, and checks what it
// serves with.
func TestServerFromEnv(t *testing.T) {
	t.Parallel()
	port, err := clitest.FreeUDPPort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	data := filepath.Join(t.TempDir(), "data")
	p := clitest.Cmd{Env: []string{
		"LEASED_LISTEN=" + addr, "LEASED_DATA=" + data, "LEASED_LEASE_TERM=3s",
		"LEASED_EPSILON=150ms", "LEASED_TERM=/hot/=1s,/cold/=0s", "LEASED_LOG_FORMAT=json",
	}}.Start(t, bins.Leased, "--epsilon", "200ms")
	wait.For(t, clitest.ReadyTimeout, "leased to log its start", func() bool {
		return strings.Contains(p.Stderr.String(), `"msg":"leased started"`)
	})
	stop := func() {
		p.Signal(t, syscall.SIGTERM)
		if code := p.Wait(t, clitest.ExitTimeout); code != 0 {
			t.Errorf("leased exited with status %d\nstderr: %s", code, p.Stderr.String())
		}
	}
	defer stop()
	if !strings.Contains(p.Stderr.String(), `"vars":"LEASED_DATA,LEASED_LEASE_TERM,LEASED_LISTEN,LEASED_LOG_FORMAT,LEASED_TERM"`) {
		t.Errorf("start-up log does not name the variables used:\n%s", p.Stderr.String())
	}
	ca := filepath.Join(data, "tls", "ca.pem")
	deadline := time.Now().Add(clitest.ReadyTimeout)
	var r clitest.Result
	for {
		r = clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoint", addr, "--cacert", ca, "--timeout", "2s", "-o", "json", "status")
		if r.Code == 0 || time.Now().After(deadline) {
			break
		}
	}
	if r.Code != 0 || !strings.Contains(r.Stdout, `"default_term_seconds":3,`) || !strings.Contains(r.Stdout, `"epsilon_seconds":0.2,`) {
		t.Fatalf("status of the server from the environment: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	// The prefix terms came through: a write lease under /hot/ has its
	// term, one elsewhere the default from LEASED_LEASE_TERM.
	for key, want := range map[string]string{"/hot/k": `"term_seconds":1}`, "k": `"term_seconds":3}`} {
		r := clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoint", addr, "--cacert", ca, "-o", "json", "write-lease", key)
		if r.Code != 0 || !strings.Contains(r.Stdout, want) {
			t.Errorf("write-lease %s: %d %s %s, want %s", key, r.Code, r.Stdout, r.Stderr, want)
		}
	}
}
