package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/diskguard"
	"github.com/leased/leased/lessor"
	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// TestConfigDefaults: every field of Config is known here, with a value
// that withDefaults must keep, and what its zero value becomes. A field
// added to Config without a line here fails the test, so that defaults and
// validation are thought about for it (as quic-go's config test does).
func TestConfigDefaults(t *testing.T) {
	fc := clock.NewFake()
	logger := slog.New(slog.DiscardHandler)
	mem := store.NewMemory()
	var pc net.PacketConn = &net.UDPConn{}
	tlsConf := &tls.Config{}
	fields := map[string]struct {
		set  any // a valid non-zero value, kept as it is
		zero any // what the zero value becomes; nil: it stays zero
	}{
		"Dir":                      {"data", DefaultDir},
		"Addr":                     {"127.0.0.1:1", DefaultAddr},
		"LeaseTerm":                {time.Minute, DefaultLeaseTerm},
		"PrefixTerms":              {[]PrefixTerm{{Prefix: "/a", Term: time.Second}}, nil},
		"Epsilon":                  {time.Second, DefaultEpsilon},
		"MaxValueSize":             {1 << 10, DefaultMaxValueSize},
		"MaxInflight":              {10, DefaultMaxInflight},
		"MaxInflightBytes":         {8 << 20, DefaultMaxInflightBytes},
		"MaxSessions":              {5, DefaultMaxSessions},
		"MaxTotalInflightBytes":    {int64(16 << 20), int64(DefaultMaxTotalInflightBytes)},
		"MaxFrameBytesPerAddr":     {int64(8 << 20), int64(DefaultMaxFrameBytesPerAddr)},
		"MaxLeasesPerSession":      {1000, DefaultMaxLeasesPerSession},
		"MaxLeases":                {5000, DefaultMaxLeases},
		"MaxWriteLeasesPerSession": {7, DefaultMaxWriteLeasesPerSession},
		"MaxSessionsPerAddr":       {3, DefaultMaxSessionsPerAddr},
		"FrameTimeout":             {time.Second, DefaultFrameTimeout},
		"RetryHandshakes":          {-1, DefaultRetryHandshakes},
		"RetryWindow":              {time.Minute, DefaultRetryWindow},
		"UnsafeSkipHorizonWait":    {true, nil},
		"UnsafeNoPrefixRecall":     {true, nil},
		"UnsafeLockSteal":          {true, nil},
		"UnsafeWatchFault":         {"skip", nil},
		"HotPrefixWrites":          {3, nil},
		"HorizonStep":              {time.Second, (DefaultLeaseTerm + DefaultEpsilon) / 4},
		"IdleTimeout":              {time.Minute, DefaultIdleTimeout},
		"HelloTimeout":             {time.Second, DefaultHelloTimeout},
		"QuotaBytes":               {int64(1 << 30), int64(diskguard.DefaultQuota)},
		"ReserveBytes":             {int64(-1), int64(diskguard.DefaultReserve)},
		"DiskUsage":                {diskguard.Meter(&fixedDisk{}), nil},
		"Store":                    {store.Store(mem), nil},
		"PacketConn":               {pc, nil},
		"Cluster":                  {&Cluster{Name: "n1", PeerAddr: "127.0.0.1:1", PeerTLS: tlsConf, PeerClientTLS: tlsConf}, nil},
		"TLSConfig":                {tlsConf, nil},
		"TLSHosts":                 {[]string{"db1"}, nil},
		"ClientCAs":                {x509.NewCertPool(), nil},
		"PolicyFile":               {"policy.yaml", nil},
		"Clock":                    {clock.Clock(fc), "real"},
		"BootClock":                {clock.Boot(clock.NewFakeBoot(fc)), clock.RealBoot()},
		"Logger":                   {logger, slog.Default()},
		"MetricsListen":            {"127.0.0.1:0", nil},
		"MetricsPprof":             {true, nil},
		"History":                  {core.HistoryRetention{Age: time.Minute, Revisions: -1, Bytes: 1 << 20, Interval: time.Second}, nil},
		"TTL": {core.TTLConfig{MinTTL: time.Second, MaxTTL: time.Hour, MaxLeases: 10, CheckpointInterval: time.Minute, MaxRevokesPerSecond: 5},
			core.TTLConfig{MinTTL: core.DefaultMinTTL, MaxTTL: core.DefaultMaxTTL, MaxLeases: core.DefaultMaxTTLLeases,
				CheckpointInterval: lessor.DefaultCheckpointInterval, MaxRevokesPerSecond: lessor.DefaultMaxRevokesPerSecond}},
	}
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		f, ok := fields[name]
		if !ok {
			t.Errorf("Config.%s is not in this test: add it, with its default and its validation", name)
			continue
		}
		var set Config
		reflect.ValueOf(&set).Elem().Field(i).Set(reflect.ValueOf(f.set))
		if name == "MetricsPprof" {
			set.MetricsListen = "127.0.0.1:0" // profiles are served there
		}
		if name == "PolicyFile" {
			set.ClientCAs = x509.NewCertPool() // a policy needs client certificates
		}
		got := reflect.ValueOf(set.withDefaults()).Field(i).Interface()
		if !reflect.DeepEqual(got, f.set) {
			t.Errorf("Config.%s = %v became %v", name, f.set, got)
		}
		if err := set.Validate(); err != nil {
			t.Errorf("Config.%s = %v: %v", name, f.set, err)
		}
		zero := reflect.ValueOf(Config{}.withDefaults()).Field(i)
		switch {
		case f.zero == nil:
			if !zero.IsZero() {
				t.Errorf("zero Config.%s became %v, want it left zero", name, zero.Interface())
			}
		case f.zero == "real":
			if zero.IsNil() {
				t.Errorf("zero Config.%s left nil, want the real clock", name)
			}
		case !reflect.DeepEqual(zero.Interface(), f.zero):
			t.Errorf("zero Config.%s became %v, want %v", name, zero.Interface(), f.zero)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the zero Config: %v", err)
	}
}

// TestConfigValidate: each bad value is an error that names it, from
// Validate and from New.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{LeaseTerm: -time.Second}, "LeaseTerm -1s is not positive"},
		{Config{Epsilon: -time.Second}, "Epsilon -1s is negative"},
		{Config{MetricsPprof: true}, "MetricsPprof: profiles are served on the metrics listener: set MetricsListen too"},
		{Config{PolicyFile: "p.yaml"}, "PolicyFile p.yaml: a policy knows clients by their certificates; require them (ClientCAs)"},
		{Config{PolicyFile: "p.yaml", TLSConfig: &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven}}, "require them (ClientCAs)"},
		{Config{TLSConfig: &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert}}, "ClientCAs: client certificates are verified (TLSConfig.ClientAuth) but no CA is given for them"},
		{Config{TLSConfig: &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven}}, "no CA is given for them"},
		{Config{MetricsListen: "9090"}, "MetricsListen \"9090\""},
		{Config{MaxValueSize: 65 << 20}, "MaxValueSize 68157440 is over the limit of 66060288 bytes (63 MiB)"},
		{Config{MaxValueSize: -1}, "MaxValueSize -1 is negative"},
		{Config{MaxInflight: -1}, "MaxInflight -1 is negative"},
		{Config{MaxSessions: -1}, "MaxSessions -1 is negative"},
		{Config{MaxLeases: -1}, "MaxLeases -1 is negative"},
		{Config{MaxWriteLeasesPerSession: -1}, "MaxWriteLeasesPerSession -1 is negative"},
		{Config{RetryWindow: -time.Second}, "RetryWindow -1s is negative"},
		{Config{IdleTimeout: -time.Second}, "IdleTimeout -1s is negative"},
		{Config{HelloTimeout: -time.Second}, "HelloTimeout -1s is negative"},
		{Config{HorizonStep: time.Millisecond}, "HorizonStep 1ms is shorter than 10ms"},
		{Config{MaxInflightBytes: 1 << 10}, "MaxInflightBytes 1024 is less than MaxValueSize"},
		{Config{PrefixTerms: []PrefixTerm{{Prefix: "/a", Term: -1}}}, `PrefixTerms: term -1ns for prefix "/a" is negative`},
		{Config{PrefixTerms: []PrefixTerm{{Prefix: "/a", Term: 1}, {Prefix: "/a", Term: 2}}}, "PrefixTerms: prefix \"/a\" is given twice"},
		{Config{PrefixTerms: []PrefixTerm{{Prefix: strings.Repeat("p", MaxKeySize+1), Term: 1}}}, "PrefixTerms: prefix of 4097 bytes is longer than a key may be (4096)"},
		// Durations past their bounds; with the first, term + ε + the
		// horizon step would wrap around time.Duration.
		{Config{LeaseTerm: 2562047 * time.Hour}, "LeaseTerm 2562047h0m0s is longer than 1h0m0s, the longest allowed"},
		{Config{LeaseTerm: MaxLeaseTerm + 1}, "LeaseTerm 1h0m0.000000001s is longer than 1h0m0s"},
		{Config{Epsilon: MaxEpsilon + 1}, "Epsilon 1m0.000000001s is longer than 1m0s"},
		{Config{HorizonStep: MaxHorizonStep + 1}, "HorizonStep 1h0m0.000000001s is longer than 1h0m0s"},
		{Config{RetryWindow: MaxRetryWindow + 1}, "RetryWindow 24h0m0.000000001s is longer than 24h0m0s"},
		{Config{IdleTimeout: MaxIdleTimeout + 1}, "IdleTimeout 1h0m0.000000001s is longer than 1h0m0s"},
		{Config{HelloTimeout: MaxHelloTimeout + 1}, "HelloTimeout 5m0.000000001s is longer than 5m0s"},
		{Config{PrefixTerms: []PrefixTerm{{Prefix: "/a", Term: 2562047 * time.Hour}}}, `PrefixTerms: term 2562047h0m0s for prefix "/a" is longer than 1h0m0s`},
		{Config{FrameTimeout: MaxIdleTimeout + 1}, "FrameTimeout 1h0m0.000000001s is outside 0..1h0m0s"},
		{Config{MaxTotalInflightBytes: 1 << 10}, "MaxTotalInflightBytes 1024 is less than MaxValueSize 1048576 plus MaxKeySize 4096"},
		{Config{MaxTotalInflightBytes: 1<<20 + 4096}, "MaxTotalInflightBytes 1052672 is less than MaxValueSize 1048576 plus MaxKeySize 4096 plus 1024"},
		{Config{MaxFrameBytesPerAddr: 1 << 20}, "MaxFrameBytesPerAddr 1048576 is less than the largest frame"},
		{Config{MaxSessionsPerAddr: -1}, "MaxSessionsPerAddr -1 is negative"},
		{Config{MaxLeasesPerSession: -1}, "MaxLeasesPerSession -1 is negative"},
		{Config{TLSHosts: []string{"*.com"}}, `TLSHosts: a TLS host is refused: bad host "*.com"`},
		// The TTL bounds, by their path.
		{Config{TTL: core.TTLConfig{MinTTL: -time.Second}}, "TTL.MinTTL -1s is negative"},
		{Config{TTL: core.TTLConfig{MaxTTL: -time.Second}}, "TTL.MaxTTL -1s is negative"},
		{Config{TTL: core.TTLConfig{MaxTTL: 2562047 * time.Hour}}, "TTL.MaxTTL 2562047h0m0s is longer than 720h0m0s, the longest allowed"},
		{Config{TTL: core.TTLConfig{MinTTL: 2 * time.Hour, MaxTTL: time.Hour}}, "TTL.MinTTL 2h0m0s is above MaxTTL 1h0m0s"},
		{Config{TTL: core.TTLConfig{MaxLeases: -1}}, "TTL.MaxLeases -1 is negative"},
		{Config{TTL: core.TTLConfig{CheckpointInterval: -time.Second}}, "TTL.CheckpointInterval -1s is negative"},
		{Config{TTL: core.TTLConfig{MaxRevokesPerSecond: 1e9 + 1}}, "TTL.MaxRevokesPerSecond 1000000001 is outside 0..1000000000"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate(%+v) = %v, want an error naming %q", tc.cfg, err, tc.want)
			}
			if field := fieldOf(err); !isConfigField(field) {
				t.Errorf("Validate = %v: it begins with %q, not a field of Config", err, field)
			}
			tc.cfg.Dir = t.TempDir()
			tc.cfg.Addr = "127.0.0.1:0"
			tc.cfg.Store = store.NewMemory()
			srv, err := New(tc.cfg)
			if err == nil {
				srv.Close()
				t.Fatal("New accepted a bad config")
			}
			if errors.Is(err, store.ErrClosed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want the config error", err)
			}
		})
	}
}

// fieldOf returns the field that an error of Validate names: its first
// word, up to a space or a colon.
func fieldOf(err error) string {
	msg := err.Error()
	if i := strings.IndexAny(msg, " :"); i >= 0 {
		return msg[:i]
	}
	return msg
}

// isConfigField reports whether path names a field of Config, or a field
// of a field of it ("TTL.MaxTTL", "Cluster.Replica.ElectionTimeout").
func isConfigField(path string) bool {
	typ := reflect.TypeFor[Config]()
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

// TestConfigLargestDurations: the largest value of every bounded
// duration is accepted together, and a server runs with them: the sums it
// forms from them (the longest term plus ε plus the horizon step) do not
// overflow.
func TestConfigLargestDurations(t *testing.T) {
	cfg := Config{
		Dir: t.TempDir(), Addr: "127.0.0.1:0", Store: store.NewMemory(), Logger: quietLogger(),
		LeaseTerm: MaxLeaseTerm, PrefixTerms: []PrefixTerm{{Prefix: "/p/", Term: MaxLeaseTerm}},
		Epsilon: MaxEpsilon, HorizonStep: MaxHorizonStep, RetryWindow: MaxRetryWindow,
		IdleTimeout: MaxIdleTimeout, HelloTimeout: MaxHelloTimeout,
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv.Close()
}

// TestClusterConfigDefaults: every field of Cluster is known here, as
// TestConfigDefaults does for Config: with a valid non-zero value that
// Validate accepts and withDefaults keeps, and what its zero value does:
// either Validate refuses it with an error naming the field, or it means a
// default, which Validate accepts. The fields of Cluster.Replica are known
// too: either the node sets them (node.openReplica), or they tune raft and
// their zero value means replica's default. A field added to either
// struct without a line here fails the test, so that its default and its
// validation are thought about.
func TestClusterConfigDefaults(t *testing.T) {
	tlsConf := &tls.Config{}
	var ln net.Listener = &net.TCPListener{}
	base := func() Cluster {
		return Cluster{Name: "n1", PeerAddr: "127.0.0.1:7501", PeerTLS: tlsConf, PeerClientTLS: tlsConf}
	}
	fields := map[string]struct {
		set any // a valid non-zero value, kept as it is
		// Exactly one of: the error Validate gives for the zero value, or
		// what the zero value means (Validate accepts it).
		zeroErr, zeroMeans string
	}{
		"Name":          {"n1", "Name is empty", ""},
		"PeerAddr":      {"127.0.0.1:7501", "PeerAddr is empty", ""},
		"PeerListener":  {ln, "", "listen on PeerAddr"},
		"Peers":         {[]Peer{{Name: "n1", Addr: "127.0.0.1:7501"}, {Name: "n2", Addr: "127.0.0.1:7502"}}, "", "a cluster of this node alone"},
		"PeerTLS":       {tlsConf, "PeerTLS and PeerClientTLS are required", ""},
		"PeerClientTLS": {tlsConf, "PeerTLS and PeerClientTLS are required", ""},
		"PeerRoutes":    {map[string]string{"n2": "127.0.0.1:9002"}, "", "dial every peer at its PeerAddr"},
		"Replica":       {replica.Config{HeartbeatTimeout: time.Second, ElectionTimeout: time.Second}, "", "replica's defaults"},
		"Join":          {true, "", "bootstrap Peers on a first start"},
	}
	typ := reflect.TypeFor[Cluster]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		f, ok := fields[name]
		if !ok {
			t.Errorf("Cluster.%s is not in this test: add it, with its default and its validation", name)
			continue
		}
		if (f.zeroErr == "") == (f.zeroMeans == "") {
			t.Errorf("Cluster.%s: give either the error of its zero value or what the zero value means", name)
			continue
		}
		set := base()
		reflect.ValueOf(&set).Elem().Field(i).Set(reflect.ValueOf(f.set))
		cfg := Config{Cluster: &set}
		if err := cfg.Validate(); err != nil {
			t.Errorf("Cluster.%s = %v: %v", name, f.set, err)
		}
		if got := reflect.ValueOf(*cfg.withDefaults().Cluster).Field(i).Interface(); !reflect.DeepEqual(got, f.set) {
			t.Errorf("Cluster.%s = %v became %v", name, f.set, got)
		}
		zero := base()
		reflect.ValueOf(&zero).Elem().Field(i).SetZero()
		err := Config{Cluster: &zero}.Validate()
		switch {
		case f.zeroErr != "" && (err == nil || !strings.Contains(err.Error(), f.zeroErr)):
			t.Errorf("zero Cluster.%s: Validate = %v, want an error naming %q", name, err, f.zeroErr)
		case f.zeroErr == "" && err != nil:
			t.Errorf("zero Cluster.%s (%s): %v", name, f.zeroMeans, err)
		}
	}

	// The fields of replica.Config that the node sets from the server's
	// own configuration, whatever Cluster.Replica holds, and those that
	// tune raft, whose zero value means replica's default.
	setByServer := map[string]bool{"Dir": true, "ID": true, "Network": true, "Transport": true, "Bootstrap": true, "Join": true, "Clock": true, "Logger": true, "Refuse": true}
	tuning := map[string]bool{"HeartbeatTimeout": true, "ElectionTimeout": true, "LeaderLeaseTimeout": true, "CommitTimeout": true,
		"ApplyTimeout": true, "SnapshotThreshold": true, "TrailingLogs": true, "SnapshotInterval": true, "WALSegmentSize": true,
		"MaxEntryBytes": true, "LogStore": true, "StableStore": true, "SnapshotBytes": true, "TrailingBytes": true,
		"SnapshotRetain": true, "GCInterval": true, "GCDiscardRatio": true, "StoreOptions": true}
	rtyp := reflect.TypeFor[replica.Config]()
	for i := range rtyp.NumField() {
		if name := rtyp.Field(i).Name; !setByServer[name] && !tuning[name] {
			t.Errorf("replica.Config.%s is not in this test: say whether node.openReplica sets it or Cluster.Replica tunes it, and check both", name)
		}
	}
}

// TestClusterConfigValidate: each bad cluster setting is an error that
// names it.
func TestClusterConfigValidate(t *testing.T) {
	tlsConf := &tls.Config{}
	good := func() *Cluster {
		return &Cluster{Name: "n1", PeerAddr: "127.0.0.1:7501", PeerTLS: tlsConf, PeerClientTLS: tlsConf,
			Peers: []Peer{{Name: "n1", Addr: "127.0.0.1:7501"}, {Name: "n2", Addr: "127.0.0.1:7502"}, {Name: "n3", Addr: "127.0.0.1:7503"}}}
	}
	if err := (Config{Cluster: good()}).Validate(); err != nil {
		t.Fatalf("a good cluster: %v", err)
	}
	largest := good()
	largest.Replica = replica.Config{HeartbeatTimeout: replica.MaxRaftTimeout, ElectionTimeout: replica.MaxRaftTimeout,
		LeaderLeaseTimeout: replica.MaxRaftTimeout, CommitTimeout: replica.MaxRaftTimeout,
		ApplyTimeout: replica.MaxApplyTimeout, SnapshotInterval: replica.MaxSnapshotInterval}
	if err := (Config{Cluster: largest}).Validate(); err != nil {
		t.Fatalf("the largest raft timeouts: %v", err)
	}
	routed := good()
	routed.PeerRoutes = map[string]string{"n2": "127.0.0.1:9002", "n9": "tunnel.example:9"}
	if err := (Config{Cluster: routed}).Validate(); err != nil {
		t.Fatalf("a good cluster with peer routes: %v", err)
	}
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Cluster.Name = "" }, "Name is empty"},
		{func(c *Config) { c.Cluster.PeerAddr = "" }, "PeerAddr is empty"},
		{func(c *Config) { c.Cluster.PeerAddr = "nohost" }, "PeerAddr"},
		{func(c *Config) { c.Cluster.PeerTLS = nil }, "PeerTLS"},
		{func(c *Config) { c.Cluster.Peers[0].Addr = "127.0.0.1:9" }, "its PeerAddr is"},
		{func(c *Config) { c.Cluster.Peers = c.Cluster.Peers[1:] }, "does not name this node"},
		{func(c *Config) { c.Cluster.Peers[2].Name = "n2" }, "named twice"},
		{func(c *Config) { c.Cluster.Peers[1].Addr = "" }, "needs a name and an address"},
		{func(c *Config) { c.Cluster.Join = true }, "takes no initial Peers"},
		{func(c *Config) { c.Store = store.NewMemory() }, "Store must be nil"},
		{func(c *Config) { c.Cluster.PeerRoutes = map[string]string{"n1": "127.0.0.1:9"} }, "does not dial itself"},
		{func(c *Config) { c.Cluster.PeerRoutes = map[string]string{"": "127.0.0.1:9"} }, "names no peer"},
		{func(c *Config) { c.Cluster.PeerRoutes = map[string]string{"n2": "nohost"} }, "peer route n2"},
		// Raft's timeouts, against their bounds and each other, refused at
		// start rather than by raft once the node's files are open.
		{func(c *Config) { c.Cluster.Replica.HeartbeatTimeout = -time.Second }, "Cluster.Replica.HeartbeatTimeout -1s is outside 5ms..1m0s"},
		{func(c *Config) { c.Cluster.Replica.ElectionTimeout = 2562047 * time.Hour }, "Cluster.Replica.ElectionTimeout 2562047h0m0s is outside 5ms..1m0s"},
		{func(c *Config) { c.Cluster.Replica.LeaderLeaseTimeout = time.Millisecond }, "Cluster.Replica.LeaderLeaseTimeout 1ms is outside 5ms..1m0s"},
		{func(c *Config) { c.Cluster.Replica.CommitTimeout = time.Hour }, "Cluster.Replica.CommitTimeout 1h0m0s is outside 1ms..1m0s"},
		{func(c *Config) { c.Cluster.Replica.ApplyTimeout = time.Hour }, "Cluster.Replica.ApplyTimeout 1h0m0s is outside 1ms..10m0s"},
		{func(c *Config) { c.Cluster.Replica.SnapshotInterval = 25 * time.Hour }, "Cluster.Replica.SnapshotInterval 25h0m0s is outside 5ms..24h0m0s"},
		{func(c *Config) { c.Cluster.Replica.HeartbeatTimeout = time.Second }, "Cluster.Replica.ElectionTimeout 200ms is shorter than HeartbeatTimeout 1s"},
		{func(c *Config) { c.Cluster.Replica.LeaderLeaseTimeout = 300 * time.Millisecond }, "Cluster.Replica.LeaderLeaseTimeout 300ms is longer than HeartbeatTimeout 200ms"},
		{func(c *Config) { c.Cluster.Replica.CommitTimeout = 300 * time.Millisecond }, "Cluster.Replica.CommitTimeout 300ms is longer than HeartbeatTimeout 200ms"},
	} {
		cfg := Config{Cluster: good()}
		tc.change(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want an error naming %q", err, tc.want)
		}
		if field := fieldOf(err); strings.HasPrefix(tc.want, "Cluster.") && !isConfigField(field) {
			t.Errorf("Validate = %v: it begins with %q, not a field of Config", err, field)
		}
	}
	// The shortest TTL against the election timeout: a TTL lease must
	// outlive a failover.
	short := Config{Cluster: good(), TTL: core.TTLConfig{MinTTL: time.Second}}
	short.Cluster.Replica.ElectionTimeout = time.Second
	if err := short.Validate(); err == nil || !strings.HasPrefix(err.Error(), "TTL.MinTTL 1s is shorter than three times Cluster.Replica.ElectionTimeout (3s)") {
		t.Errorf("Validate = %v, want an error naming TTL.MinTTL and the election timeout", err)
	}
}
