//go:build !linux

package storetest

import "syscall"

// userXattrs reports false off Linux, so versitygw keeps metadata in a sidecar directory, which
// works on every file system.
func userXattrs(dir string) bool { return false }

func sysProcAttr() *syscall.SysProcAttr { return nil }

// processAlive reports true: without a portable probe, stale directories are left to the OS.
func processAlive(pid int) bool { return true }
