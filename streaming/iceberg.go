package streaming

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
)

// MaintainIcebergPublish names the Iceberg publish step of table maintenance.
const MaintainIcebergPublish engine.MaintenanceOperation = "iceberg_publish"

// icebergSteps returns the Iceberg publish as a maintenance step of table t (after compaction,
// before cleanup, so cleanup sees what the Iceberg metadata still references: docs/iceberg.md),
// or none when the sink's Options turn publishing off.
// It runs at most once per publish interval (Options.IcebergPublishInterval, the table's
// iceberg.publish_interval_ms), the last commits of a burst by the trailing run.
// Best effort: a failed publish is logged and counted (flight_sink.maintenance.operations and
// flight_sink.iceberg.publishes, outcome failed), never fails the commit that triggered it, and
// the next run catches up.
func (s *Sink) icebergSteps(t *engine.Table) []engine.MaintenanceStep {
	if s.opts.DisableIceberg {
		return nil
	}
	p := iceberg.New(t, &iceberg.Options{Logger: s.opts.Logger})
	return []engine.MaintenanceStep{{
		Operation:     MaintainIcebergPublish,
		Policy:        engine.BestEffort,
		BeforeCleanup: true,
		// At most one publish per interval: a burst of commits costs one publish per interval,
		// and the runner's trailing run publishes the last of them (lag about one interval).
		MinInterval: func(m *engine.Manifest) time.Duration {
			return iceberg.PublishInterval(m, s.opts.IcebergPublishInterval)
		},
		Due: func(_ context.Context, m *engine.Manifest) (bool, error) { return iceberg.Enabled(m), nil },
		Run: func(ctx context.Context, _ map[string]string) error {
			start := time.Now()
			rep, err := p.Publish(ctx)
			if errors.Is(err, iceberg.ErrDisabled) {
				return nil
			}
			if err == nil && rep.To > rep.From {
				s.opts.Logger.Info("iceberg published", "table", t.Name(), "from_version", rep.From, "to_version", rep.To,
					"snapshots", rep.Snapshots, "duration", time.Since(start).Round(time.Millisecond))
			}
			return err // a failure is logged by the maintenance run (WARN) and counted
		},
	}}
}

// PublishIceberg brings table's Iceberg metadata up to its newest version now (the
// publish_iceberg action); iceberg.ErrDisabled when the table or the sink turns publishing off.
func (s *Sink) PublishIceberg(ctx context.Context, table string) (iceberg.Report, error) {
	t, err := s.Table(ctx, table)
	if err != nil {
		return iceberg.Report{}, err
	}
	if s.opts.DisableIceberg {
		return iceberg.Report{}, iceberg.ErrDisabled
	}
	return iceberg.New(t, &iceberg.Options{Logger: s.opts.Logger}).Publish(ctx)
}

// IcebergStatus reports how far table t's Iceberg metadata lags (table_stats, the status page);
// Enabled is false when the table or the sink turns publishing off.
// Its missing rows count the rows waiting in the table's MemWAL shards too (this server's
// writers' memtables included).
func (s *Sink) IcebergStatus(ctx context.Context, t *engine.Table) (iceberg.Status, error) {
	st, err := iceberg.New(t, nil).Status(ctx)
	if s.opts.DisableIceberg {
		st.Enabled = false
	}
	if err != nil {
		return st, err
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return st, err
	}
	ss, err := s.tableShards(t, m)
	if err != nil || ss == nil {
		return st, err
	}
	stats, err := ss.Stats(ctx)
	addUnfolded(&st, stats)
	return st, err
}

// StoredIcebergStatus is IcebergStatus for a process that writes no shard of t (the CLI): the
// MemWAL rows it counts are those of the shards' stored state (flushed generations and WAL
// entries; the age is the oldest generation's).
func StoredIcebergStatus(ctx context.Context, t *engine.Table) (iceberg.Status, error) {
	st, err := iceberg.New(t, nil).Status(ctx)
	if err != nil {
		return st, err
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return st, err
	}
	ids, err := memwal.TableShardIDs(m)
	if err != nil {
		return st, err
	}
	stats := make([]memwal.ShardStats, 0, len(ids))
	for _, id := range ids {
		ss, err := memwal.NewStoredShard(t, id, nil).Stats(ctx)
		if err != nil {
			return st, fmt.Errorf("memwal shard %s of table %s: %w", id, t.Name(), err)
		}
		stats = append(stats, ss)
	}
	addUnfolded(&st, stats)
	return st, nil
}

// addUnfolded adds the rows the shards hold that no fold has put in the base table yet.
func addUnfolded(st *iceberg.Status, stats []memwal.ShardStats) {
	for _, sh := range stats {
		st.AddUnfolded(sh.GenerationRows+sh.MemtableRows, sh.OldestUnfolded)
	}
}

// DefaultIcebergScanInterval is Options.IcebergScanInterval unless set: a version another
// process committed reaches the Iceberg metadata within about this plus the publish interval
// and a publish.
const DefaultIcebergScanInterval = 2 * time.Second

// AfterCommit runs table t's maintenance (so its Iceberg publish, within the publish interval)
// after a commit made outside the epoch path: the delete, compact, create_index,
// optimize_indices and set_table_config actions. The commit is visible already; a failed
// maintenance run is logged, never the action's error.
func (s *Sink) AfterCommit(ctx context.Context, t *engine.Table) {
	m, err := t.Latest(ctx)
	if err == nil {
		s.noteMaintained(t.Name(), m.Version)
		s.recordHealthThresholds(ctx, t.Name(), m)
		err = s.maintainAfterWrite(ctx, t, m, true)
	}
	if err != nil {
		s.opts.Logger.Warn("table maintenance after an action's commit failed (the commit stands)", "table", t.Name(), "err", err)
	}
}

// maintainAfterWrite runs the maintenance of table t, whose newest version is m, as its mode
// says (engine.TableMaintainer.MaintainAfterWrite). open says whether it may open the table's
// MemWAL shard set (a request's table); the scan of WatchCommits uses the set only when this
// sink has one already, so that it opens no shards of a table this server does not write.
func (s *Sink) maintainAfterWrite(ctx context.Context, t *engine.Table, m *engine.Manifest, open bool) error {
	var mt *engine.TableMaintainer
	if open {
		var err error
		if mt, err = s.maintainer(t, m); err != nil {
			return err
		}
	} else if ss := s.knownShardSet(t); ss != nil {
		mt = ss.Maintainer()
	} else {
		o := s.maintainerOptions(t)
		mt = engine.NewTableMaintainer(t, &o)
	}
	return mt.MaintainAfterWrite(ctx, m)
}

// noteMaintained records that version v of table name is this sink's to publish (its
// maintenance is scheduled) or is published.
func (s *Sink) noteMaintained(name string, v uint64) {
	s.mu.Lock()
	s.maintained[name] = max(s.maintained[name], v)
	s.mu.Unlock()
}

// WatchCommits publishes the versions this sink did not make: every Options.IcebergScanInterval
// it lists the root's tables and compares each one's newest version with the version its Iceberg
// metadata mirrors; a table behind gets its maintenance run (so a publish, within the publish
// interval) and its lag recorded (flight_sink.iceberg.versions_behind). Versions this sink
// committed are left to the maintenance their commits scheduled; a version another process
// committed (a `flight-sink compact`, `cleanup` or `config set`, another server) is noticed
// within one scan. A table behind is looked at again every scan until it is caught up, so a
// failed publish is retried. It returns when ctx ends, at once when publishing or the scan is
// off.
func (s *Sink) WatchCommits(ctx context.Context) {
	if s.opts.DisableIceberg || s.opts.IcebergScanInterval < 0 {
		return
	}
	tick := time.NewTicker(s.opts.IcebergScanInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := s.scanCommits(ctx); err != nil && ctx.Err() == nil {
			s.opts.Logger.Debug("iceberg scan of the root's tables failed; retrying at the next scan", "err", err)
		}
	}
}

// scanCommits is one scan of WatchCommits.
func (s *Sink) scanCommits(ctx context.Context) error {
	names, err := objstore.ListPrefixes(ctx, s.store, "")
	if err != nil {
		return err
	}
	for _, name := range names {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if engine.ValidateTableName(name) != nil {
			continue
		}
		if err := s.catchUp(ctx, name); err != nil && !errors.Is(err, engine.ErrTableNotFound) {
			s.opts.Logger.Debug("iceberg scan: table skipped", "table", name, "err", err)
		}
	}
	return nil
}

// catchUp schedules the publish of table name when its newest version is neither this sink's to
// publish nor published.
func (s *Sink) catchUp(ctx context.Context, name string) error {
	t, err := s.table(ctx, name)
	if err != nil {
		return err
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	known := s.maintained[name]
	s.mu.Unlock()
	if m.Version <= known || !iceberg.Enabled(m) {
		return nil
	}
	published, err := iceberg.New(t, nil).PublishedVersion(ctx)
	if err != nil {
		return err
	}
	if published >= m.Version {
		s.noteMaintained(name, published)
		iceberg.RecordBehind(ctx, name, 0)
		return nil
	}
	iceberg.RecordBehind(ctx, name, m.Version-published)
	// Not noted as maintained: the next scan looks again until it finds the version published,
	// so a failed publish is retried.
	return s.maintainAfterWrite(ctx, t, m, false)
}
