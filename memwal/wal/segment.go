package wal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/flight-sink/flight-sink/internal/numbered"
	"github.com/flight-sink/flight-sink/objstore"
)

// WAL segments: the WAL of a shard on a local disk.
//
// On an object store every WAL entry is its own object, created put-if-absent (Log.Create):
// the store arbitrates who owns a position. On a local disk that costs a file create, an fsync, a
// link and a directory fsync per entry. There the shard writer instead appends its entries to
// segment files it alone writes, one fdatasync per group:
//
//   - A segment is named wal/<log number>.log. The log number is the writer epoch << 20 | a
//     sequence number, so no two writers ever share a segment and names sort by epoch.
//   - A record is a 16-byte header — CRC-32C (Castagnoli) of the payload continued over the
//     length and log number, the payload length, the segment's log number — and the payload, one
//     WAL entry exactly as it would be stored as an object (an Arrow IPC stream carrying
//     position, writer epoch, kind and puts, self-describing), encoded straight into the file.
//   - A reader takes a segment's records in order up to the first that does not check out: zeros
//     of a preallocated tail, a torn write (its CRC fails) or a stale record of the segment's
//     previous life (a recycled file keeps its old bytes; they carry the old log number).
//     Entries are appended after everything before them is durable; stream records (stream.go)
//     are not synced one by one, so any record after the last completed fdatasync may be torn.
//     But an fdatasync makes every earlier byte of the file durable, and nothing is acknowledged
//     before one completes after its record: nothing past the first bad record was acknowledged.
//   - Segments are preallocated (zero-filled and synced: a full-size spare in the background
//     once the current segment is half full, paced so that it never stands in the way of the
//     fdatasyncs that acknowledge puts; a 1 MiB one on the spot for a writer's first segment) and
//     recycled: a full-size segment whose entries are all flushed (at or below the manifest's
//     replay_after) goes on a free list and is renamed to the writer's next log number when the
//     current one is full, so steady-state appends overwrite allocated blocks and fdatasync writes
//     no metadata. An entry that finds the current segment full while the spare is still being
//     prepared grows the current segment instead of waiting for one (rotateLocked). Pebble's log
//     recycling and RocksDB's recycle_log_file_num are the model.
//
// Fencing (docs/storage.md, "Fencing on a local disk"). Positions are not arbitrated by
// the file system any more, so the fence rule decides which entries count: an entry of writer
// epoch e at position p counts unless a fence entry of a later epoch sits at a position <= p.
// A claim (memwal's ManifestStore.claimEpoch) commits the bumped epoch to the shard manifest first, then
// scans the WAL and writes its fence record, the first of its first segment, at the tip of the
// counting entries plus one. An old
// writer acknowledges a put only after the put's record is durable and a probe of the manifest
// shows its epoch is still current (memwal's Shard.writeEntry). So either the probe ran before the claim's
// manifest commit — then the record was written before the claim's scan, the scan sees it and the
// fence lands above it: it counts, and the new writer replayed it — or the probe sees the claim
// and the put is not acknowledged. A record the scan did not see lies at or above the fence and
// never counts. Segments are freed oldest log number first, so a fence outlives the records it
// hides (segmentWriter.release).

// SegmentHeaderSize is the size of a segment record's header: the room a record's encoder leaves
// before the payload (WriteStreamRecord's room).
const SegmentHeaderSize = 16

// MaxFreeSegments is how many flushed full-size segments a writer keeps on its free list to
// recycle; further flushed segments are deleted. A writer's WAL directory thus holds at most its
// current segment, a spare, this many free ones, and the segments not yet flushed or pinned.
const MaxFreeSegments = 4

const (
	segmentSeqBits    = 20
	segmentTmpPrefix  = ".tmp-segment-" // objstore.Local's temporary prefix: List skips these
	firstSegmentBytes = 1 << 20         // preallocated on the spot when no spare segment is ready
	preallocChunk     = 256 << 10       // bytes of a spare zero-filled and fdatasynced at a time
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segmentLogNumber is the log number of sequence seq of writer epoch's segments.
func segmentLogNumber(epoch, seq uint64) uint64 { return epoch<<segmentSeqBits | seq }

// recordCRC is a record's checksum: CRC-32C of its payload (payloadCRC), continued over the
// header's length and log number. The payload comes first so a record can be checksummed while
// it is streamed out, before its length is known.
func recordCRC(payloadCRC uint32, header []byte) uint32 {
	return crc32.Update(payloadCRC, castagnoli, header[4:SegmentHeaderSize])
}

// putRecordHeader fills header (SegmentHeaderSize bytes) for a payload of n bytes with CRC-32C
// payloadCRC, in segment logNum.
func putRecordHeader(header []byte, n int64, payloadCRC uint32, logNum uint64) {
	binary.LittleEndian.PutUint32(header[4:], uint32(n))
	binary.LittleEndian.PutUint64(header[8:], logNum)
	binary.LittleEndian.PutUint32(header[0:], recordCRC(payloadCRC, header))
}

// frameRecord fills the header room at the start of buf (SegmentHeaderSize bytes, followed by the
// payload) for a record of segment logNum.
func frameRecord(buf []byte, logNum uint64) {
	payload := buf[SegmentHeaderSize:]
	putRecordHeader(buf, int64(len(payload)), crc32.Checksum(payload, castagnoli), logNum)
}

// SegmentRecords returns the payloads of the records of segment logNum (ParseSegmentKey of its
// key) in b, a segment's bytes, in order, up to the first that does not check out (the end of
// the log: zeros, a torn tail, a stale record), and the offset where that end is. The payloads
// alias b. It never fails: bytes that are no records end the log where they start.
func SegmentRecords(b []byte, logNum uint64) (payloads [][]byte, end int64) {
	off := 0
	for len(b)-off >= SegmentHeaderSize {
		h := b[off : off+SegmentHeaderSize]
		n := int(binary.LittleEndian.Uint32(h[4:]))
		if n == 0 || binary.LittleEndian.Uint64(h[8:]) != logNum || n > len(b)-off-SegmentHeaderSize {
			break
		}
		payload := b[off+SegmentHeaderSize : off+SegmentHeaderSize+n]
		if recordCRC(crc32.Checksum(payload, castagnoli), h) != binary.LittleEndian.Uint32(h[0:]) {
			break
		}
		payloads = append(payloads, payload)
		off += SegmentHeaderSize + n
	}
	return payloads, int64(off)
}

// recordWriter writes a record's payload into a segment from off on, checksumming it.
type recordWriter struct {
	f   *os.File
	off int64
	n   int64
	crc uint32
}

// Write writes p at the record's next offset and continues the checksum over it.
func (r *recordWriter) Write(p []byte) (int, error) {
	n, err := r.f.WriteAt(p, r.off+r.n)
	r.crc = crc32.Update(r.crc, castagnoli, p[:n])
	r.n += int64(n)
	return n, err
}

// segmentFile is one segment the writer wrote or adopted, with the highest position it holds.
type segmentFile struct {
	logNum uint64
	path   string
	maxPos uint64
}

// segmentWriter appends one writer epoch's records to its segments. Entries are appended by
// whoever writes the shard's groups (commitMu); stream records (appendData, pin, unpin) by the
// goroutines of streamed puts, and release by the flusher: every method takes mu.
type segmentWriter struct {
	dir    string // the shard's wal directory on disk
	epoch  uint64
	size   int64               // preallocated bytes per segment
	onSync func(time.Duration) // Config.OnSegmentSync

	mu   sync.Mutex
	seq  uint64
	cur  *os.File
	curN uint64 // log number of cur
	cap  int64  // preallocated bytes of cur: a segment started with no spare at hand is smaller
	off  int64
	own  []segmentFile // written segments, oldest first; the last is cur
	free []segmentFile // flushed segments to recycle, oldest first
	old  []segmentFile // older writers' segments, deleted once flushed
	// dirty: cur holds stream records written since its last fdatasync (appendData).
	dirty bool
	// unsynced: segments a stream filled and left, their stream records not yet fdatasynced, and
	// dirUnsynced: a segment name made since the directory's last fsync. Both are made durable by
	// the next entry, before it is written (syncPendingLocked), not inside the stream.
	unsynced    []*os.File
	dirUnsynced bool
	// pins counts the open streams by the log number of the segment holding their first
	// record: those segments and every later one stay until the stream commits or ends.
	pins   map[uint64]int
	closed bool // by close: appendData fails (a stream outliving the writer)

	bw        *bufio.Writer // reused by appendWith
	spare     chan string   // a preallocated temporary file, when one is ready
	preparing bool
	wg        sync.WaitGroup // the goroutine preparing a spare
}

func newSegmentWriter(dir string, epoch uint64, size int64, onSync func(time.Duration)) *segmentWriter {
	return &segmentWriter{dir: dir, epoch: epoch, size: size, onSync: onSync, spare: make(chan string, 1)}
}

// adopt takes over older writers' segments found by the claim's scan: they are deleted (or
// recycled) once everything they hold is flushed.
func (w *segmentWriter) adopt(segs []segmentFile) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.old = append(w.old, segs...)
	sort.Slice(w.old, func(i, j int) bool { return w.old[i].logNum < w.old[j].logNum })
}

// writeLocked frames rec and writes it at the current offset, in the next segment when it does
// not fit the current one; the caller makes it durable and advances the offset. stream: rec is
// a stream record (nextSegmentLocked). REQUIRES: w.mu.
func (w *segmentWriter) writeLocked(rec []byte, stream bool) error {
	if w.cur == nil || (w.off > 0 && w.off+int64(len(rec)) > w.cap && (stream || w.rotateLocked())) {
		if err := w.nextSegmentLocked(stream); err != nil {
			return err
		}
	}
	frameRecord(rec, w.curN)
	if _, err := w.cur.WriteAt(rec, w.off); err != nil {
		return fmt.Errorf("append wal segment %d: %w", w.curN, err)
	}
	return nil
}

// append writes rec (header room + payload, framed here) as the next record and makes it
// durable with one fdatasync. pos is the entry's position.
func (w *segmentWriter) append(rec []byte, pos uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.syncPendingLocked(); err != nil {
		return err
	}
	if err := w.writeLocked(rec, false); err != nil {
		return err
	}
	// The record is durable once this returns; the ack waits for it (and for the ownership probe).
	if err := unix.Fdatasync(int(w.cur.Fd())); err != nil {
		return fmt.Errorf("fdatasync wal segment %d: %w", w.curN, err)
	}
	w.dirty = false
	w.off += int64(len(rec))
	w.own[len(w.own)-1].maxPos = pos
	w.prepareLocked()
	return nil
}

// appendWith writes the record whose payload write produces (about estimate bytes) as the next
// record, streamed into the segment as it is encoded (no copy of the entry in memory), and makes
// it durable with one fdatasync. pos is the entry's position. streamsFrom, when not 0, is the
// log number of the oldest segment holding stream records the entry commits: that segment and
// the later ones count as holding pos (they are freed only once pos is flushed).
func (w *segmentWriter) appendWith(pos uint64, estimate int64, streamsFrom uint64, write func(io.Writer) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Before the entry goes in: it may commit stream records in the segments a stream left, and
	// it must never be durable while they are not.
	if err := w.syncPendingLocked(); err != nil {
		return err
	}
	if w.cur == nil || (w.off > 0 && w.off+SegmentHeaderSize+estimate > w.cap && w.rotateLocked()) {
		if err := w.nextSegmentLocked(false); err != nil {
			return err
		}
	}
	rw := &recordWriter{f: w.cur, off: w.off + SegmentHeaderSize}
	if w.bw == nil {
		w.bw = bufio.NewWriterSize(rw, 1<<20)
	}
	w.bw.Reset(rw)
	if err := write(w.bw); err != nil {
		return err
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("append wal segment %d: %w", w.curN, err)
	}
	var header [SegmentHeaderSize]byte
	putRecordHeader(header[:], rw.n, rw.crc, w.curN)
	// The header goes in after the payload; both are covered by the one fdatasync below, before
	// which nothing is acknowledged, and a crash in between leaves a record whose CRC fails: the
	// end of the log.
	if _, err := w.cur.WriteAt(header[:], w.off); err != nil {
		return fmt.Errorf("append wal segment %d: %w", w.curN, err)
	}
	// This one fdatasync also makes durable the stream records the entry commits that are in this
	// segment; those in earlier segments were synced above (syncPendingLocked) or when the
	// segment was closed.
	synced := time.Now()
	if err := unix.Fdatasync(int(w.cur.Fd())); err != nil {
		return fmt.Errorf("fdatasync wal segment %d: %w", w.curN, err)
	}
	if w.onSync != nil {
		w.onSync(time.Since(synced))
	}
	w.dirty = false
	w.off += SegmentHeaderSize + rw.n
	w.own[len(w.own)-1].maxPos = pos
	if streamsFrom != 0 {
		for i := range w.own {
			if w.own[i].logNum >= streamsFrom {
				w.own[i].maxPos = max(w.own[i].maxPos, pos)
			}
		}
	}
	w.prepareLocked()
	return nil
}

// appendData writes rec (header room + payload, framed here) as the next record without making
// it durable: a stream record, which counts only once a later entry commits its stream, and that
// entry's fdatasync (or the one closing this segment) makes it durable. Its write-back is
// started now, so the commit's fdatasync has little left to write.
func (w *segmentWriter) appendData(rec []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("append wal segment: %w", ErrClosed)
	}
	if err := w.writeLocked(rec, true); err != nil {
		return err
	}
	// Best effort: without it the commit's fdatasync writes the whole stream at the end.
	_ = unix.SyncFileRange(int(w.cur.Fd()), w.off, int64(len(rec)), unix.SYNC_FILE_RANGE_WRITE)
	w.dirty = true
	w.off += int64(len(rec))
	// No spare is prepared for stream records: zero-filling and syncing a full segment in the
	// background per segment a large stream fills would double its disk writes. A stream that
	// outruns the free list gets new, unfilled segments (nextSegmentLocked); the commit's syncs pay
	// their metadata once.
	return nil
}

// pin marks the start of a stream: the current segment (where its first record goes, or an
// earlier one) and every later segment are kept until unpin. It returns the pinned log number.
func (w *segmentWriter) pin() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.curN
	if w.cur == nil {
		n = segmentLogNumber(w.epoch, w.seq+1)
	}
	if w.pins == nil {
		w.pins = make(map[uint64]int)
	}
	w.pins[n]++
	return n
}

// unpin ends the pin of a stream that started at log number n.
func (w *segmentWriter) unpin(n uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pins[n]--; w.pins[n] <= 0 {
		delete(w.pins, n)
	}
}

// pinnedLocked reports whether segment logNum holds records of an open stream.
//
// REQUIRES: w.mu held.
func (w *segmentWriter) pinnedLocked(logNum uint64) bool {
	for n := range w.pins {
		if n <= logNum {
			return true
		}
	}
	return false
}

// rotateLocked decides, for an entry that does not fit the current segment, whether it goes to
// the next one: yes when a recycled or spare segment is at hand (or none is on its way), no while
// a spare is still being prepared. Then the entry grows the current segment past its preallocated
// end: that entry's fdatasync also writes the file's new size, a fraction of a millisecond,
// where making a segment on the spot (zero-filling and syncing it, a directory fsync) would stall
// the put for several. A reader takes a grown segment's records up to its end like any other.
//
// REQUIRES: w.mu held.
func (w *segmentWriter) rotateLocked() bool {
	if len(w.free) > 0 || len(w.spare) > 0 {
		return true
	}
	w.prepareLocked()
	return !w.preparing
}

// prepareLocked starts preparing a full-size spare segment once the current one is half full and
// no free or spare segment is at hand.
//
// REQUIRES: w.mu held.
func (w *segmentWriter) prepareLocked() {
	if !w.preparing && len(w.free) == 0 && len(w.spare) == 0 && w.off > w.cap/2 {
		w.preparing = true
		w.wg.Add(1)
		go w.prepareSpare()
	}
}

// nextSegmentLocked closes the current segment and opens the next: a recycled free segment, the
// prepared spare, or (when neither is there) a new file. For an entry the new name is made
// durable (a directory fsync) before any record goes in, and a new file is a small preallocated
// one. For a stream record (stream) nothing is synced here: a segment the stream leaves goes on
// w.unsynced, the new name marks the directory unsynced, and a new file is a full-size segment
// not zero-filled (its records are synced in bulk, so the metadata of extending it is paid
// once); the next entry syncs them all before it is written (syncPendingLocked). A crash before
// that loses only stream records no entry has committed yet, which never count.
//
// REQUIRES: w.mu held.
func (w *segmentWriter) nextSegmentLocked(stream bool) error {
	if w.seq+1 >= 1<<segmentSeqBits {
		return fmt.Errorf("wal segments of writer epoch %d exhausted", w.epoch)
	}
	if w.cur != nil {
		if w.dirty {
			// The stream records in cur become durable before any entry goes in after them,
			// wherever it goes: the fdatasync of an entry covers its own segment only.
			w.unsynced = append(w.unsynced, w.cur)
			w.dirty = false
		} else {
			w.cur.Close()
		}
		w.cur = nil
	}
	n := segmentLogNumber(w.epoch, w.seq+1)
	path := filepath.Join(w.dir, numbered.Key("", n, SegmentExt))
	var from string
	switch {
	case len(w.free) > 0:
		// Oldest first: a fence segment is recycled only after the older segments whose stale
		// records its fence hides (those are older still, so they went before it).
		from, w.free = w.free[0].path, w.free[1:]
	default:
		select {
		case from = <-w.spare:
		default:
		}
	}
	capacity := w.size
	if fi, err := os.Stat(from); from != "" && err == nil {
		capacity = fi.Size() // a recycled segment keeps its blocks, whatever size it grew to
	}
	var f *os.File
	var err error
	switch {
	case from == "" && stream:
		// A stream outran the free list: a new file it extends as it writes.
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("create wal segment: %w", err)
		}
	case from == "":
		// Nothing preallocated at hand (the writer's first segment, or a spare that could not be
		// prepared): preallocate a small segment now, so appends still overwrite allocated
		// blocks; a full-size spare is prepared once it is half full (a shard that hardly writes
		// never costs a full segment).
		capacity = min(w.size, firstSegmentBytes)
		if from, err = preallocate(w.dir, capacity, false); err != nil {
			return fmt.Errorf("preallocate wal segment: %w", err)
		}
		fallthrough
	default:
		if err := os.Rename(from, path); err != nil {
			return fmt.Errorf("recycle wal segment: %w", err)
		}
		if f, err = os.OpenFile(path, os.O_RDWR, 0o644); err != nil {
			return fmt.Errorf("open wal segment: %w", err)
		}
	}
	w.dirUnsynced = true
	if !stream {
		// The segment's name must survive a crash before a record in it is acknowledged; this is
		// the one directory fsync per segment (not per entry).
		if err := w.syncPendingLocked(); err != nil {
			f.Close()
			return fmt.Errorf("open wal segment: %w", err)
		}
	}
	w.seq++
	w.cur, w.curN, w.cap, w.off = f, n, capacity, 0
	w.own = append(w.own, segmentFile{logNum: n, path: path})
	return nil
}

// prepareSpare zero-fills and syncs a temporary file of the segment size and offers it as the
// next segment.
func (w *segmentWriter) prepareSpare() {
	defer w.wg.Done()
	path, err := preallocateSpare(w.dir, w.size)
	w.mu.Lock()
	w.preparing = false
	w.mu.Unlock()
	if err != nil {
		return // the next segment starts empty instead
	}
	select {
	case w.spare <- path:
	default:
		os.Remove(path)
	}
}

// preallocateSpare makes a spare segment, paced (a variable: a test holds it back,
// SwapPreallocateSpareForTesting).
var preallocateSpare = func(dir string, size int64) (string, error) { return preallocate(dir, size, true) }

// syncLeftSegment makes a segment a stream left durable (a variable: a test makes it fail,
// SwapSyncLeftSegmentForTesting).
var syncLeftSegment = func(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// SwapPreallocateSpareForTesting replaces the function that prepares a full-size spare segment
// in the background (it returns the path of a zero-filled, synced temporary file in dir) with f,
// and returns the function it replaced. It is for tests only (holding a spare back, or making it
// fail) and must not be called while a writer may be preparing a spare.
func SwapPreallocateSpareForTesting(f func(dir string, size int64) (string, error)) (previous func(dir string, size int64) (string, error)) {
	previous, preallocateSpare = preallocateSpare, f
	return previous
}

// SwapSyncLeftSegmentForTesting replaces the function that makes durable a segment a stream
// filled and left (by default an fdatasync of it) with f, and returns the function it replaced.
// It is for tests only (making that sync fail, or counting it) and must not be called while a
// writer may be appending.
func SwapSyncLeftSegmentForTesting(f func(*os.File) error) (previous func(*os.File) error) {
	previous, syncLeftSegment = syncLeftSegment, f
	return previous
}

// syncPendingLocked makes durable what streams left unsynced (nextSegmentLocked): the stream
// records of the segments they filled, then the directory's new names. An entry calls it before
// it is written.
//
// REQUIRES: w.mu held.
func (w *segmentWriter) syncPendingLocked() error {
	for len(w.unsynced) > 0 {
		f := w.unsynced[0]
		if err := syncLeftSegment(f); err != nil {
			return fmt.Errorf("fdatasync wal segment %s: %w", filepath.Base(f.Name()), err)
		}
		f.Close()
		w.unsynced = w.unsynced[1:]
	}
	if w.dirUnsynced {
		if err := objstore.SyncDir(w.dir); err != nil {
			return fmt.Errorf("sync wal dir: %w", err)
		}
		w.dirUnsynced = false
	}
	return nil
}

// preallocate zero-fills and syncs a temporary segment file of size bytes in dir. paced (a spare
// prepared in the background) writes it a chunk at a time, each chunk fdatasynced and followed by
// a pause as long as the chunk took, so the device spends at most half its time on it.
// The fdatasync per chunk, not only a write-back of it, is what keeps it out of the way of the
// fdatasync that acknowledges puts: on a virtual disk the writes reach the host's cache, and the
// next flush, whoever issues it, pays for every byte written since the last one. In a trace of
// `bench --only memwal-floor`, a 16 MiB zero-fill written back a MiB at a time without flushing
// makes the WAL's fdatasyncs beside it take 5-17 ms.
func preallocate(dir string, size int64, paced bool) (string, error) {
	path := filepath.Join(dir, segmentTmpPrefix+uuid.NewString())
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	defer f.Close()
	chunk := int64(1 << 20)
	if paced {
		chunk = preallocChunk
	}
	zero := make([]byte, chunk)
	for off := int64(0); off < size; off += chunk {
		n := min(chunk, size-off)
		began := time.Now()
		if _, err := f.Write(zero[:n]); err != nil {
			os.Remove(path)
			return "", err
		}
		if !paced {
			continue // one sync at the end: a small segment made on the spot
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			os.Remove(path)
			return "", err
		}
		time.Sleep(time.Since(began))
	}
	if err := f.Sync(); err != nil {
		os.Remove(path)
		return "", err
	}
	return path, nil
}

// release frees the segments whose entries are all at or below replayAfter (flushed): older
// writers' segments are deleted, the writer's own go on the free list (up to MaxFreeSegments,
// the rest deleted). The current segment stays.
func (w *segmentWriter) release(replayAfter uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	deleted := false
	// Older writers' segments first, oldest first: their stale records are hidden by fences in
	// later segments, which must outlive them.
	for len(w.old) > 0 && w.old[0].maxPos <= replayAfter {
		if err := os.Remove(w.old[0].path); err == nil || errors.Is(err, fs.ErrNotExist) {
			deleted = true
		}
		w.old = w.old[1:]
	}
	if len(w.old) > 0 {
		return // the writer's own segments (fences among them) wait for the older ones
	}
	// The deletions are durable before a fence segment is recycled: a crash must not bring back
	// an older writer's segment whose fences are gone. Until a directory sync succeeds, the
	// writer's own segments wait.
	if deleted {
		if err := objstore.SyncDir(w.dir); err != nil {
			return
		}
	}
	// Then the writer's own, oldest first, every one but the current whose entries are all
	// flushed and that no open stream needs: a segment holding only records of ended streams (it
	// holds no position) goes as soon as it is full, so aborted streams never pile up. Its own
	// segments hold only this writer's records, which no fence of its own hides: their order
	// does not matter once the older writers' segments are gone.
	kept := w.own[:0]
	for i, s := range w.own {
		if i == len(w.own)-1 || s.maxPos > replayAfter || w.pinnedLocked(s.logNum) {
			kept = append(kept, s)
			continue
		}
		// Only full-size segments are recycled: a small one (made on the spot) would make the
		// writer switch segments, with a directory fsync each, every few entries.
		if fi, err := os.Stat(s.path); err == nil && fi.Size() >= w.size && len(w.free) < MaxFreeSegments {
			w.free = append(w.free, s)
		} else {
			os.Remove(s.path)
		}
	}
	w.own = kept
}

// close closes the current segment and drops a prepared spare.
func (w *segmentWriter) close() {
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.cur != nil {
		w.cur.Close()
		w.cur = nil
	}
	for _, f := range w.unsynced {
		f.Close() // stream records no entry committed: they need not be durable
	}
	w.unsynced = nil
	select {
	case p := <-w.spare:
		os.Remove(p)
	default:
	}
}
