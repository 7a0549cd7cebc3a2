package memwal

import (
	"context"
	"errors"
	"fmt"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/memwal/wal"
	"github.com/flight-sink/flight-sink/objstore"
)

// TableState is a MemWAL table as every view of it (table_stats, GetFlightInfo, inspect, the
// status page) reports it: the base version's rows, the acknowledged rows its shards hold that
// the version does not (flushed generations above its merged watermarks, and memtables, which are
// the WAL entries not yet flushed), and each streaming query's last epoch, from the base
// manifest's watermarks or from shard state, whichever is newer.
type TableState struct {
	// Manifest is the base version described.
	Manifest *engine.Manifest
	BaseRows int64
	// MemWALRows are acknowledged rows not yet folded into the base version: GenerationRows in
	// flushed generations above the merged watermarks plus MemtableRows not flushed yet. On a
	// table with a primary key a row that updates a key is counted here and its base row in
	// BaseRows until the fold (GetFlightInfo's total_records resolves keys exactly).
	MemWALRows, GenerationRows, MemtableRows int64
	// Streams holds each streaming query's last epoch.
	Streams map[string]StreamState
	// Shards are the shards' own details, read in the same snapshot (ShardSet.TableState; nil
	// otherwise).
	Shards []ShardStats
}

// Rows returns BaseRows + MemWALRows.
func (s TableState) Rows() int64 { return s.BaseRows + s.MemWALRows }

// StreamState is a streaming query's last epoch the table holds.
type StreamState struct {
	Epoch int64
	// Version is the base version that committed it; 0 when only the MemWAL holds it.
	Version uint64
	// TimestampNanos is when it was committed (Version) or flushed to a generation; 0 for an
	// epoch still only in a shard's WAL, which records no time.
	TimestampNanos int64
	// InMemWAL: the epoch is in a MemWAL shard, not folded into a base version yet.
	InMemWAL bool
}

// BaseTableState describes version m of a table by its base rows and watermarks alone: what
// ReadTableState reports of a table without MemWAL shards. It reads nothing.
func BaseTableState(m *engine.Manifest) TableState {
	st := TableState{Manifest: m, BaseRows: m.Rows(), Streams: make(map[string]StreamState, len(m.Streams))}
	for q, wm := range m.Streams {
		st.Streams[q] = StreamState{Epoch: wm.Epoch, Version: wm.Version, TimestampNanos: wm.TimestampNanos}
	}
	return st
}

// ReadTableState describes version m of tbl with its shards, read through shards (the resident
// writers of this process, or StoredShards; nil for a table without MemWAL shards). It never
// claims a shard: it reads each shard's manifest and the headers of its unflushed WAL entries
// from storage, which hold every acknowledged put whoever writes the shard.
//
// A fold that drains generations above m's merged watermarks while this reads (m is no longer
// the latest version) leaves rows that neither m nor the shards hold: ReadTableState fails rather
// than undercount them. ReadLatestTableState reads again from the newer version.
func ReadTableState(ctx context.Context, tbl *engine.Table, m *engine.Manifest, shards []ShardReader) (TableState, error) {
	st := BaseTableState(m)
	for _, r := range shards {
		var ss *StoredShard
		switch r := r.(type) {
		case *StoredShard:
			ss = r
		case *Shard:
			ss = r.storedView()
		default:
			ss = NewStoredShard(tbl, r.ShardID(), nil)
		}
		v, err := ss.view(ctx, nil)
		if err != nil {
			return st, fmt.Errorf("memwal shard %s of table %s: %w", r.ShardID(), tbl.Name(), err)
		}
		if v.manifest == nil {
			continue
		}
		merged := m.MemWALMerged[r.ShardID()]
		if v.manifest.drainedAbove(merged) {
			v.release()
			return st, fmt.Errorf("memwal shard %s of table %s above merged generation %d: %w", r.ShardID(), tbl.Name(), merged, errMergedSince)
		}
		for _, g := range v.manifest.GenerationsAbove(merged) {
			st.GenerationRows += g.Rows
		}
		epochs := make(map[string]StreamState)
		v.manifest.eachQueryWatermark(func(q string, wm QueryWatermark) {
			// At or below the merged watermark the epoch's generation is folded into the base.
			epochs[q] = StreamState{Epoch: wm.Epoch, TimestampNanos: wm.UpdatedNanos, InMemWAL: wm.Generation > merged}
		})
		v.replayed(func(_ uint64, p wal.Put) {
			st.MemtableRows += p.Rows
			if p.Epoch != nil {
				if e, seen := epochs[p.Epoch.QueryID]; !seen || p.Epoch.EpochID > e.Epoch {
					epochs[p.Epoch.QueryID] = StreamState{Epoch: p.Epoch.EpochID, InMemWAL: true}
				}
			}
		})
		v.release()
		for q, e := range epochs {
			if cur, seen := st.Streams[q]; !seen || e.Epoch > cur.Epoch {
				st.Streams[q] = e
			}
		}
	}
	st.MemWALRows = st.GenerationRows + st.MemtableRows
	return st, nil
}

// ReadLatestTableState describes the latest version of tbl with its shards (ReadTableState) in
// one consistent snapshot: the base version, the shards' rows above its merged watermarks and,
// with a primary key, the rows a read returns (one per key: BaseRows less the base rows MemWAL
// rows supersede, MemWALRows the keys' newest rows) all describe the same moment. A fold that
// commits and drains while it reads makes it start over from the newer version, so it never
// reports a fold's rows in neither part.
func ReadLatestTableState(ctx context.Context, tbl *engine.Table, shards []ShardReader) (TableState, error) {
	return readLatestState(ctx, tbl, shards, nil, nil)
}

// readLatestState is ReadLatestTableState, the keyed rows read in the cut of gate (nil: none);
// details (nil: none), called first in each attempt, reads the shards' details into the state.
func readLatestState(ctx context.Context, tbl *engine.Table, shards []ShardReader, gate *epochGate,
	details func(context.Context) ([]ShardStats, error)) (TableState, error) {
	for attempt := 1; ; attempt++ {
		st, err := readStateOnce(ctx, tbl, shards, gate, details)
		// A fold merged (and drained or deleted) generations after the base version was read:
		// the newer version holds their rows, so read again from there.
		retry := errors.Is(err, errMergedSince) || errors.Is(err, objstore.ErrNotFound)
		if err == nil || !retry || attempt >= mergedReadAttempts {
			return st, err
		}
	}
}

func readStateOnce(ctx context.Context, tbl *engine.Table, shards []ShardReader, gate *epochGate,
	details func(context.Context) ([]ShardStats, error)) (TableState, error) {
	m, err := tbl.Latest(ctx)
	if err != nil {
		return TableState{}, err
	}
	var stats []ShardStats
	if details != nil {
		// Read before the state: a fold that drains in between is seen by the state as drained
		// generations (errMergedSince), and the attempt starts over with fresh details.
		if stats, err = details(ctx); err != nil {
			return TableState{}, err
		}
	}
	st, err := ReadTableState(ctx, tbl, m, shards)
	if err != nil {
		return TableState{}, err
	}
	st.Shards = stats
	// On a keyed table a MemWAL row that rewrites a key replaces a row: count what a reader sees,
	// one row per key, captured over the same version m.
	if len(m.PrimaryKey) > 0 && st.MemWALRows > 0 {
		pm, mem, err := captureMerged(ctx, tbl, shards, gate, m.Version)
		if err != nil {
			return TableState{}, err
		}
		p := newPinnedRead(tbl, pm, mem)
		defer p.Release()
		if err := p.resolve(); err != nil {
			return TableState{}, err
		}
		if st.BaseRows, st.MemWALRows, err = p.VisibleRows(ctx); err != nil {
			return TableState{}, err
		}
	}
	return st, nil
}

// StoredShards returns the read-only views of m's shards of tbl (none without MemWAL shards), for
// callers that hold no writers (the admin commands).
func StoredShards(tbl *engine.Table, m *engine.Manifest) ([]ShardReader, error) {
	ids, err := TableShardIDs(m)
	if err != nil {
		return nil, err
	}
	out := make([]ShardReader, len(ids))
	for i, id := range ids {
		out[i] = NewStoredShard(tbl, id, nil)
	}
	return out, nil
}
