package streaming

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/memwal"
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
