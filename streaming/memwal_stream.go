package streaming

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal"
)

// Large MemWAL epochs can be streamed (off unless memwal.Options.StreamPutBytes is set, serve
// --memwal-stream-put-bytes; docs/storage.md says why): once an epoch of a table without a primary
// key has passed StreamPutBytes, the rest of it is written into its shard's WAL as it arrives
// (memwal.ShardSet.StreamPut: a local disk streams, an object store buffers), so receiving and
// writing overlap. Smaller epochs, and every epoch of a keyed table (its rows are split by key
// over every shard: one put per shard, written once the epoch is whole), take the buffered path
// of writeMemWALEpoch. Either way nothing is acknowledged before the whole epoch is durable, and
// a stream that fails part-way (the client cancels, a bad batch) acknowledges nothing.

// memwalEpochHead reads the start of a MemWAL epoch from src: all of it (rest is nil), or, for a
// table without a primary key once the batches read pass the streaming threshold, the batches
// read so far and rest, the source to stream the remainder from. The batches are retained.
func (s *Sink) memwalEpochHead(ctx context.Context, m *engine.Manifest, src BatchSource) (head []arrow.RecordBatch, rest BatchSource, err error) {
	o := s.opts.MemWAL
	limit := o.EnsureDefaults().StreamPutBytes
	if len(m.PrimaryKey) > 0 || limit < 0 {
		head, err = readBatches(ctx, src)
		return head, nil, err
	}
	var bytes int64
	for bytes < limit && src.Next() {
		rec := src.RecordBatch()
		rec.Retain()
		head = append(head, rec)
		bytes += arrowschema.RecordBytes(rec)
	}
	if bytes < limit { // the source ended first
		if err := src.Err(); err != nil {
			arrowschema.ReleaseBatches(head)
			return nil, nil, fmt.Errorf("read stream: %w", err)
		}
		if err := ctx.Err(); err != nil {
			arrowschema.ReleaseBatches(head)
			return nil, nil, err
		}
		return head, nil, nil
	}
	return head, src, nil
}

// streamMemWALEpoch lands an epoch of a table without a primary key in its shard as its batches
// arrive: head are the batches read so far (released here), src the rest of the epoch. A replay
// of an epoch the shard holds is drained and acknowledged as a duplicate without a write.
func (s *Sink) streamMemWALEpoch(ctx context.Context, e *epoch, head []arrow.RecordBatch, src BatchSource) (Ack, error) {
	defer arrowschema.ReleaseBatches(head)
	t, m, ss := e.table, e.base, e.shards
	id := epochid.ID{QueryID: e.QueryID, EpochID: e.EpochID}
	// The shard is the one the buffered path picks (memwal.ShardSet.Route, through StreamPut),
	// and the replay check is the buffered path's too (every shard, heldElsewhere).
	// A replay's rows are counted only once it is drained: where it is held is noted with none,
	// and the count is added to the note then.
	var at replayHolding
	st, held, err := ss.StreamPut(ctx, e.arrived, m, &id,
		func(h memwal.EpochHolding) (bool, error) {
			held, err := heldElsewhere(h, &id)
			if held {
				at.note(h.Shard, h.Location, 0)
			}
			return held, err
		},
		func(w *memwal.Shard) (bool, error) { return shardHolds(w, &id, &at, 0) })
	if err != nil {
		return Ack{}, err
	}
	if held {
		n, err := drain(src)
		if err != nil {
			return Ack{}, fmt.Errorf("read stream: %w", err)
		}
		at.addSent(n + batchRows(head))
		return s.memwalAck(ctx, e, 0, true, &at)
	}
	var rows int64
	add := func(rec arrow.RecordBatch) error {
		if err := arrowschema.CheckWriteSchema(m.ArrowSchema(), rec.Schema(), m.PrimaryKey); err != nil {
			return fmt.Errorf("table %s: %w", t.Name(), err)
		}
		rows += rec.NumRows()
		return st.Append(rec)
	}
	for _, rec := range head {
		if err := add(rec); err != nil {
			st.Abort()
			return Ack{}, err
		}
	}
	for src.Next() {
		if err := add(src.RecordBatch()); err != nil {
			st.Abort()
			return Ack{}, err
		}
	}
	if err := src.Err(); err != nil {
		st.Abort()
		return Ack{}, fmt.Errorf("read stream: %w", err)
	}
	if err := ctx.Err(); err != nil {
		st.Abort()
		return Ack{}, err
	}
	done, err := st.Commit(ctx)
	if err != nil {
		return Ack{}, err
	}
	at.addSent(rows) // a shard found holding the epoch at the commit: this replay sent rows
	return s.memwalAck(ctx, e, rows, done, &at)
}
