package version_test

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/leased/leased/internal/version"
)

func TestFrom(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	const rev = "3ba5826a1b2c3d4e5f60718293a4b5c6d7e8f901"
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no build info", nil, false, version.Unknown},
		{"nil with ok", nil, true, version.Unknown},
		{"tagged module", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"},
			Settings: vcs("vcs.revision", rev, "vcs.modified", "true")}, true, "v1.2.0"},
		{"pseudo-version", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261125030739-3ba5826a1b2c+dirty"}}, true,
			"v0.0.0-20261125030739-3ba5826a1b2c+dirty"},
		{"devel with vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs", "git", "vcs.revision", rev, "vcs.time", "2026-11-25T03:07:39Z", "vcs.modified", "false")}, true,
			"devel-20261125030739-3ba5826a1b2c"},
		{"devel modified", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", rev, "vcs.time", "2026-11-25T03:07:39Z", "vcs.modified", "true")}, true,
			"devel-20261125030739-3ba5826a1b2c+dirty"},
		{"devel short revision", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", "abc")}, true, "devel-abc"},
		{"devel zoned time", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", rev, "vcs.time", "2026-11-25T04:07:39+01:00")}, true, "devel-20261125030739-3ba5826a1b2c"},
		{"devel bad time and spaces", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", " ab c\n", "vcs.time", "yesterday", "vcs.modified", "true")}, true, "devel-abc+dirty"},
		{"devel without vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "devel"},
		{"empty version", &debug.BuildInfo{}, true, "devel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := version.From(tt.bi, tt.ok); got != tt.want {
				t.Errorf("From = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestString checks the running test binary's own version: a test binary
// is a (devel) build, and Long adds the toolchain.
func TestString(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if got, want := version.String(), version.From(bi, ok); got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got, want := version.Go(), runtime.Version(); got != want {
		t.Errorf("Go = %q, want %q", got, want)
	}
	if got, want := version.Long(), version.String()+" "+runtime.Version(); got != want {
		t.Errorf("Long = %q, want %q", got, want)
	}
}
