package iceberg

import (
	"context"
	"time"

	"github.com/flight-sink/flight-sink/engine"
)

// Status is how far a table's Iceberg metadata is behind its versions.
type Status struct {
	// Enabled is false when the table's configuration turns publishing off.
	Enabled bool
	// Version is the table's newest version; IcebergVersion the one its Iceberg metadata
	// mirrors (0: never published).
	Version, IcebergVersion uint64
	// LagVersions is Version - IcebergVersion; LagSeconds how long ago the oldest unpublished
	// version was committed (0 when up to date).
	LagVersions uint64
	LagSeconds  float64
	// MetadataFile is the newest metadata file ("" before the first publish), Snapshots the
	// number of snapshots it retains and CurrentSnapshotID its current one (0: none).
	MetadataFile      string
	Snapshots         int
	CurrentSnapshotID int64
	// MissingRows counts the acknowledged rows Iceberg readers cannot see yet: the rows the newest
	// version holds beyond the published one, plus (AddUnfolded) the rows waiting in MemWAL
	// shards. MissingSeconds is the age of the oldest of them (of the oldest unpublished version,
	// or of the oldest unfolded MemWAL row): 0 when readers see everything acknowledged.
	MissingRows    int64
	MissingSeconds float64
}

// AddUnfolded adds MemWAL rows not yet folded into the base table (so invisible to Iceberg
// readers) to the missing rows, the oldest of them acknowledged at oldest (zero: unknown).
func (st *Status) AddUnfolded(rows int64, oldest time.Time) {
	st.MissingRows += rows
	if rows > 0 && !oldest.IsZero() {
		st.MissingSeconds = max(st.MissingSeconds, time.Since(oldest).Seconds())
	}
}

// Status reports how far the table's Iceberg metadata is behind. It reads and changes nothing
// but the newest metadata file.
func (p *Publisher) Status(ctx context.Context) (Status, error) {
	latest, err := p.t.Latest(ctx)
	if err != nil {
		return Status{}, err
	}
	st := Status{Enabled: Enabled(latest), Version: latest.Version}
	cat := newStoreCatalog(newStoreIO(ctx, p.t.Store()), p.t.Name())
	tbl, _, err := cat.load(ctx)
	if err != nil {
		return st, err
	}
	if tbl != nil {
		st.IcebergVersion = publishedVersion(tbl.Metadata())
		st.MetadataFile = tbl.MetadataLocation()
		st.Snapshots = len(tbl.Metadata().Snapshots())
		if s := tbl.CurrentSnapshot(); s != nil {
			st.CurrentSnapshotID = s.SnapshotID
		}
	}
	if st.IcebergVersion < st.Version {
		st.LagVersions = st.Version - st.IcebergVersion
		if h, err := p.t.HistoryFrom(ctx, st.IcebergVersion+1, 1); err == nil && len(h) == 1 && !h[0].Missing {
			st.LagSeconds = time.Since(h[0].Timestamp).Seconds()
		}
		var published int64
		if st.IcebergVersion > 0 {
			if m, err := p.t.Manifest(ctx, st.IcebergVersion); err == nil {
				published = m.Rows()
			}
		}
		st.MissingRows = max(latest.Rows()-published, 0)
		st.MissingSeconds = st.LagSeconds
	}
	return st, nil
}

// lagSince returns how long ago version v was committed (0 when unknown).
func lagSince(ctx context.Context, t *engine.Table, v uint64) time.Duration {
	h, err := t.HistoryFrom(ctx, v, 1)
	if err != nil || len(h) != 1 || h[0].Missing {
		return 0
	}
	return time.Since(h[0].Timestamp)
}

// PublishedVersion returns the version the table's newest Iceberg metadata mirrors (its
// PropVersion; 0 when it has no metadata yet). It reads the newest metadata file and nothing
// else.
func (p *Publisher) PublishedVersion(ctx context.Context) (uint64, error) {
	tbl, _, err := newStoreCatalog(newStoreIO(ctx, p.t.Store()), p.t.Name()).load(ctx)
	if err != nil || tbl == nil {
		return 0, err
	}
	return publishedVersion(tbl.Metadata()), nil
}
