//go:build !linux

package main

import "syscall"

// childAttr returns the process attributes of lock's command: none beyond
// the defaults where the command cannot be tied to leasectl's life.
func childAttr() *syscall.SysProcAttr { return nil }
