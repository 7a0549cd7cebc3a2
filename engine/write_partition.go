package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/partition"
)

// Writes into a partitioned table (Manifest.PartitionSpec): every data file holds the rows of one
// partition, and its fragment carries that partition's tuple (Fragment.Partition).
//
// A Writer groups each batch's rows by partition (partition.Bound.Group) and buffers each
// partition's rows until Finish, so that a write (an epoch, an append, an upsert, a fold) makes
// one file per partition: no file is open per partition, one file is encoded at a time. A
// partition whose buffered rows reach the fragment target is written out at once, and when the
// rows buffered over all partitions pass Options.PartitionBufferBytes the largest partition is:
// a partition gets more than one file only then.

// ConfigMaxPartitionsPerWrite is the table config key of the most partitions one write may hold
// rows of (a decimal integer); unset, Options.MaxPartitionsPerWrite holds. A write past it fails
// with ErrTooManyPartitions before anything of it is committed.
const ConfigMaxPartitionsPerWrite = "partition.max_per_write"

// DefaultMaxPartitionsPerWrite is Options.MaxPartitionsPerWrite's default.
const DefaultMaxPartitionsPerWrite = 1000

// DefaultPartitionBufferBytes is Options.PartitionBufferBytes's default.
const DefaultPartitionBufferBytes = 128 << 20

// WithPartitionSpec makes the writer split rows by spec: for the data files of a table's first
// commit, written before the table (and its manifest) exists.
func WithPartitionSpec(spec partition.Spec) WriterOption {
	return func(w *Writer) { w.spec = spec }
}

// WithoutPartitionLimit lifts the limit on partitions per write, for writes that are not one
// client's write: a fold of many epochs, compaction.
func WithoutPartitionLimit() WriterOption { return func(w *Writer) { w.maxPartitions = 0 } }

// partitionSpecOf returns the table's partition spec (set at Create, the same in every version),
// nil before the table is read.
func (t *Table) partitionSpecOf() partition.Spec {
	if m := t.cachedLatest(); m != nil {
		return m.PartitionSpec
	}
	return nil
}

// MaxPartitionsPerWrite returns the most partitions one write into the table of manifest m may
// hold rows of: the table's ConfigMaxPartitionsPerWrite, or Options.MaxPartitionsPerWrite.
func (t *Table) MaxPartitionsPerWrite(m *Manifest) int {
	if m != nil {
		if n, err := strconv.Atoi(m.Config[ConfigMaxPartitionsPerWrite]); err == nil && n > 0 {
			return n
		}
	}
	return t.opts.MaxPartitionsPerWrite
}

// checkMaxPartitionsConfig refuses a ConfigMaxPartitionsPerWrite that is not a positive integer.
func checkMaxPartitionsConfig(config map[string]string) error {
	v, ok := config[ConfigMaxPartitionsPerWrite]
	if !ok {
		return nil
	}
	if n, err := strconv.Atoi(v); err != nil || n < 1 {
		return fmt.Errorf("%w: %s=%q: want a positive integer", ErrInvalidConfig, ConfigMaxPartitionsPerWrite, v)
	}
	return nil
}

// partitionBuffer holds a partitioned writer's rows until their partition is written.
type partitionBuffer struct {
	bound   *partition.Bound
	pending map[string]*pendingPartition // by tuple key
	seen    map[string]bool              // every partition the write held rows of
	bytes   int64                        // buffered over all partitions
}

// pendingPartition is one partition's buffered rows.
type pendingPartition struct {
	key   string
	tuple partition.Tuple
	recs  []arrow.RecordBatch
	rows  int64
	bytes int64
}

// initPartitions sets up a writer of a partitioned table: its files hold the partition source
// columns even when the batches omit them (as nulls), and the spec is bound to the file schema.
func (w *Writer) initPartitions(target, in *arrow.Schema) error {
	if len(w.spec) == 0 {
		return nil
	}
	if w.file != target {
		var missing []string
		for _, c := range w.spec.Columns() {
			if len(w.file.FieldIndices(c)) == 0 && !slices.Contains(missing, c) {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			w.file = fileSchemaWith(target, in, missing)
		}
	}
	b, err := w.spec.Bind(w.file)
	if err != nil {
		return fmt.Errorf("table %s: %w", w.t.name, err)
	}
	w.parts = &partitionBuffer{bound: b, pending: map[string]*pendingPartition{}, seen: map[string]bool{}}
	return nil
}

// fileSchemaWith is fileSchema(target, in) with target's columns named in extra as well.
func fileSchemaWith(target, in *arrow.Schema, extra []string) *arrow.Schema {
	fields := make([]arrow.Field, 0, in.NumFields()+len(extra))
	for _, f := range target.Fields() {
		if len(in.FieldIndices(f.Name)) > 0 || slices.Contains(extra, f.Name) {
			fields = append(fields, f)
		}
	}
	md := target.Metadata()
	return arrow.NewSchema(fields, &md)
}

// bufferPartitions adds conf's rows to their partitions' buffers, writing out a partition that
// reached the fragment target and, past the buffer budget, the largest one.
func (w *Writer) bufferPartitions(ctx context.Context, conf arrow.RecordBatch) error {
	pb := w.parts
	groups, err := pb.bound.Group(conf)
	if err != nil {
		return fmt.Errorf("table %s: %w", w.t.name, err)
	}
	for _, g := range groups {
		key := g.Tuple.Key()
		if !pb.seen[key] {
			pb.seen[key] = true
			if w.maxPartitions > 0 && len(pb.seen) > w.maxPartitions {
				return fmt.Errorf("table %s: %w: the write holds rows of more than %d partitions (the table's limit: table config %s, or the server's --max-partitions-per-write); send fewer partitions per epoch, or partition more coarsely",
					w.t.name, ErrTooManyPartitions, w.maxPartitions, ConfigMaxPartitionsPerWrite)
			}
		}
		var sub arrow.RecordBatch
		if len(g.Rows) == int(conf.NumRows()) {
			conf.Retain()
			sub = conf
		} else if sub, err = arrowschema.TakeRecord(w.t.opts.Allocator, conf, g.Rows); err != nil {
			return fmt.Errorf("table %s: split rows by partition: %w", w.t.name, err)
		}
		p := pb.pending[key]
		if p == nil {
			p = &pendingPartition{key: key, tuple: g.Tuple}
			pb.pending[key] = p
		}
		n := arrowschema.RecordBytes(sub)
		p.recs = append(p.recs, sub)
		p.rows += sub.NumRows()
		p.bytes += n
		pb.bytes += n
		if p.rows >= w.target {
			if err := w.writePartition(ctx, p, true); err != nil {
				return err
			}
		}
	}
	for pb.bytes > w.t.opts.PartitionBufferBytes && len(pb.pending) > 0 {
		var largest *pendingPartition
		for _, p := range pb.pending {
			if largest == nil || p.bytes > largest.bytes {
				largest = p
			}
		}
		if err := w.writePartition(ctx, largest, true); err != nil {
			return err
		}
	}
	return nil
}

// writePartition writes p's buffered rows into files of p's partition and drops the buffer;
// closing leaves no file open, otherwise the last file stays open for Finish.
func (w *Writer) writePartition(ctx context.Context, p *pendingPartition, closing bool) error {
	pb := w.parts
	delete(pb.pending, p.key)
	pb.bytes -= p.bytes
	defer arrowschema.ReleaseBatches(p.recs)
	if w.fw != nil && w.rows > 0 { // the open file holds another partition's rows
		if err := w.closeFile(ctx); err != nil {
			return err
		}
	}
	w.tuple = p.tuple
	for _, rec := range p.recs {
		if err := w.writeRows(ctx, rec); err != nil {
			return err
		}
	}
	if closing && w.fw != nil && w.rows > 0 {
		return w.closeFile(ctx)
	}
	return nil
}

// flushPartitions writes every buffered partition, in tuple order, leaving the last one's file
// open for Finish or FinishLater to seal.
func (w *Writer) flushPartitions(ctx context.Context) error {
	pb := w.parts
	if pb == nil || len(pb.pending) == 0 {
		return nil
	}
	ps := make([]*pendingPartition, 0, len(pb.pending))
	for _, p := range pb.pending {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *pendingPartition) int { return partition.CompareTuples(a.tuple, b.tuple) })
	for i, p := range ps {
		if err := w.writePartition(ctx, p, i < len(ps)-1); err != nil {
			return err
		}
	}
	return nil
}

// release drops the buffered rows (an aborted write).
func (pb *partitionBuffer) release() {
	if pb == nil {
		return
	}
	for k, p := range pb.pending {
		arrowschema.ReleaseBatches(p.recs)
		delete(pb.pending, k)
	}
	pb.bytes = 0
}

// checkPartitions checks the fragments txn adds to next, a version of a partitioned table or
// not: each carries a tuple of the table's spec (one value per field), or none when the table
// has no spec, and a client's write (not a fold, not a rewrite) holds at most limit partitions
// (0: no limit).
func checkPartitions(table string, next *Manifest, txn *Transaction, limit int) error {
	seen := map[string]bool{}
	for _, f := range txn.Fragments {
		if len(f.Partition) != len(next.PartitionSpec) {
			return fmt.Errorf("table %s: %w: a fragment of the %s has partition %s, the table's spec is %s (written for another table; send it again)",
				table, ErrCommitConflict, txn.Operation, f.Partition, next.PartitionSpec)
		}
		if len(f.Partition) > 0 {
			seen[f.Partition.Key()] = true
		}
	}
	if limit > 0 && len(seen) > limit && txn.Operation != OpRewrite && len(txn.MemWALMerged) == 0 {
		return fmt.Errorf("table %s: %w: the %s holds rows of %d partitions, more than %d (the table's limit: table config %s, or the server's --max-partitions-per-write); send fewer partitions per epoch, or partition more coarsely",
			table, ErrTooManyPartitions, txn.Operation, len(seen), limit, ConfigMaxPartitionsPerWrite)
	}
	return nil
}

// CheckFragmentPartitions reads every fragment of version m of a partitioned table and returns an
// error naming the first fragment holding a row whose partition tuple is not the fragment's
// (Fragment.Partition), or whose tuple does not fit the table's spec. A check for tests and
// tools: it reads the whole version.
func (t *Table) CheckFragmentPartitions(ctx context.Context, m *Manifest) error {
	if len(m.PartitionSpec) == 0 {
		return nil
	}
	for _, f := range m.Fragments {
		if len(f.Partition) != len(m.PartitionSpec) {
			return fmt.Errorf("table %s: fragment %d has partition %s, the spec %s", t.name, f.ID, f.Partition, m.PartitionSpec)
		}
		recs, err := t.ReadAll(ctx, ScanOptions{Version: m.Version, Fragments: []uint64{f.ID}})
		if err != nil {
			return err
		}
		for _, rec := range recs {
			if err == nil {
				err = checkRowsPartition(rec, m.PartitionSpec, f)
			}
			rec.Release()
		}
		if err != nil {
			return fmt.Errorf("table %s: %w", t.name, err)
		}
	}
	return nil
}

func checkRowsPartition(rec arrow.RecordBatch, spec partition.Spec, f Fragment) error {
	b, err := spec.Bind(rec.Schema())
	if err != nil {
		return err
	}
	for row := range int(rec.NumRows()) {
		tu, err := b.Tuple(rec, row)
		if err != nil {
			return err
		}
		if !tu.Equal(f.Partition) {
			return fmt.Errorf("fragment %d of partition %s holds a row of partition %s", f.ID, f.Partition, tu)
		}
	}
	return nil
}
