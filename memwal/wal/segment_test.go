package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/flight-sink/flight-sink/internal/epochid"
)

// A segment's records end at the first one that does not check out, whatever follows it.
func TestSegmentRecordsEnd(t *testing.T) {
	const logNum = 7<<segmentSeqBits | 3
	record := func(n uint64, payload string) []byte {
		b := append(make([]byte, SegmentHeaderSize), payload...)
		frameRecord(b, n)
		return b
	}
	good := slices.Concat(record(logNum, "first"), record(logNum, "second"))
	torn := record(logNum, "torn-record")
	flipped := slices.Clone(torn)
	flipped[len(flipped)-1] ^= 1
	for _, tc := range []struct {
		name string
		tail []byte
	}{
		{"zeros of a preallocated segment", make([]byte, 4096)},
		{"torn tail: header and part of the payload", torn[:len(torn)-4]},
		{"torn tail: part of the header", torn[:SegmentHeaderSize-3]},
		{"a flipped payload byte", flipped},
		{"a stale record of the segment's previous life", record(logNum-1, "stale but well-formed")},
		{"a length past the end", func() []byte {
			b := record(logNum, "x")
			binary.LittleEndian.PutUint32(b[4:], 1<<30)
			return b
		}()},
		{"nothing", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := slices.Concat(good, tc.tail)
			if tc.tail != nil {
				b = append(b, record(logNum, "after the end")...)
			}
			payloads, end := SegmentRecords(b, logNum)
			if len(payloads) != 2 || string(payloads[0]) != "first" || string(payloads[1]) != "second" || end != int64(len(good)) {
				t.Fatalf("records %q ending at %d, want [first second] ending at %d", payloads, end, len(good))
			}
		})
	}
}

// Any bytes read as a segment give records that check out, in order, ending inside the bytes;
// nothing panics.
func FuzzSegmentRecords(f *testing.F) {
	const logNum = 3<<segmentSeqBits | 1
	rec := append(make([]byte, SegmentHeaderSize), "payload"...)
	frameRecord(rec, logNum)
	f.Add(rec)
	f.Add(slices.Concat(rec, rec, make([]byte, 64)))
	f.Add(rec[:len(rec)-1])
	// A streamed put: two stream records, then the entry committing them; and the same with a
	// record missing, and cut short.
	streamed := streamedSegment(f, logNum)
	f.Add(streamed)
	f.Add(streamed[:len(streamed)-7])
	first := SegmentHeaderSize + int(binary.LittleEndian.Uint32(streamed[4:]))
	f.Add(streamed[first:])
	f.Fuzz(func(t *testing.T, b []byte) {
		payloads, end := SegmentRecords(b, logNum)
		if end < 0 || end > int64(len(b)) {
			t.Fatalf("end %d outside %d bytes", end, len(b))
		}
		var n int64
		for _, p := range payloads {
			n += SegmentHeaderSize + int64(len(p))
		}
		if n != end {
			t.Fatalf("records take %d bytes, end is %d", n, end)
		}
		// Every record reads as a stream record or an entry, or is corrupt; an entry committing
		// a stream reads its records (from this segment) whole, or is corrupt.
		wl := &Log{streams: map[string][]streamRecord{}}
		var entries [][]byte
		for _, p := range payloads {
			h, err := DecodeHeader(fuzzWALKey, p)
			switch {
			case err != nil:
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("header error %q does not wrap ErrCorrupt", err)
				}
			case h.StreamID != "":
				wl.streams[h.StreamID] = append(wl.streams[h.StreamID], streamRecord{epoch: h.WriterEpoch, seq: h.StreamSeq, data: p})
			default:
				entries = append(entries, p)
			}
		}
		for _, p := range entries {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			e, err := decodeEntryFrom(fuzzWALKey, p, rowsSchema, mem, wl.streamRecords)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("decode error %q does not wrap ErrCorrupt", err)
				}
				continue
			}
			for i, put := range e.Puts {
				var rows int64
				for _, b := range put.Batches {
					rows += b.NumRows()
				}
				if rows != put.Rows {
					t.Fatalf("put %d claims %d rows and holds %d", i, put.Rows, rows)
				}
			}
			e.Release()
			mem.AssertSize(t, 0)
		}
	})
}

// streamedSegment returns segment logNum's bytes holding a streamed put of two batches: its two
// stream records, then the entry at position 7 (fuzzWALKey) committing them.
func streamedSegment(t testing.TB, logNum uint64) []byte {
	var seg []byte
	ref := &StreamRef{ID: "s-1"}
	var batches []arrow.RecordBatch
	for i := 0; i < 2; i++ {
		b := makeRows(int64(i)*10, 10, "s", 1)
		defer b.Release()
		batches = append(batches, b)
		var buf bytes.Buffer
		if err := WriteStreamRecord(&buf, SegmentHeaderSize, 2, ref.ID, i, rowsSchema, b); err != nil {
			t.Fatal(err)
		}
		rec := buf.Bytes()
		ref.CRC = crc32.Update(ref.CRC, castagnoli, rec[SegmentHeaderSize:])
		ref.Records++
		frameRecord(rec, logNum)
		seg = append(seg, rec...)
	}
	puts := []Put{{Epoch: &epochid.ID{QueryID: "q", EpochID: 1}, Batches: batches, Rows: 20, Stream: ref}}
	rec, err := encodeRecord(SegmentHeaderSize, 7, 2, rowsSchema, puts, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	frameRecord(rec, logNum)
	return append(seg, rec...)
}

// A streamed put read back from its segment: the entry's put holds the stream records' batches.
func TestSegmentStreamedPutDecodes(t *testing.T) {
	const logNum = 2<<segmentSeqBits | 1
	payloads, _ := SegmentRecords(streamedSegment(t, logNum), logNum)
	if len(payloads) != 3 {
		t.Fatalf("%d records, want 3", len(payloads))
	}
	wl := &Log{streams: map[string][]streamRecord{}}
	for i, p := range payloads[:2] {
		wl.streams["s-1"] = append(wl.streams["s-1"], streamRecord{epoch: 2, seq: i, data: p})
	}
	e, err := decodeEntryFrom(fuzzWALKey, payloads[2], rowsSchema, memory.DefaultAllocator, wl.streamRecords)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Release()
	if len(e.Puts) != 1 || len(e.Puts[0].Batches) != 2 || e.Puts[0].Rows != 20 || e.Puts[0].Epoch.EpochID != 1 {
		t.Fatalf("decoded %+v, want one put of epoch 1 with 2 batches, 20 rows", e.Puts)
	}
	for _, c := range []struct {
		name    string
		streams map[string][]streamRecord
	}{
		{"a record missing", map[string][]streamRecord{"s-1": wl.streams["s-1"][:1]}},
		{"another writer epoch", map[string][]streamRecord{"s-1": {{epoch: 3, seq: 0, data: payloads[0]}, {epoch: 3, seq: 1, data: payloads[1]}}}},
		{"records swapped", map[string][]streamRecord{"s-1": {{epoch: 2, seq: 0, data: payloads[1]}, {epoch: 2, seq: 1, data: payloads[0]}}}},
	} {
		bad := &Log{streams: c.streams}
		if _, err := decodeEntryFrom(fuzzWALKey, payloads[2], rowsSchema, memory.DefaultAllocator, bad.streamRecords); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: %v, want ErrCorrupt", c.name, err)
		}
	}
	if _, err := DecodeEntry(fuzzWALKey, payloads[2], rowsSchema, memory.DefaultAllocator); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a streamed put read without its records: %v, want ErrCorrupt", err)
	}
}
