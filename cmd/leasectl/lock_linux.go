package main

import "syscall"

// childAttr returns the process attributes of lock's command: it is killed
// if leasectl dies, since its lock then ends within the lease's TTL.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
