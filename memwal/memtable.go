package memwal

import (
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal/wal"
)

// memtable holds the rows of consecutive WAL entries in memory. The active memtable takes new
// entries; a sealed one is immutable and waits for its flush. Batches are shared with snapshots,
// which retain what they read, so a memtable may release its batches once flushed.
//
// NB: a memtable is guarded by its Shard's mutex.
type memtable struct {
	entries  []memEntry
	rows     int64
	bytes    int64
	firstPos uint64 // position of the first entry; 0 while empty
	lastPos  uint64 // position of the last entry
	created  time.Time
}

// memEntry is one WAL entry's puts.
type memEntry struct {
	pos  uint64
	puts []wal.Put
}

// add appends the entry at pos; the memtable takes over the references to the puts' batches.
func (mt *memtable) add(pos uint64, puts []wal.Put, bytes int64) {
	if len(mt.entries) == 0 {
		mt.firstPos = pos
		mt.created = time.Now()
	}
	mt.entries = append(mt.entries, memEntry{pos: pos, puts: puts})
	mt.lastPos = pos
	mt.bytes += bytes
	for _, p := range puts {
		mt.rows += p.Rows
	}
}

func (mt *memtable) empty() bool { return len(mt.entries) == 0 }

// batches returns the memtable's batches in WAL order, not retained.
func (mt *memtable) batches() []arrow.RecordBatch { return mt.batchesHiding(nil) }

// batchesHiding returns the memtable's batches in WAL order, not retained, less those of the puts
// of the epochs in hide (a read's cut: epochGate).
func (mt *memtable) batchesHiding(hide map[epochid.ID]struct{}) []arrow.RecordBatch {
	var out []arrow.RecordBatch
	for _, e := range mt.entries {
		for _, p := range e.puts {
			if !hidden(hide, p) {
				out = append(out, p.Batches...)
			}
		}
	}
	return out
}

// hidden reports whether put p is of an epoch in hide.
func hidden(hide map[epochid.ID]struct{}, p wal.Put) bool {
	if len(hide) == 0 || p.Epoch == nil {
		return false
	}
	_, ok := hide[epochid.ID{QueryID: p.Epoch.QueryID, EpochID: p.Epoch.EpochID}]
	return ok
}

// identities calls fn for every put with an epoch identity, in WAL order.
func (mt *memtable) identities(fn func(q string, e int64, pos uint64)) {
	for _, en := range mt.entries {
		for _, p := range en.puts {
			if p.Epoch != nil {
				fn(p.Epoch.QueryID, p.Epoch.EpochID, en.pos)
			}
		}
	}
}

func (mt *memtable) release() {
	for _, e := range mt.entries {
		for _, p := range e.puts {
			for _, b := range p.Batches {
				b.Release()
			}
		}
	}
	mt.entries = nil
}
