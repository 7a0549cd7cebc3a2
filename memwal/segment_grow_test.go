package memwal

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/memwal/wal"
	"github.com/flight-sink/flight-sink/objstore"
)

// segmentFiles returns the sizes of the shard's WAL segment files by name.
func segmentFiles(t *testing.T, local *objstore.Local, s *Shard) map[string]int64 {
	t.Helper()
	dir := filepath.Join(local.Root(), filepath.FromSlash(s.paths.walPrefix()))
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), wal.SegmentExt) {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fi.Size()
	}
	return out
}

// While the spare segment is still being prepared, entries that do not fit the current segment
// grow it instead of waiting for a segment made on the spot; once the spare is ready the next entry
// moves to it, and a reopen replays every entry of the grown segment and of the next.
func TestSegmentGrowsWhileSpareIsPrepared(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	releaseSpare := func() { once.Do(func() { close(release) }) }
	defer releaseSpare() // before the shard's Close, which waits for the preparation
	var real func(string, int64) (string, error)
	real = wal.SwapPreallocateSpareForTesting(func(dir string, size int64) (string, error) {
		<-release
		return real(dir, size)
	})
	defer func() { wal.SwapPreallocateSpareForTesting(real) }()
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tbl := createTable(t, local, nil)
	o := testOptions()
	o.WALSegmentBytes = 64 << 10
	s := openShard(t, tbl, testShardID, o)
	var e int64
	for ; e < 60; e++ { // about 2.5 KB an entry: well past the 64 KiB segment
		put(t, s, "q", e, e*50, 50, "r")
	}
	segs := segmentFiles(t, local, s)
	if len(segs) != 1 {
		t.Fatalf("segments while the spare is held back: %v, want the first one, grown", segs)
	}
	for name, size := range segs {
		if size <= 64<<10 {
			t.Fatalf("segment %s is %d bytes after %d entries: not grown past its 64 KiB", name, size, e)
		}
	}
	releaseSpare()
	// The spare arrives in the background; the first entry after it goes to the next segment.
	deadline := time.Now().Add(30 * time.Second)
	for len(segmentFiles(t, local, s)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no second segment after the spare was released: %v", segmentFiles(t, local, s))
		}
		put(t, s, "q", e, e*50, 50, "r")
		e++
	}
	want := expectRows(0, int(e)*50, "r")
	checkRows(t, "rows", readMerged(t, tbl, s), want)
	s.Close()
	s = openShard(t, tbl, testShardID, o)
	checkRows(t, "after a reopen", readMerged(t, tbl, s), want)
	for q := int64(0); q < e; q++ {
		if ok, _ := s.EpochCommitted("q", q); !ok {
			t.Fatalf("epoch %d is not committed after the reopen", q)
		}
	}
}

// Only full-size segments are recycled: the small first segment a writer makes on the spot is
// deleted once flushed, so the free list never holds a segment that would fill after a few entries.
func TestSmallSegmentNotRecycled(t *testing.T) {
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tbl := createTable(t, local, nil)
	o := testOptions()
	o.WALSegmentBytes = 2 << 20 // the first segment is firstSegmentBytes, half of it
	// The spare is prepared in the background once the first segment is half full; on a loaded
	// machine the small first segment could fill before it is ready and grow instead
	// (TestSegmentGrowsWhileSpareIsPrepared). Here the puts wait for the spare, so the first
	// segment stays small.
	spareStarted, spareDone := make(chan struct{}, 1), make(chan struct{}, 1)
	var prepare func(string, int64) (string, error)
	prepare = wal.SwapPreallocateSpareForTesting(func(dir string, size int64) (string, error) {
		signal := func(c chan struct{}) {
			select {
			case c <- struct{}{}:
			default: // a later spare, after the loop below: nobody waits for it
			}
		}
		signal(spareStarted)
		defer signal(spareDone)
		return prepare(dir, size)
	})
	defer func() { wal.SwapPreallocateSpareForTesting(prepare) }()
	s := openShard(t, tbl, testShardID, o)
	first := segmentFiles(t, local, s)
	var e int64
	for ; len(segmentFiles(t, local, s)) < 2; e++ {
		if e > 2000 {
			t.Fatalf("no second segment after %d entries: %v", e, segmentFiles(t, local, s))
		}
		put(t, s, "q", e, e*2000, 2000, "r")
		select {
		case <-spareStarted:
			select {
			case <-spareDone:
			case <-time.After(time.Minute):
				t.Fatal("the spare segment was not ready a minute after it was started")
			}
		default:
		}
	}
	var small string
	for name, size := range segmentFiles(t, local, s) {
		if size < o.WALSegmentBytes {
			small = name
		}
	}
	if small == "" || len(first) > 1 {
		t.Fatalf("segments %v (before the first put %v): want a small first one", segmentFiles(t, local, s), first)
	}
	flush(t, s)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, left := segmentFiles(t, local, s)[small]
		var freeSmall []string
		for _, path := range s.wal.FreeSegmentPathsForTesting() {
			if fi, err := os.Stat(path); err == nil && fi.Size() < o.WALSegmentBytes {
				freeSmall = append(freeSmall, path)
			}
		}
		if len(freeSmall) > 0 {
			t.Fatalf("small segments on the free list: %v", freeSmall)
		}
		if !left {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flushed small segment %s is still there: %v", small, segmentFiles(t, local, s))
		}
		time.Sleep(5 * time.Millisecond)
	}
	checkRows(t, "rows", readMerged(t, tbl, s), expectRows(0, int(e)*2000, "r"))
}
