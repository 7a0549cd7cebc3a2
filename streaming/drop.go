package streaming

import (
	"context"
	"fmt"

	"github.com/flight-sink/flight-sink/engine"
)

// DropResult is what DropTable removed.
type DropResult struct {
	Table string
	// Version is the table's newest version when it was dropped.
	Version uint64
}

// DropTable deletes table name and every object under it (engine.Drop), after forgetting what
// this sink holds of it: its cached handle, its MemWAL shard set (closed: its writers stop, and a
// put after the drop opens no shard of the old table) and its read snapshots (a DoGet of one
// then answers READ_SNAPSHOT_NOT_FOUND). Acknowledged rows the MemWAL shards held but had not
// folded are dropped with the table. Afterwards the name is free: a put with "create" makes a
// fresh table at version 1, one without answers ErrTableNotFound. Other servers' commits to the
// table are refused from the moment the drop begins (engine.Drop's fence), as are their MemWAL
// shard writers' manifest commits (memwal's drop fence: they stop and leave no shard state to a
// table created again under the name), and their cached handles find the table gone, or the new
// table under the name, at their next read of it (engine.Table.Latest).
func (s *Sink) DropTable(ctx context.Context, name string) (DropResult, error) {
	if err := engine.ValidateTableName(name); err != nil {
		return DropResult{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	s.forget(name)
	v, err := engine.Drop(ctx, s.store, name)
	// Whatever a request opened meanwhile saw the table half-dropped: forget it again.
	s.forget(name)
	if err != nil {
		return DropResult{}, err
	}
	s.opts.Logger.Info("table dropped", "table", name, "version", v)
	return DropResult{Table: name, Version: v}, nil
}

// forget drops this sink's cached handle, shard set and read snapshots of table name.
func (s *Sink) forget(name string) {
	s.mu.Lock()
	ss := s.memwal[name]
	delete(s.memwal, name)
	delete(s.tables, name)
	delete(s.maintained, name)
	s.mu.Unlock()
	if ss != nil {
		ss.Close()
	}
	s.pins.dropTable(name)
}

// dropTable removes every read snapshot of table.
func (p *pinnedReads) dropTable(table string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.byID {
		if e.table == table {
			p.dropLocked(e)
		}
	}
}
