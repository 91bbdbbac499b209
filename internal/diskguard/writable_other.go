//go:build !unix

package diskguard

// Writable returns nil: where there is no access(2), a folder that cannot
// be written is seen only when a write into it fails.
func Writable(string) error { return nil }
