package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/internal/backoff"
	"github.com/flight-sink/flight-sink/objstore"
)

// Commit lands txn as the next version of the table and returns its manifest.
//
// txn.ReadVersion is the version the caller based the transaction on (0 means "the latest");
// every version committed after it is checked against txn with the conflict matrix. A streaming
// transaction (PropQueryID/PropEpochID in its properties) also advances that query's watermark,
// and fails with an *EpochCommittedError if the watermark already covers its epoch.
// A commit that adds fragments to a table at its fragment ceiling (compaction.max_fragments)
// first waits for, or runs, the compaction that makes room (maintain_ceiling.go).
func (t *Table) Commit(ctx context.Context, txn *Transaction) (_ *Manifest, err error) {
	ctx, span := tracer.Start(ctx, "engine.Commit", trace.WithAttributes(
		attribute.String("table", t.name), attribute.String("operation", string(txn.Operation))))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	if txn.ID == "" {
		txn.ID = uuid.NewString()
	}
	start := time.Now()
	latest, err := t.Latest(ctx)
	if err != nil {
		return nil, err
	}
	if txn.ReadVersion == 0 || txn.ReadVersion > latest.Version {
		txn.ReadVersion = latest.Version
	}
	// Row-level operations carry state across the versions they rebase over (commit_commit_rebase.go).
	rb, err := t.newRowRebase(ctx, txn)
	if err != nil {
		return nil, err
	}
	checked := txn.ReadVersion
	// The transaction belongs to the incarnation it first read: a retry that finds another one
	// (the table was dropped and created anew meanwhile) never lands in it.
	tableID := latest.TableID
	defer func() { err = t.droppedWhileCommitting(ctx, tableID, err) }()
	readState := readVersionState{txn: txn}
	txnWritten := false
	var summary TransactionSummary
	for attempt := 0; ; attempt++ {
		// The fragment ceiling (maintain_ceiling.go) is judged on the version this attempt's manifest
		// follows, before anything of the attempt is written; a stall returns a newer version,
		// which the conflict check below covers.
		if latest, err = t.holdFragmentCeiling(ctx, txn, latest); err != nil {
			return nil, err
		}
		if latest.TableID != tableID {
			return nil, fmt.Errorf("table %s at %s: dropped and created anew while %s was committed, refused: %w: %w",
				t.name, t.store, txn.Operation, ErrTableNotFound, errTableDropped)
		}
		// Check what landed since we last looked before rebasing onto it.
		if latest.Version > checked {
			hist, err := t.HistoryFrom(ctx, latest.Version, int(latest.Version-checked))
			if err != nil {
				return nil, err
			}
			for i := len(hist) - 1; i >= 0; i-- {
				h := hist[i]
				if h.Missing {
					return nil, fmt.Errorf("table %s: version %d was removed while committing; cannot check it for conflicts: %w", t.name, h.Version, ErrCommitConflict)
				}
				theirs := TransactionSummary{Operation: h.Operation, Properties: h.Properties, ReadVersion: h.ReadVersion, File: h.TransactionFile}
				if err := checkConflict(t.name, txn, theirs, h.Version); err != nil {
					commitConflict.Add(ctx, 1)
					return nil, err
				}
				if rb != nil {
					if err := rb.advance(ctx, h); err != nil {
						if errors.Is(err, ErrCommitConflict) {
							commitConflict.Add(ctx, 1)
						}
						return nil, err
					}
				}
			}
			checked = latest.Version
		}
		if err := t.checkArchivedEpoch(ctx, latest, txn); err != nil {
			return nil, err
		}
		next, err := t.apply(latest, txn)
		if err != nil {
			return nil, err
		}
		// Files this attempt writes for next alone (deletion files); unreferenced if it loses.
		var written []string
		if rb != nil {
			if written, err = rb.finish(ctx, latest, next); err != nil {
				return nil, err
			}
		}
		// Index catch-up (index_catchup.go) is derived from the version this commit read.
		if err := t.recordIndexCatchup(ctx, &readState, latest, next); err != nil {
			t.deleteFiles(ctx, written)
			return nil, err
		}
		// Watermarks past the manifest's bound move to a new archive, written before the manifest.
		if key, err := t.spillStreams(ctx, latest, next); err != nil {
			t.deleteFiles(ctx, written)
			return nil, err
		} else if key != "" {
			written = append(written, key)
		}
		if !txnWritten {
			// The transaction file is written once, before the first manifest attempt: the manifest
			// that references it must never exist without it.
			if _, err := t.writeTransaction(ctx, txn, next); err != nil {
				return nil, err
			}
			summary = next.Transaction
			txnWritten = true
			// The data files are durable before the first manifest can name them: a file still
			// landing (Writer.FinishLater) overlapped the work above; a crash before this point
			// leaves unreferenced files only.
			if txn.FilesDurable != nil {
				if err := txn.FilesDurable(ctx); err != nil {
					return nil, fmt.Errorf("table %s: %w: %w", t.name, errFilesNotDurable, err)
				}
			}
		}
		next.Transaction = summary
		if hook := t.opts.BeforeManifestWrite; hook != nil {
			if err := hook(next.Version); err != nil {
				return nil, fmt.Errorf("table %s: commit version %d: %w", t.name, next.Version, err)
			}
		}
		// Commit point. Data files (written by the caller's Writer) and the transaction file are
		// durable before this create; a crash before it leaves them unreferenced, never a
		// half-visible version.
		err = t.putManifest(ctx, next)
		if err == nil {
			// The drop fence, after the manifest landed: a drop that began before this put finds
			// nothing it could miss (Drop writes its marker before it deletes anything).
			if err := t.refuseIfDropped(ctx, next); err != nil {
				return nil, err
			}
			t.setLatest(next)
			recordCommit(ctx, txn.Operation, start, attempt)
			span.SetAttributes(attribute.Int64("version", int64(next.Version)), attribute.Int("retries", attempt))
			return next, nil
		}
		if !errors.Is(err, objstore.ErrExists) {
			// The outcome is unknown (the create may have landed before the error): look.
			if m, rerr := t.Manifest(ctx, next.Version); rerr == nil && m.Transaction.File == summary.File {
				if err := t.refuseIfDropped(ctx, m); err != nil {
					return nil, err
				}
				t.setLatest(m)
				return m, nil
			}
			return nil, fmt.Errorf("table %s: commit version %d: %w", t.name, next.Version, err)
		}
		t.deleteFiles(ctx, written) // lost the race: nothing references them
		if attempt+1 >= t.opts.CommitRetries {
			return nil, fmt.Errorf("table %s: %s lost the race for a new version %d times: %w", t.name, txn.Operation, attempt+1, ErrTooManyRetries)
		}
		if err := backoff.Race.Sleep(ctx, attempt); err != nil {
			return nil, err
		}
		if latest, err = t.Latest(ctx); err != nil {
			return nil, err
		}
	}
}

// apply derives the manifest that txn produces on top of base.
func (t *Table) apply(base *Manifest, txn *Transaction) (*Manifest, error) {
	next := base.clone()
	next.Version = base.Version + 1
	now := t.opts.Now().UnixNano()
	if now <= base.TimestampNanos {
		now = base.TimestampNanos + 1 // keep timestamps strictly increasing for ManifestAsOf
	}
	next.TimestampNanos = now

	assign := func(frags []Fragment) []Fragment {
		out := make([]Fragment, len(frags))
		for i, f := range frags {
			f.ID = next.NextFragmentID
			next.NextFragmentID++
			out[i] = f
		}
		return out
	}
	switch txn.Operation {
	case OpAppend:
		next.Fragments = append(next.Fragments, assign(txn.Fragments)...)
	case OpDelete:
		// Only deletion files change; rowRebase.finish writes them into next.
	case OpUpdate, OpUpsert:
		next.Fragments = append(next.Fragments, assign(txn.Fragments)...)
	case OpRewrite:
		frags, err := applyRewrite(next.Fragments, txn.Rewrite, assign(txn.Fragments))
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", t.name, err)
		}
		next.Fragments = frags
	case OpOverwrite:
		next.Fragments = assign(txn.Fragments)
	case OpCreateIndex, OpOptimizeIndex:
		if err := applyIndexChange(next, txn); err != nil {
			return nil, fmt.Errorf("table %s: %w", t.name, err)
		}
	case OpUpdateConfig:
		applyConfigChange(next, txn)
	default:
		return nil, fmt.Errorf("table %s: cannot commit operation %q", t.name, txn.Operation)
	}

	// The schema change and the rows written in it land in this one manifest (commit_schema.go).
	if len(txn.Schema) > 0 {
		switch txn.Operation {
		case OpAppend, OpUpsert, OpOverwrite:
			if err := t.mergeTxnSchema(next, txn); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("table %s: a %s cannot change the schema", t.name, txn.Operation)
		}
	}
	if err := checkPartitions(t.name, next, txn, t.MaxPartitionsPerWrite(next)); err != nil {
		return nil, err
	}
	// A table whose schema has no field ids gets them here, without rewriting data files.
	if err := withTableFieldIDs(next); err != nil {
		return nil, fmt.Errorf("table %s: %w", t.name, err)
	}

	// Indices cover live fragments only: fragments a Rewrite or Overwrite replaced leave every
	// segment's coverage (their rows are unindexed until OptimizeIndices indexes the new ones).
	pruneIndexCoverage(next)

	ep, isEpoch := txn.Epoch()
	if _, stamped := txn.Properties[PropQueryID]; stamped != isEpoch || (isEpoch && ep.QueryID == "") {
		return nil, fmt.Errorf("table %s: transaction properties %s=%q %s=%q are not a valid epoch identity (need a non-empty query id and an integer epoch id, or neither)",
			t.name, PropQueryID, txn.Properties[PropQueryID], PropEpochID, txn.Properties[PropEpochID])
	}
	if isEpoch {
		if wm, ok := next.Streams[ep.QueryID]; ok && wm.Epoch >= ep.EpochID {
			return nil, &EpochCommittedError{QueryID: ep.QueryID, EpochID: ep.EpochID, WatermarkEpoch: wm.Epoch, Version: wm.Version}
		}
		next.Streams[ep.QueryID] = StreamWatermark{Epoch: ep.EpochID, Version: next.Version, TimestampNanos: now}
	}
	for shard, gen := range txn.MemWALMerged {
		if from, ok := txn.MemWALMergedFrom[shard]; ok && next.MemWALMerged[shard] != from {
			return nil, fmt.Errorf("table %s: shard %s fold read merged watermark %d but it is now %d: %w", t.name, shard, from, next.MemWALMerged[shard], ErrGenerationAlreadyMerged)
		}
		if cur, ok := next.MemWALMerged[shard]; ok && cur >= gen {
			return nil, fmt.Errorf("table %s: shard %s generation %d (merged watermark %d): %w", t.name, shard, gen, cur, ErrGenerationAlreadyMerged)
		}
		if next.MemWALMerged == nil {
			next.MemWALMerged = make(map[string]uint64)
		}
		next.MemWALMerged[shard] = gen
	}
	cutoff := now - int64(t.opts.StreamWatermarkRetention)
	for q, wm := range next.Streams {
		if wm.TimestampNanos < cutoff {
			delete(next.Streams, q)
		}
	}
	return next, nil
}

// EpochProperties returns the transaction properties that stamp a streaming epoch, merged over
// extra (which may be nil).
func EpochProperties(id EpochIdentity, extra map[string]string) map[string]string {
	p := cloneMap(extra)
	if p == nil {
		p = make(map[string]string, 2)
	}
	p[PropQueryID] = id.QueryID
	p[PropEpochID] = strconv.FormatInt(id.EpochID, 10)
	return p
}

// Append writes recs as new fragments and commits them as one Append transaction.
func (t *Table) Append(ctx context.Context, recs []arrow.RecordBatch, props map[string]string) (*Manifest, error) {
	if len(recs) == 0 {
		return nil, fmt.Errorf("table %s: append of no batches", t.name)
	}
	w, err := t.NewWriter(ctx, recs[0].Schema())
	if err != nil {
		return nil, err
	}
	return t.writeAndCommit(ctx, w, recs, &Transaction{Operation: OpAppend, Properties: props})
}

// Overwrite replaces the table's contents with recs (no batches: truncate) as one transaction.
// The schema stays the table's; recs must fit it.
func (t *Table) Overwrite(ctx context.Context, in *arrow.Schema, recs []arrow.RecordBatch, props map[string]string) (*Manifest, error) {
	w, err := t.NewWriter(ctx, in)
	if err != nil {
		return nil, err
	}
	return t.writeAndCommit(ctx, w, recs, &Transaction{Operation: OpOverwrite, Properties: props})
}

func (t *Table) writeAndCommit(ctx context.Context, w *Writer, recs []arrow.RecordBatch, txn *Transaction) (*Manifest, error) {
	for _, r := range recs {
		if err := w.Write(ctx, r); err != nil {
			w.Abort(ctx)
			return nil, err
		}
	}
	frags, err := w.FinishLater(ctx) // the last file lands while the commit is prepared
	if err != nil {
		w.Abort(ctx)
		return nil, err
	}
	txn.Fragments, txn.FilesDurable = frags, w.Durable
	m, err := t.Commit(ctx, txn)
	if err != nil {
		if CommitDefinitelyFailed(err) {
			w.Abort(context.WithoutCancel(ctx)) // also when ctx ended the commit (a stall gave up)
		} // else the outcome is unknown: the files may be referenced, leave them to cleanup
		return nil, err
	}
	return m, nil
}

// CommitDefinitelyFailed reports whether err from Commit proves that no manifest references the
// transaction, so its data files may be deleted at once.
func CommitDefinitelyFailed(err error) bool {
	return errors.Is(err, ErrCommitConflict) || errors.Is(err, ErrEpochCommitted) || errors.Is(err, errFilesNotDurable) ||
		errors.Is(err, errStalled) || errors.Is(err, errTableDropped) ||
		errors.Is(err, ErrGenerationAlreadyMerged) || errors.Is(err, ErrTooManyPartitions) ||
		errors.Is(err, ErrTooManyRetries) || errors.Is(err, arrowschema.ErrSchemaMismatch)
}
