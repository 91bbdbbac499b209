package client

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"math"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/internal/clock"
)

// A test of Config in the manner of quic-go's config_test: it walks the
// fields of Config, so that a field added without a row here fails the
// tests, and the one who adds it decides its default and its invalid
// values.

// configDefaults has one row per field of Config: a valid non-zero value,
// which withDefaults must keep, and the value withDefaults gives the zero
// value (nil: it stays zero, which has a meaning of its own).
var configDefaults = map[string]struct {
	valid any
	def   any
}{
	"CAFile":             {valid: "ca.pem"},
	"CertFile":           {valid: "client.pem"},
	"KeyFile":            {valid: "client-key.pem"},
	"TLSConfig":          {valid: &tls.Config{ServerName: "leased.example"}},
	"Name":               {valid: "a client"},
	"CacheEntries":       {valid: 10, def: DefaultCacheEntries},
	"CacheBytes":         {valid: int64(1 << 10), def: int64(DefaultCacheBytes)},
	"RenewFraction":      {valid: 0.5, def: DefaultRenewFraction},
	"IdleTimeout":        {valid: time.Second, def: DefaultIdleTimeout},
	"MaxReconnectDelay":  {valid: time.Second, def: DefaultMaxReconnect},
	"MemberSyncInterval": {valid: -time.Second, def: DefaultMemberSync},
	"OnEvent":            {valid: func(Event) {}},
	"OnInvalidate":       {valid: func(keys, prefixes []string) {}},
	"PacketConn":         {valid: fakePacketConn{}},
	"Clock":              {valid: clock.NewFake(), def: clock.Real()},
	"Logger":             {valid: slog.New(slog.DiscardHandler), def: slog.Default()},
}

// configInvalid has one row per field of Config: values Validate refuses
// (none: every value is valid).
var configInvalid = map[string][]any{
	"CAFile":             nil,            // a missing or empty file fails Dial when it reads it
	"CertFile":           {"client.pem"}, // without KeyFile (the test sets one field alone)
	"KeyFile":            {"client-key.pem"},
	"TLSConfig":          nil,
	"Name":               nil,
	"CacheEntries":       {-1, math.MinInt},
	"CacheBytes":         {int64(-1), int64(math.MinInt64)},
	"RenewFraction":      {-0.5, 1.0, 1.5, math.NaN(), math.Inf(1), math.Inf(-1), -math.SmallestNonzeroFloat64},
	"IdleTimeout":        {-time.Nanosecond, time.Duration(math.MinInt64), MaxIdleTimeout + 1, time.Duration(math.MaxInt64)},
	"MaxReconnectDelay":  {-time.Second, MaxMaxReconnectDelay + 1, time.Duration(math.MaxInt64)},
	"MemberSyncInterval": {MaxMemberSyncInterval + 1, time.Duration(math.MaxInt64)},
	"OnEvent":            nil,
	"OnInvalidate":       nil,
	"PacketConn":         nil,
	"Clock":              nil,
	"Logger":             nil,
}

// fakePacketConn is a net.PacketConn that is never used.
type fakePacketConn struct{ net.PacketConn }

// configFields returns the fields of Config, and fails t for each row of a
// table that names no field.
func configFields[V any](t *testing.T, table map[string]V) []reflect.StructField {
	t.Helper()
	typ := reflect.TypeFor[Config]()
	var fields []reflect.StructField
	names := make(map[string]bool)
	for i := range typ.NumField() {
		fields = append(fields, typ.Field(i))
		names[typ.Field(i).Name] = true
	}
	for name := range table {
		if !names[name] {
			t.Errorf("the table has a row for %s, which Config does not have", name)
		}
	}
	return fields
}

// sameValue reports whether a and b hold the same value; funcs are the
// same if they are the same func.
func sameValue(a, b reflect.Value) bool {
	if a.Kind() == reflect.Func {
		return a.Pointer() == b.Pointer()
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

func TestConfigDefaults(t *testing.T) {
	zero := Config{}.withDefaults()
	for _, f := range configFields(t, configDefaults) {
		row, ok := configDefaults[f.Name]
		if !ok {
			t.Errorf("Config.%s has no row in configDefaults: give its zero value a meaning in withDefaults (or say it stays zero), and add it to configInvalid with what Validate refuses", f.Name)
			continue
		}
		// A valid non-zero value is valid, and kept.
		var c Config
		v := reflect.ValueOf(&c).Elem().FieldByIndex(f.Index)
		v.Set(reflect.ValueOf(row.valid))
		if v.IsZero() {
			t.Errorf("Config.%s: the table's valid value is the zero value", f.Name)
		}
		// A certificate and its key go together.
		switch f.Name {
		case "CertFile":
			c.KeyFile = "client-key.pem"
		case "KeyFile":
			c.CertFile = "client.pem"
		}
		if err := c.Validate(); err != nil {
			t.Errorf("Config.%s = %v: Validate: %v", f.Name, row.valid, err)
		}
		if got := reflect.ValueOf(c.withDefaults()).FieldByIndex(f.Index); !sameValue(got, v) {
			t.Errorf("Config.%s = %v: withDefaults changed it to %v", f.Name, row.valid, got)
		}
		// The zero value gets the default.
		got := reflect.ValueOf(zero).FieldByIndex(f.Index)
		if row.def == nil {
			if !got.IsZero() {
				t.Errorf("zero Config.%s: withDefaults set it to %v, want it left zero", f.Name, got)
			}
		} else if want := reflect.ValueOf(row.def); !sameValue(got, want) {
			t.Errorf("zero Config.%s: withDefaults set it to %v, want %v", f.Name, got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the zero Config: %v", err)
	}
	for _, f := range configFields(t, configInvalid) {
		values, ok := configInvalid[f.Name]
		if !ok {
			t.Errorf("Config.%s has no row in configInvalid: decide which of its values Validate refuses (maybe none)", f.Name)
			continue
		}
		for _, bad := range values {
			var c Config
			reflect.ValueOf(&c).Elem().FieldByIndex(f.Index).Set(reflect.ValueOf(bad))
			err := c.Validate()
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "Config."+f.Name+" ") {
				t.Errorf("Config.%s = %v: Validate returned %v, want ErrInvalidArgument naming the field", f.Name, bad, err)
			}
		}
	}
	// Values just inside the bounds are valid.
	for _, c := range []Config{
		{RenewFraction: math.SmallestNonzeroFloat64},
		{RenewFraction: math.Nextafter(1, 0)},
		{CacheEntries: 1, CacheBytes: 1, IdleTimeout: 1, MaxReconnectDelay: 1},
		{IdleTimeout: MaxIdleTimeout, MaxReconnectDelay: MaxMaxReconnectDelay},
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	// Every bad field is named, not just the first.
	err := Config{CacheEntries: -1, IdleTimeout: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "Config.CacheEntries") || !strings.Contains(err.Error(), "Config.IdleTimeout") {
		t.Errorf("two bad fields: %v", err)
	}
}

// TestDialValidates: Dial refuses an invalid Config before it dials.
func TestDialValidates(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a dial would fail with the context's error instead
	_, err := Dial(ctx, "127.0.0.1:1", Config{RenewFraction: 2})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "Config.RenewFraction") {
		t.Fatalf("Dial with RenewFraction 2: %v, want ErrInvalidArgument naming the field", err)
	}
}
