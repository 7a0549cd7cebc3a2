package streaming

import (
	"context"
	"fmt"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/expr"
)

// Delete removes the rows of table for which where is true, as one base Delete transaction, and
// reports how many it removed (engine.WriteResult; nothing is committed when nothing matches).
//
// It applies to every row a read of the table returns when it starts, MemWAL rows included. On a
// MemWAL table it holds the table's shard set (memwal.ShardSet.Quiesce): the epochs this server
// is putting end first and are deleted from, epochs that arrive meanwhile wait and land after the
// delete's commit, so an epoch is never deleted from in part. Then it folds every shard
// (memwal.ShardSet.FoldAll: every memtable flushed, every generation appended to the base table)
// and deletes in the base table.
func (s *Sink) Delete(ctx context.Context, table string, where *expr.Predicate) (engine.WriteResult, error) {
	t, err := s.Table(ctx, table)
	if err != nil {
		return engine.WriteResult{}, err
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return engine.WriteResult{}, err
	}
	// Checked before anything is folded: a delete that cannot run commits nothing.
	if err := where.Validate(m.ArrowSchema()); err != nil {
		return engine.WriteResult{}, fmt.Errorf("table %s: %w", t.Name(), err)
	}
	ss, err := s.tableShards(t, m)
	if err != nil {
		return engine.WriteResult{}, err
	}
	if ss != nil {
		release, err := ss.Quiesce(ctx)
		if err != nil {
			return engine.WriteResult{}, err
		}
		// Released after the delete's commit: an epoch that waited lands after it, not between
		// the fold and the delete, where the delete would miss it.
		defer release()
		// Fold first, then delete: the base table is where a delete removes rows, and the shards'
		// rows are not there until folded. Deleting first would leave the matching shard rows
		// (reads keep returning them), and their fold after the delete would append them back.
		if err := ss.FoldAll(ctx); err != nil {
			return engine.WriteResult{}, fmt.Errorf("table %s: fold the MemWAL shards before the delete: %w", t.Name(), err)
		}
	}
	return t.Delete(ctx, where, nil)
}
