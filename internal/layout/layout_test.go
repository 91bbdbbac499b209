package layout

import (
	"os"
	"path/filepath"
	"testing"
)

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST": true, "127.0.0.1": true, "127.1.2.3": true, "::1": true,
		"10.0.0.1": false, "example.com": false, "": false, "0.0.0.0": false,
	} {
		if got := IsLoopback(host); got != want {
			t.Errorf("IsLoopback(%q) = %v", host, got)
		}
	}
}

func TestFindCA(t *testing.T) {
	data := t.TempDir()
	missing := filepath.Join(t.TempDir(), "none")
	if err := os.MkdirAll(filepath.Join(data, TLSDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(CAPath(data), []byte("pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, endpoint, data, cacert, env string
		want                              string
		local                             bool
	}{
		{"flag first", "127.0.0.1:7400", data, "given.pem", "env.pem", "given.pem", true},
		{"environment before the local data folder", "localhost:7400", data, "", "env.pem", "env.pem", true},
		{"local data folder", "localhost:7400", data, "", " ", CAPath(data), true},
		{"local, no data folder", "[::1]:7400", missing, "", " env.pem ", "env.pem", true},
		{"remote ignores the data folder", "db1.example.com:7400", data, "", "env.pem", "env.pem", false},
		{"nothing", "10.0.0.1:7400", data, "", "", "", false},
	} {
		got, local := FindCA(tc.endpoint, tc.data, tc.cacert, tc.env)
		if got != tc.want || local != tc.local {
			t.Errorf("%s: FindCA = %q, %v; want %q, %v", tc.name, got, local, tc.want, tc.local)
		}
	}
}
