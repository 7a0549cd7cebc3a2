package storetest

import (
	"os"
	"path/filepath"
	"syscall"
)

// userXattrs reports whether files under dir can carry user extended attributes.
func userXattrs(dir string) bool {
	const name = "user.flight_sink_probe"
	if err := syscall.Setxattr(dir, name, []byte("1"), 0); err != nil {
		return false
	}
	_ = syscall.Removexattr(dir, name)
	// Probe a regular file too: some file systems allow xattrs on directories only.
	f := filepath.Join(dir, ".xattr-probe")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		return false
	}
	defer os.Remove(f)
	return syscall.Setxattr(f, name, []byte("1"), 0) == nil
}

// sysProcAttr kills the server when the test binary dies without running its cleanup (a test
// timeout panics and exits), so no gateway outlives its tests.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// processAlive reports whether a process with this pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
