package memwal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/internal/panics"
	"github.com/flight-sink/flight-sink/objstore"
)

// A fold that fails because of what a generation's data holds (it does not decode, does not fit
// the table's schema, or the writer refuses it) would fail the same way on every retry, and the
// shard's later generations would wait behind it until puts stall at the fold ceiling for good.
// Such a generation is quarantined instead: moved from the shard manifest's FlushedGenerations to
// its Quarantined list with the error, its files kept. Storage errors are not the data's and are
// returned, so the fold is retried.

// quarantineErrorBytes bounds the error text a quarantine record keeps.
const quarantineErrorBytes = 512

// foldDataError marks an error of preparing a fold that the generations' data caused.
type foldDataError struct{ err error }

func (e *foldDataError) Error() string { return e.err.Error() }
func (e *foldDataError) Unwrap() error { return e.err }

// asFoldDataError wraps err, an error of reading generations and writing their rows, as a
// foldDataError when the data caused it: a generation that does not decode or does not fit the
// table's schema, a batch too large once converted, a panic in the Arrow or Parquet code. A
// storage failure or an ended context is never the data's.
func asFoldDataError(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, objstore.ErrUnavailable) || errors.Is(err, objstore.ErrNotFound) {
		return err
	}
	if errors.Is(err, ErrCorrupt) || errors.Is(err, panics.ErrPanic) || errors.Is(err, arrowschema.ErrSchemaMismatch) ||
		errors.Is(err, arrowschema.ErrBatchTooLarge) || errors.Is(err, arrowschema.ErrIPCTooLarge) {
		return &foldDataError{err: err}
	}
	return err
}

// isFoldDataError reports whether err is a fold error its generations' data caused.
func isFoldDataError(err error) bool {
	var d *foldDataError
	return errors.As(err, &d)
}

// foldEach folds pending (ascending) one generation at a time after a fold of all of them failed
// on their data (cause), quarantining each generation whose own fold fails on its data, and then
// raises the watermark to through. It returns the watermark after the last fold.
func (c *Folder) foldEach(ctx context.Context, shard string, ms *ManifestStore, pending []FlushedGeneration, through uint64, cause error) (uint64, error) {
	c.opts.Shard.Logger.Warn("memwal: a fold failed on the data of its generations; folding them one at a time",
		"table", c.table.Name(), "shard", shard, "generations", len(pending), "err", cause)
	for _, g := range pending {
		base, err := c.table.Latest(ctx)
		if err != nil {
			return 0, err
		}
		if base.MemWALMerged[shard] >= g.Generation {
			continue // another folder merged it
		}
		_, err = c.fold(ctx, shard, ms.paths, base, []FlushedGeneration{g}, g.Generation)
		if isFoldDataError(err) {
			// Quarantine before any fold raises the watermark past g: a generation at or below
			// the watermark that the manifest still lists is drained and deleted as merged.
			if err := c.quarantine(ctx, shard, ms, g, err); err != nil {
				return 0, err
			}
			continue
		}
		if err != nil {
			return 0, err
		}
	}
	base, err := c.table.Latest(ctx)
	if err != nil {
		return 0, err
	}
	if base.MemWALMerged[shard] >= through {
		return base.MemWALMerged[shard], nil
	}
	// Every generation up to through is folded or quarantined: the watermark passes them, so the
	// fold ceiling no longer counts the quarantined ones.
	return c.fold(ctx, shard, ms.paths, base, nil, through)
}

// quarantine moves generation g from the shard manifest's flushed generations to its quarantined
// ones, with cause. A generation no longer listed (merged or quarantined meanwhile) is left alone.
func (c *Folder) quarantine(ctx context.Context, shard string, ms *ManifestStore, g FlushedGeneration, cause error) error {
	msg := cause.Error()
	if len(msg) > quarantineErrorBytes {
		// Keep both ends: the generation and the object up front, the root cause last.
		head, tail := quarantineErrorBytes/4, quarantineErrorBytes*3/4
		msg = strings.ToValidUTF8(msg[:head]+" … "+msg[len(msg)-tail:], "")
	}
	moved := false
	_, err := ms.commitUnowned(ctx, fmt.Sprintf("quarantine generation %d", g.Generation), func(cur *ShardManifest) error {
		i := slices.IndexFunc(cur.FlushedGenerations, func(fg FlushedGeneration) bool { return fg.Generation == g.Generation })
		if i < 0 {
			moved = false
			return errNoUpdate
		}
		q := QuarantinedGeneration{FlushedGeneration: cur.FlushedGenerations[i], Error: msg, QuarantinedAtNanos: time.Now().UnixNano()}
		cur.FlushedGenerations = slices.Delete(cur.FlushedGenerations, i, i+1)
		cur.Quarantined = append(cur.Quarantined, q)
		slices.SortFunc(cur.Quarantined, func(a, b QuarantinedGeneration) int { return cmp.Compare(a.Generation, b.Generation) })
		moved = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("memwal shard %s: quarantine generation %d: %w", shard, g.Generation, err)
	}
	if moved {
		recordQuarantine(ctx)
		c.opts.Shard.Logger.Warn("memwal: quarantined a generation the fold cannot append; its rows are acknowledged and kept in its files, not in the table",
			"table", c.table.Name(), "shard", shard, "generation", g.Generation, "rows", g.Rows,
			"dir", ms.paths.root+g.Dir, "epochs", g.Epochs, "err", msg)
	}
	return nil
}
