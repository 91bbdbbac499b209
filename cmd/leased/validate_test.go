package main

import (
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/server"
)

// TestConfigFlags: every field that configFlags names is a field of
// server.Config, or of a field of it, and every flag is one of leased's.
func TestConfigFlags(t *testing.T) {
	flags := newRootCmd(io.Discard, nil, nil).Flags()
	for field, flag := range configFlags {
		if !isConfigField(field) {
			t.Errorf("configFlags: %s is not a field of server.Config", field)
		}
		if !strings.HasPrefix(flag, "--") || flags.Lookup(strings.TrimPrefix(flag, "--")) == nil {
			t.Errorf("configFlags: %s of %s is not a flag of leased", flag, field)
		}
	}
}

// isConfigField reports whether path names a field of server.Config, or a
// field of a field of it ("TTL.MaxTTL", "Cluster.Replica.ElectionTimeout").
func isConfigField(path string) bool {
	typ := reflect.TypeFor[server.Config]()
	for name := range strings.SplitSeq(path, ".") {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct {
			return false
		}
		f, ok := typ.FieldByName(name)
		if !ok {
			return false
		}
		typ = f.Type
	}
	return true
}

// TestFlagsOf: the flags of the fields an error of server.Config.Validate
// names, a sibling of the first field included.
func TestFlagsOf(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want []string
	}{
		{"MaxValueSize 73400320 is over the limit of 66060288 bytes (63 MiB)", []string{"--max-value-size"}},
		{"TTL.MinTTL 1h0m0s is above MaxTTL 1m0s", []string{"--ttl-min", "--ttl-max"}},
		{"MaxTotalInflightBytes 100 is less than MaxValueSize 1 plus MaxKeySize 4096: a write of the largest key and value could never be taken", []string{"--max-total-inflight-bytes", "--max-value-size"}},
		{"Cluster.Replica.CommitTimeout 201ms is longer than HeartbeatTimeout 200ms: followers would learn of commits more slowly", []string{"--commit-timeout", "--heartbeat-timeout"}},
		{"TTL.MinTTL 1s is shorter than three times Cluster.Replica.ElectionTimeout (3s): a TTL lease must outlive a failover", []string{"--ttl-min", "--election-timeout"}},
		{`PrefixTerms: prefix "/a" is given twice`, []string{"--term"}},
		{"MetricsPprof: profiles are served on the metrics listener: set MetricsListen too", []string{"--metrics-pprof", "--metrics-listen"}},
		{"Cluster.Name is empty", []string{"--name"}},
		{"", nil},
	} {
		if got := flagsOf(tc.msg); !slices.Equal(got, tc.want) {
			t.Errorf("flagsOf(%q) = %q, want %q", tc.msg, got, tc.want)
		}
	}
}

// TestValidateByConfig: what a value means is the server's Config's to
// check: its error names the flag and the field, and is a usage error,
// found before anything is created. A node's shortest TTL is checked
// against its election timeout, which only the server's Config knows of.
func TestValidateByConfig(t *testing.T) {
	for _, tc := range []struct {
		change func(*options)
		want   string
	}{
		{func(o *options) { o.maxValueSize = 70 << 20 }, "--max-value-size: MaxValueSize 73400320 is over the limit of 66060288 bytes (63 MiB)"},
		{func(o *options) { o.maxSessions = -1 }, "--max-sessions: MaxSessions -1 is negative"},
		{func(o *options) { o.ttlRevokeRate = 1e9 + 1 }, "--ttl-revoke-rate: TTL.MaxRevokesPerSecond 1000000001 is outside 0..1000000000"},
		{func(o *options) { o.frameTimeout = 2 * time.Hour }, "--frame-timeout: FrameTimeout 2h0m0s is outside 0..1h0m0s"},
		{func(o *options) { o.metricsPprof = true }, "--metrics-pprof, --metrics-listen: MetricsPprof: profiles are served on the metrics listener: set MetricsListen too"},
		{func(o *options) { o.maxTotalInflightBytes = 100 }, "--max-total-inflight-bytes, --max-value-size: MaxTotalInflightBytes 100 is less than MaxValueSize 1 plus MaxKeySize"},
		{func(o *options) { cluster(o); o.ttlMin = 500 * time.Millisecond }, "--ttl-min, --election-timeout: TTL.MinTTL 500ms is shorter than three times Cluster.Replica.ElectionTimeout (600ms)"},
	} {
		o := goodOptions()
		tc.change(o)
		err := o.validate()
		if _, ok := err.(usageError); !ok || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("got %v, want a usage error beginning %q", err, tc.want)
		}
	}
}
