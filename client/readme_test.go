package client

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEExample checks that the README's library example is the code of
// Example in example_test.go, which go vet and go test compile, and that it
// imports the client alone: a client must not link the server.
func TestREADMEExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(src), "\t// README: begin\n")
	body, _, ok2 := strings.Cut(body, "\t// README: end\n")
	if !ok || !ok2 {
		t.Fatal("example_test.go has no README markers")
	}
	var want strings.Builder
	for _, line := range strings.SplitAfter(body, "\n") {
		want.WriteString(strings.TrimPrefix(line, "\t"))
	}

	_, section, _ := strings.Cut(string(readme), "## The Go library\n")
	_, block, ok := strings.Cut(section, "```go\n")
	block, _, ok2 = strings.Cut(block, "```\n")
	if !ok || !ok2 {
		t.Fatal("README has no go block under \"## The Go library\"")
	}
	imports, code, ok := strings.Cut(block, ")\n\n")
	if !ok {
		t.Fatalf("README's library example does not begin with its imports:\n%s", block)
	}
	if code != want.String() {
		t.Errorf("README's library example differs from Example in example_test.go:\nREADME:\n%s\nexample_test.go:\n%s", code, want.String())
	}
	_, srcImports, _ := strings.Cut(string(src), "import (\n")
	srcImports, _, _ = strings.Cut(srcImports, ")\n")
	if got := strings.TrimPrefix(imports, "import (\n") + ""; got != srcImports {
		t.Errorf("README's imports:\n%s\nwant those of example_test.go:\n%s", got, srcImports)
	}
	if strings.Contains(imports, "leased/server") {
		t.Error("README's library example imports the server")
	}
}
