package flightsvc

import (
	"context"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/iceberg"
)

// PublishIcebergRequest is the body of publish_iceberg.
type PublishIcebergRequest struct {
	Table string `json:"table"`
}

// PublishIcebergResult is the result of publish_iceberg.
type PublishIcebergResult struct {
	FormatVersion int `json:"format_version"`
	// FromVersion is the version the Iceberg metadata mirrored before, IcebergVersion the one
	// it mirrors now (the table's newest).
	FromVersion    uint64 `json:"from_version"`
	IcebergVersion uint64 `json:"iceberg_version"`
	// SnapshotsAdded counts the Iceberg snapshots the call added (versions coalesce: one, or
	// none when no data file changed).
	SnapshotsAdded int `json:"snapshots_added"`
	// MetadataFile is the newest metadata file, what readers open.
	MetadataFile string `json:"metadata_file"`
}

// IcebergStats is the Iceberg part of table_stats.
type IcebergStats struct {
	// Enabled is false when the table's configuration or the server turns publishing off.
	Enabled bool `json:"enabled"`
	// IcebergVersion is the version the Iceberg metadata mirrors (0: never published).
	IcebergVersion uint64 `json:"iceberg_version"`
	// LagVersions and LagSeconds say how far it is behind the table's version.
	LagVersions  uint64  `json:"lag_versions"`
	LagSeconds   float64 `json:"lag_seconds"`
	MetadataFile string  `json:"metadata_file"`
	Snapshots    int     `json:"snapshots"`
	// MissingRows and MissingSeconds are what Iceberg readers miss: the acknowledged rows they
	// cannot see yet (unpublished versions, MemWAL rows not folded) and the age of the oldest.
	MissingRows    int64   `json:"missing_rows"`
	MissingSeconds float64 `json:"missing_seconds"`
}

// IcebergSink is what the Iceberg action and table_stats need of the sink (streaming.Sink).
type IcebergSink interface {
	PublishIceberg(ctx context.Context, table string) (iceberg.Report, error)
	IcebergStatus(ctx context.Context, t *engine.Table) (iceberg.Status, error)
	// AfterCommit schedules table t's maintenance, its publish included, after an action's commit.
	AfterCommit(ctx context.Context, t *engine.Table)
}

func (s *Service) publishIceberg(ctx context.Context, req *PublishIcebergRequest) (PublishIcebergResult, error) {
	rep, err := s.sink.PublishIceberg(ctx, req.Table)
	if err != nil {
		return PublishIcebergResult{}, err
	}
	return PublishIcebergResult{FormatVersion: FormatVersion, FromVersion: rep.From, IcebergVersion: rep.To, SnapshotsAdded: rep.Snapshots, MetadataFile: rep.MetadataFile}, nil
}

// icebergStats returns table_stats' Iceberg part; a failure to read the metadata is logged and
// leaves it out (table_stats reports the table, which is fine).
func (s *Service) icebergStats(ctx context.Context, t *engine.Table) *IcebergStats {
	st, err := s.sink.IcebergStatus(ctx, t)
	if err != nil {
		s.logger.Warn("table_stats: iceberg status", "table", t.Name(), "err", err)
		return nil
	}
	return &IcebergStats{Enabled: st.Enabled, IcebergVersion: st.IcebergVersion, LagVersions: st.LagVersions,
		LagSeconds: st.LagSeconds, MetadataFile: st.MetadataFile, Snapshots: st.Snapshots,
		MissingRows: st.MissingRows, MissingSeconds: st.MissingSeconds}
}
