package memwal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal/wal"
	"github.com/flight-sink/flight-sink/objstore"
)

const (
	streamBatches   = 6
	streamBatchRows = 2000
)

// localTable creates the test table on a fresh local directory and returns it with its path.
func localTable(t *testing.T) (*engine.Table, string) {
	t.Helper()
	dir := t.TempDir()
	store, err := objstore.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	return createTable(t, store, nil), dir
}

// smallSegments makes segments small enough that one streamed put spans several.
func smallSegments() *Options {
	o := testOptions()
	o.WALSegmentBytes = 64 << 10
	return o
}

// streamEpoch starts a streamed put of epoch of query q and appends n batches of rows from
// epoch*100000 on, tagged tag.
func streamEpoch(t testing.TB, s *Shard, q string, epoch int64, n int, tag string) *PutStream {
	t.Helper()
	ps, err := s.StreamPut(context.Background(), &epochid.ID{QueryID: q, EpochID: epoch})
	if err != nil {
		t.Fatalf("stream put epoch %d: %v", epoch, err)
	}
	for i := 0; i < n; i++ {
		rec := makeRows(epoch*100000+int64(i)*streamBatchRows, streamBatchRows, tag, epoch)
		err := ps.Append(rec)
		rec.Release()
		if err != nil {
			t.Fatalf("append batch %d of epoch %d: %v", i, epoch, err)
		}
	}
	ps.waitWritten() // the records are in the segment: what the tests look for on disk
	return ps
}

// onDisk counts what the segments under dir hold: stream records, the distinct streams they
// belong to, the segments holding them, and entries committing a streamed put.
type onDisk struct{ records, streams, segments, commits, files int }

func diskRecords(t *testing.T, dir string) onDisk {
	t.Helper()
	var d onDisk
	ids := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() || filepath.Ext(path) != wal.SegmentExt {
			return err
		}
		n, ok := wal.ParseSegmentKey("x/" + walDir + filepath.Base(path))
		if !ok {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		d.files++
		payloads, _ := wal.SegmentRecords(b, n)
		holds := false
		for _, p := range payloads {
			h, err := wal.DecodeHeader("t", p)
			if err != nil {
				return err
			}
			if h.StreamID != "" {
				d.records++
				ids[h.StreamID] = true
				holds = true
			}
			for _, put := range h.Puts {
				if put.Stream != nil {
					d.commits++
				}
			}
		}
		if holds {
			d.segments++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	d.streams = len(ids)
	return d
}

// streamedRows are the rows streamEpoch(epoch, n, tag) appends.
func streamedRows(epoch int64, n int, tag string) []row {
	return expectRows(int(epoch)*100000, n*streamBatchRows, tag)
}

// A large streamed epoch lands exactly once, is refused as a replay, and replays after a reopen,
// across segments, flushes and the recycling of the segments below replay_after.
func TestStreamPutLandsOnceAndReplays(t *testing.T) {
	tbl, dir := localTable(t)
	s := openShard(t, tbl, testShardID, smallSegments())
	if !s.CanStream() {
		t.Fatal("a shard on a local disk cannot stream")
	}
	put(t, s, "q", 1, 0, 10, "small")
	ps := streamEpoch(t, s, "q", 2, streamBatches, "big")
	put(t, s, "other", 1, 10, 10, "between") // a group commit while the stream is open
	res, err := ps.Commit()
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if res.Rows != streamBatches*streamBatchRows {
		t.Fatalf("commit reports %d rows, want %d", res.Rows, streamBatches*streamBatchRows)
	}
	want := append(expectRows(0, 10, "small", 10, 10, "between"), streamedRows(2, streamBatches, "big")...)
	sortRows(want)
	checkRows(t, "after the streamed commit", readMerged(t, tbl, s), want)
	if d := diskRecords(t, dir); d.records != streamBatches || d.segments < 2 || d.commits != 1 {
		t.Fatalf("on disk: %+v, want %d stream records over several segments and one commit", d, streamBatches)
	}
	if _, err := s.StreamPut(context.Background(), &epochid.ID{QueryID: "q", EpochID: 2}); !errors.Is(err, epochid.ErrCommitted) {
		t.Fatalf("a second stream of epoch 2: %v, want epochid.ErrCommitted", err)
	}
	s.Close()

	s = openShard(t, tbl, testShardID, smallSegments())
	checkRows(t, "after a reopen", readMerged(t, tbl, s), want)
	if ok, _ := s.EpochCommitted("q", 2); !ok {
		t.Fatal("streamed epoch 2 is not committed after a reopen")
	}
	// More streams and puts, a flush in between: the segments the flush frees are recycled
	// while the stream after it is open, and its records survive.
	ps = streamEpoch(t, s, "q", 3, streamBatches, "big")
	flush(t, s)
	for e := int64(4); e < 8; e++ {
		put(t, s, "p", e, e*10, 10, "after")
	}
	flush(t, s)
	if _, err := ps.Commit(); err != nil {
		t.Fatalf("commit epoch 3: %v", err)
	}
	for e := int64(4); e < 8; e++ {
		want = append(want, expectRows(int(e)*10, 10, "after")...)
	}
	want = append(want, streamedRows(3, streamBatches, "big")...)
	sortRows(want)
	s.Close()
	s = openShard(t, tbl, testShardID, smallSegments())
	checkRows(t, "after flushes and a second reopen", readMerged(t, tbl, s), want)
}

// An aborted stream, or one whose context ends, leaves nothing: not after a reopen either, and
// the epoch can be written again.
func TestStreamPutAbortLeavesNothing(t *testing.T) {
	tbl, dir := localTable(t)
	s := openShard(t, tbl, testShardID, smallSegments())
	ps := streamEpoch(t, s, "q", 1, streamBatches, "aborted")
	if d := diskRecords(t, dir); d.records != streamBatches {
		t.Fatalf("on disk before the abort: %+v, want the stream's %d records", d, streamBatches)
	}
	ps.Abort()

	ctx, cancel := context.WithCancel(context.Background())
	ps, err := s.StreamPut(ctx, &epochid.ID{QueryID: "q", EpochID: 2})
	if err != nil {
		t.Fatal(err)
	}
	rec := makeRows(200000, streamBatchRows, "cancelled", 2)
	if err := ps.Append(rec); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := ps.Commit(); err == nil {
		t.Fatal("commit after the context ended succeeded")
	}
	rec.Release()
	if d := diskRecords(t, dir); d.commits != 0 {
		t.Fatalf("on disk: %+v, want no commit", d)
	}
	if got := readMerged(t, tbl, s); len(got) != 0 {
		t.Fatalf("aborted streams left %d rows", len(got))
	}
	// Aborted streams do not pile up: their segments are recycled as they end, no flush needed.
	for e := int64(10); e < 16; e++ {
		streamEpoch(t, s, "q", e, streamBatches, "aborted").Abort()
	}
	if d := diskRecords(t, dir); d.files > 2+wal.MaxFreeSegments {
		t.Fatalf("after 8 aborted streams of %d records: %d segment files (%+v), want at most %d", streamBatches, d.files, d, 2+wal.MaxFreeSegments)
	}
	if st := s.Stats(); st.UnflushedBytes != 0 {
		t.Fatalf("aborted streams left %d bytes accounted", st.UnflushedBytes)
	}
	s.Close()
	s = openShard(t, tbl, testShardID, smallSegments())
	if got := readMerged(t, tbl, s); len(got) != 0 {
		t.Fatalf("aborted streams resurrected %d rows after a reopen", len(got))
	}
	for e := int64(1); e <= 2; e++ {
		if ok, _ := s.EpochCommitted("q", e); ok {
			t.Fatalf("aborted epoch %d counts as committed", e)
		}
	}
	put(t, s, "q", 1, 0, 10, "again")
	checkRows(t, "the aborted epoch written again", readMerged(t, tbl, s), expectRows(0, 10, "again"))
}

// A stream whose epoch lands meanwhile through another put is refused at commit: the shard holds
// the epoch once, before and after a reopen.
func TestStreamPutDuplicateAtCommit(t *testing.T) {
	tbl, dir := localTable(t)
	s := openShard(t, tbl, testShardID, smallSegments())
	ps := streamEpoch(t, s, "q", 1, streamBatches, "streamed")
	put(t, s, "q", 1, 0, 10, "put")
	if d := diskRecords(t, dir); d.records != streamBatches {
		t.Fatalf("on disk before the commit: %+v, want the stream's %d records", d, streamBatches)
	}
	if _, err := ps.Commit(); !errors.Is(err, epochid.ErrCommitted) {
		t.Fatalf("commit of a duplicate stream: %v, want epochid.ErrCommitted", err)
	}
	checkRows(t, "before a reopen", readMerged(t, tbl, s), expectRows(0, 10, "put"))
	if d := diskRecords(t, dir); d.commits != 0 {
		t.Fatalf("on disk: %+v, want no commit", d)
	}
	s.Close()
	s = openShard(t, tbl, testShardID, smallSegments())
	checkRows(t, "after a reopen", readMerged(t, tbl, s), expectRows(0, 10, "put"))
}

// A fenced writer's streamed put is never acknowledged and its records never count, whether
// the claim came before the stream's records or between them and the commit.
func TestStreamPutFencedNeverCounts(t *testing.T) {
	tbl, dir := localTable(t)
	old := openShard(t, tbl, testShardID, smallSegments())
	ps := streamEpoch(t, old, "q", 1, streamBatches/2, "fenced")
	cur := openShard(t, tbl, testShardID, smallSegments()) // the claim fences old
	for i := 0; i < streamBatches/2; i++ {
		rec := makeRows(500000+int64(i)*streamBatchRows, streamBatchRows, "fenced", 1)
		err := ps.Append(rec)
		rec.Release()
		if err != nil {
			t.Fatalf("append after the claim: %v", err)
		}
	}
	if _, err := ps.Commit(); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced writer's commit: %v, want ErrFenced", err)
	}
	if d := diskRecords(t, dir); d.records != streamBatches || d.commits != 1 {
		t.Fatalf("on disk: %+v, want the fenced stream's %d records and its commit entry", d, streamBatches)
	}
	put(t, cur, "q", 2, 0, 10, "owner")
	checkRows(t, "the new owner", readMerged(t, tbl, cur), expectRows(0, 10, "owner"))
	cur.Close()
	s := openShard(t, tbl, testShardID, smallSegments())
	checkRows(t, "after a reopen", readMerged(t, tbl, s), expectRows(0, 10, "owner"))
	if ok, _ := s.EpochCommitted("q", 1); ok {
		t.Fatal("the fenced writer's streamed epoch counts")
	}
}

const streamCrashChildEnv = "FLIGHT_SINK_MEMWAL_STREAM_CRASH_CHILD"

// TestHelperProcessStreamer is not a test: it is the child TestKillBetweenStreamAndCommit kills.
// It commits streamed epoch 1, prints "ACK 1", streams epoch 2 without committing it, prints
// "STREAMED" and waits to be killed.
func TestHelperProcessStreamer(t *testing.T) {
	if os.Getenv(streamCrashChildEnv) != "1" {
		t.Skip("helper process")
	}
	store, err := objstore.NewLocal(os.Getenv(helperStoreEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	tbl, err := engine.Open(context.Background(), store, "events", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	s, err := OpenShard(context.Background(), tbl, testShardID, smallSegments())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if _, err := streamEpoch(t, s, "q", 1, streamBatches, "acked").Commit(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("ACK 1")
	streamEpoch(t, s, "q", 2, streamBatches, "uncommitted")
	fmt.Println("STREAMED")
	time.Sleep(time.Minute)
	os.Exit(3)
}

// kill -9 between a stream's records and its commit: after a restart the acknowledged streamed
// epoch is there whole and the uncommitted one is not there at all.
func TestKillBetweenStreamAndCommit(t *testing.T) {
	if os.Getenv(helperProcessEnv) == "1" {
		t.Skip("in the helper process")
	}
	tbl, dir := localTable(t)
	child := startHelper(t, "TestHelperProcessStreamer", dir,
		append(os.Environ(), helperProcessEnv+"=1", streamCrashChildEnv+"=1"), 90*time.Second)
	var lines []string
	for line := range child.lines {
		lines = append(lines, line)
		if line == "STREAMED" {
			break
		}
	}
	if len(lines) == 0 || lines[len(lines)-1] != "STREAMED" {
		_ = child.cmd.Wait()
		t.Fatalf("child stopped before streaming (%q): %s", lines, child.stderr.String())
	}
	if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.cmd.Wait()
	if d := diskRecords(t, dir); d.streams != 2 || d.commits != 1 {
		t.Fatalf("on disk after the kill: %+v, want the records of 2 streams and 1 commit", d)
	}

	s := openShard(t, tbl, testShardID, smallSegments())
	checkRows(t, "after kill -9 and a restart", readMerged(t, tbl, s), streamedRows(1, streamBatches, "acked"))
	if ok, _ := s.EpochCommitted("q", 1); !ok {
		t.Fatal("acknowledged streamed epoch 1 is not committed after the restart")
	}
	if ok, _ := s.EpochCommitted("q", 2); ok {
		t.Fatal("uncommitted streamed epoch 2 counts after the restart")
	}
}

// A streamed put larger than the backlog limit is admitted as a buffered one is when the shard
// has nothing else unflushed: its own batches never make it wait for itself.
func TestStreamPutLargerThanBacklogLimit(t *testing.T) {
	tbl, _ := localTable(t)
	o := smallSegments()
	o.MaxUnflushedBytes = 1
	s := openShard(t, tbl, testShardID, o)
	if _, err := streamEpoch(t, s, "q", 1, streamBatches, "big").Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	checkRows(t, "the streamed put", readMerged(t, tbl, s), streamedRows(1, streamBatches, "big"))
}

// The entry committing a stream is written only after the stream records in the segments the
// stream filled and left are durable (syncPendingLocked): when that sync fails, the commit fails,
// nothing is acknowledged, and after a reopen the epoch is not there and can be written again.
func TestStreamCommitWaitsForLeftSegments(t *testing.T) {
	tbl, dir := localTable(t)
	s := openShard(t, tbl, testShardID, smallSegments())
	ps := streamEpoch(t, s, "q", 1, streamBatches, "big")
	if d := diskRecords(t, dir); d.segments < 2 {
		t.Fatalf("on disk: %+v: the stream should span several segments", d)
	}
	synced := 0
	failed := errors.New("injected fdatasync failure")
	wal.SwapSyncLeftSegmentForTesting(func(*os.File) error { return failed })
	_, err := ps.Commit()
	wal.SwapSyncLeftSegmentForTesting(func(f *os.File) error { synced++; return unix.Fdatasync(int(f.Fd())) })
	defer func() {
		wal.SwapSyncLeftSegmentForTesting(func(f *os.File) error { return unix.Fdatasync(int(f.Fd())) })
	}()
	if !errors.Is(err, failed) {
		t.Fatalf("commit with the left segments' sync failing: %v, want the sync's error", err)
	}
	if d := diskRecords(t, dir); d.commits != 0 {
		t.Fatalf("on disk: %+v: a commit entry was written before its stream's records were durable", d)
	}
	s.Close()

	s = openShard(t, tbl, testShardID, smallSegments())
	defer s.Close()
	if ok, _ := s.EpochCommitted("q", 1); ok {
		t.Fatal("the epoch whose commit failed is committed after a reopen")
	}
	checkRows(t, "after the failed commit and a reopen", readMerged(t, tbl, s), nil)
	ps = streamEpoch(t, s, "q", 1, streamBatches, "again")
	if _, err := ps.Commit(); err != nil {
		t.Fatalf("commit the epoch again: %v", err)
	}
	if synced == 0 {
		t.Fatal("the second stream's commit synced no left segment: the test does not exercise them")
	}
	checkRows(t, "after the second stream", readMerged(t, tbl, s), streamedRows(1, streamBatches, "again"))
}
