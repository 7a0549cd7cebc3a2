package memwal

import (
	"time"

	"github.com/apache/arrow-go/v18/arrow"

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
	// tokens are the registrations (epochGate) the puts were made under, by index; nil, or 0 for
	// a put of none (an entry replayed from the WAL).
	tokens []uint64
}

// add appends the entry at pos, its puts made under tokens (nil: none); the memtable takes over
// the references to the puts' batches.
func (mt *memtable) add(pos uint64, puts []wal.Put, tokens []uint64, bytes int64) {
	if len(mt.entries) == 0 {
		mt.firstPos = pos
		mt.created = time.Now()
	}
	mt.entries = append(mt.entries, memEntry{pos: pos, puts: puts, tokens: tokens})
	mt.lastPos = pos
	mt.bytes += bytes
	for _, p := range puts {
		mt.rows += p.Rows
	}
}

func (mt *memtable) empty() bool { return len(mt.entries) == 0 }

// batches returns the memtable's batches in WAL order, not retained.
func (mt *memtable) batches() []arrow.RecordBatch { return mt.batchesHiding(readCut{}) }

// batchesHiding returns the memtable's batches in WAL order, not retained, less those of the puts
// a read's cut hides (made by requests in flight: epochGate).
func (mt *memtable) batchesHiding(cut readCut) []arrow.RecordBatch {
	var out []arrow.RecordBatch
	for _, e := range mt.entries {
		for i, p := range e.puts {
			if i < len(e.tokens) && cut.hides(e.tokens[i]) {
				continue
			}
			out = append(out, p.Batches...)
		}
	}
	return out
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
