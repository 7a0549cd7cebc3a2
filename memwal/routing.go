package memwal

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/expr"
)

// Table config keys of a MemWAL table.
const (
	// ConfigShards is the number of shards ("2").
	ConfigShards = "flight_sink.memwal.shards"
	// ConfigShardIDs optionally lists the shard ids, comma separated; without it they are
	// ShardIDs(n).
	ConfigShardIDs = "flight_sink.memwal.shard_ids"
)

// MaxShards bounds the MemWAL shards of one table: a create asking for more is refused, and a
// table config naming more is not read.
const MaxShards = 1024

// shardNamespace roots the derived shard ids.
var shardNamespace = uuid.MustParse("6f1c3a52-9d0e-4c5b-8a57-2d1f0e6b9c41")

// ShardIDs returns the default ids of a table's n shards: fixed UUIDs derived from the shard's
// index, so every process agrees on them without coordination.
func ShardIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.NewSHA1(shardNamespace, []byte("shard/"+strconv.Itoa(i))).String()
	}
	return ids
}

// TableShardIDs returns the shard ids of the table version m describes, from its config: nil
// when the table has no MemWAL shards.
func TableShardIDs(m *engine.Manifest) ([]string, error) {
	if ids := strings.TrimSpace(m.Config[ConfigShardIDs]); ids != "" {
		out := strings.Split(ids, ",")
		if len(out) > MaxShards {
			return nil, fmt.Errorf("memwal: table config %s lists %d shards, more than %d", ConfigShardIDs, len(out), MaxShards)
		}
		for i, id := range out {
			out[i] = strings.TrimSpace(id)
			if _, err := uuid.Parse(out[i]); err != nil {
				return nil, fmt.Errorf("memwal: table config %s: %q is not a UUID", ConfigShardIDs, out[i])
			}
		}
		return out, nil
	}
	s := strings.TrimSpace(m.Config[ConfigShards])
	if s == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > MaxShards {
		return nil, fmt.Errorf("memwal: table config %s=%q is not a shard count in 0..%d", ConfigShards, s, MaxShards)
	}
	return ShardIDs(n), nil
}

// ShardForPartition picks the shard of a put without a primary key: by query and partition, so
// one query's epochs stay in order in one shard and a multi-writer epoch's partitions spread.
func ShardForPartition(queryID string, partition, n int) int {
	h := fnv.New64a()
	h.Write([]byte(queryID))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(partition)))
	return int(h.Sum64() % uint64(n))
}

// PartitionByKey splits rec by the hash of its primary key pk into n batches, one per shard
// (nil where a shard gets no row), so that one key always lands in one shard. The caller releases
// the batches.
func PartitionByKey(ctx context.Context, rec arrow.RecordBatch, pk []string, n int) ([]arrow.RecordBatch, error) {
	out := make([]arrow.RecordBatch, n)
	if n == 1 {
		rec.Retain()
		out[0] = rec
		return out, nil
	}
	enc, err := expr.NewKeyEncoder(rec, pk)
	if err != nil {
		return nil, fmt.Errorf("memwal: partition by key: %w", err)
	}
	shardOf := make([]int, rec.NumRows())
	counts := make([]int, n)
	var kb []byte
	for row := range shardOf {
		// Route by the key's engine encoding: keys the fold's upsert holds equal (-0.0 and 0.0,
		// every NaN) land in one shard. A row with a null key goes to shard 0, whose put refuses it.
		var ok bool
		if kb, ok = enc.AppendKey(kb[:0], row); ok {
			h := fnv.New64a()
			h.Write(kb)
			shardOf[row] = int(h.Sum64() % uint64(n))
		}
		counts[shardOf[row]]++
	}
	for s := 0; s < n; s++ {
		if counts[s] == 0 {
			continue
		}
		if counts[s] == int(rec.NumRows()) {
			rec.Retain()
			out[s] = rec
			continue
		}
		keep := make([]int32, 0, counts[s])
		for row, sh := range shardOf {
			if sh == s {
				keep = append(keep, int32(row))
			}
		}
		part, err := arrowschema.TakeRecord(memory.DefaultAllocator, rec, keep)
		if err != nil {
			arrowschema.ReleaseBatches(out)
			return nil, fmt.Errorf("memwal: partition by key: %w", err)
		}
		out[s] = part
	}
	return out, nil
}
