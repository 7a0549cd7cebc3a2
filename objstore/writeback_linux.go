package objstore

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to begin writing bytes [off, off+n) of f to the disk now,
// without waiting. The fsync that follows then finds them written or in flight instead of
// starting on the whole file, and the dirty pages of a large file never pile up to the point
// where the kernel throttles the writer (measured on this project's test machine: an 82 MB file
// took 30-50 ms to write and sync this way, against 60-290 ms written whole, then synced).
// It is advice: an error changes nothing, the fsync still makes the file durable.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
