package wal

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// BenchmarkWALAppend appends one durable WAL entry per op on local disk: the entry's Arrow IPC
// encoding and its put-if-absent create at the next position (fsynced), which is what a shard's
// group commit pays for the WAL itself. Unlike memwal's BenchmarkEpochPut it has no Shard: no grouping,
// no ownership confirmation, no memtable and no flushes. The entry holds one epoch of 1,000 rows,
// or as many rows as make an entry of about 64 KiB or 1 MiB; b.SetBytes is the entry's size.
//
//	go test ./memwal/wal -run '^$' -bench BenchmarkWALAppend -benchtime 20x
func BenchmarkWALAppend(b *testing.B) {
	perRow := walEntryBytesPerRow(b)
	for _, c := range []struct {
		name string
		rows int64
	}{
		{"size=1000rows", benchEpochRows},
		{"size=64KiB", (64 << 10) / perRow},
		{"size=1MiB", (1 << 20) / perRow},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			store, err := objstore.NewLocal(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			wal := NewLog(Config{Store: store, Shard: testShardID, Prefix: testPrefix})
			rec := makeRows(0, c.rows, "bench", 0)
			defer rec.Release()
			b.SetBytes(int64(len(encodeBenchEntry(b, 1, rec))))
			b.ReportAllocs()
			var pos uint64
			for b.Loop() {
				pos++
				if err := wal.Create(ctx, pos, encodeBenchEntry(b, pos, rec)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			checkWALAppended(b, wal, pos, c.rows)
		})
	}
}

// walEntryBytesPerRow is the encoded size per row of a 1,000-row WAL entry of rowsSchema.
func walEntryBytesPerRow(b *testing.B) int64 {
	rec := makeRows(0, benchEpochRows, "bench", 0)
	defer rec.Release()
	return int64(len(encodeBenchEntry(b, 1, rec))) / benchEpochRows
}

// encodeBenchEntry encodes the WAL entry at pos of writer epoch 1 holding rec as epoch pos of
// query "bench".
func encodeBenchEntry(b *testing.B, pos uint64, rec arrow.RecordBatch) []byte {
	put := Put{
		Epoch:   &epochid.ID{QueryID: "bench", EpochID: int64(pos)},
		Batches: []arrow.RecordBatch{rec},
		Rows:    rec.NumRows(),
	}
	data, err := EncodeEntry(pos, 1, rowsSchema, []Put{put}, memory.DefaultAllocator)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// checkWALAppended fails unless the WAL holds exactly the entries 1..last and the last one reads
// back as one put of rows rows.
func checkWALAppended(b *testing.B, wal *Log, last uint64, rows int64) {
	b.Helper()
	ctx := context.Background()
	positions, err := wal.List(ctx, 0)
	if err != nil {
		b.Fatal(err)
	}
	if uint64(len(positions)) != last || positions[len(positions)-1] != last {
		b.Fatalf("wal holds %d entries, want positions 1..%d", len(positions), last)
	}
	e, err := wal.Read(ctx, last, rowsSchema, memory.DefaultAllocator)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Release()
	if len(e.Puts) != 1 || e.Puts[0].Rows != rows || e.Puts[0].Epoch == nil || e.Puts[0].Epoch.EpochID != int64(last) {
		b.Fatalf("wal entry %d reads back as %d puts, want one of %d rows of epoch %d", last, len(e.Puts), rows, last)
	}
}
