package iceberg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"

	"github.com/apache/iceberg-go/table"

	"github.com/flight-sink/flight-sink/engine"
)

// SnapshotVersion returns the flight-sink version an Iceberg snapshot mirrors (its summary's
// PropVersion); ok is false for a snapshot without one.
func SnapshotVersion(s *table.Snapshot) (uint64, bool) {
	if s == nil || s.Summary == nil {
		return 0, false
	}
	v, err := strconv.ParseUint(s.Summary.Properties[PropVersion], 10, 64)
	return v, err == nil
}

// Retain is engine.Options.CleanupRetain for published tables: snapshot expiry moves with
// cleanup. Given the oldest version cleanup keeps, it expires the Iceberg snapshots that mirror
// older versions (but the current snapshot), removing their manifest lists, the manifests and
// position-delete files only they read, and returns the oldest version a retained snapshot
// mirrors, which cleanup then keeps too: the current snapshot may mirror an old version when
// publishing lags, and cleanup never removes a file a retained snapshot reads.
//
// Crash order: the snapshots are expired (a new metadata file without them) before cleanup
// removes any manifest or data file, so a crash in between leaves files no snapshot names.
// A table that is not published (or turned off) keeps nothing.
func Retain(ctx context.Context, t *engine.Table, oldestKept uint64, dryRun bool) (uint64, error) {
	latest, err := t.Latest(ctx)
	if err != nil {
		return 0, err
	}
	if !Enabled(latest) {
		return oldestKept, nil
	}
	fio := newStoreIO(ctx, t.Store())
	cat := newStoreCatalog(fio, t.Name())
	for range commitAttempts {
		tbl, _, err := cat.load(ctx)
		if err != nil || tbl == nil {
			return oldestKept, err
		}
		cur := tbl.CurrentSnapshot()
		keep := oldestKept
		var expire []int64
		for _, s := range tbl.Metadata().Snapshots() {
			v, ok := SnapshotVersion(&s)
			switch {
			case cur != nil && s.SnapshotID == cur.SnapshotID:
				if ok {
					keep = min(keep, v)
				}
			case !ok || v < oldestKept:
				expire = append(expire, s.SnapshotID)
			default:
				keep = min(keep, v)
			}
		}
		if len(expire) == 0 || dryRun {
			return keep, nil
		}
		if err := expireSnapshots(ctx, cat, tbl, expire); errors.Is(err, table.ErrCommitFailed) {
			continue
		} else if err != nil {
			return 0, err
		}
		return keep, nil
	}
	return 0, fmt.Errorf("expire iceberg snapshots of %s: lost %d commits in a row to other publishers", t.Name(), commitAttempts)
}

// expireSnapshots commits the removal of the snapshots ids of tbl (never its current one), then
// removes the files only they read: manifest lists, manifests and position-delete files (best
// effort, like any removal of unreferenced files; storeIO.Remove keeps data files). It returns
// table.ErrCommitFailed when another publisher committed first.
func expireSnapshots(ctx context.Context, cat *storeCatalog, tbl *table.Table, ids []int64) error {
	var curID *int64
	if cur := tbl.CurrentSnapshot(); cur != nil {
		curID = &cur.SnapshotID
	}
	upd := table.NewRemoveSnapshotsUpdate(ids, true)
	reqs := []table.Requirement{table.AssertTableUUID(tbl.Metadata().TableUUID()), table.AssertRefSnapshotID("main", curID)}
	meta, loc, err := cat.CommitTable(ctx, cat.ident, reqs, []table.Update{upd})
	if err != nil {
		if errors.Is(err, table.ErrCommitFailed) {
			return err
		}
		return fmt.Errorf("expire %d iceberg snapshots: %w", len(ids), err)
	}
	// After the commit: the files of the expired snapshots are unreferenced now.
	post := table.New(cat.ident, meta, loc, tbl.FS, cat)
	if err := upd.PostCommit(ctx, tbl, post); err != nil {
		slog.Warn("iceberg snapshot expiry: removing the files of expired snapshots failed", "table", cat.ident[0], "err", err)
	}
	snapshotsExpired.Add(ctx, int64(len(ids)))
	return nil
}

// capSnapshots expires the oldest snapshots of tbl beyond max (MaxSnapshots), once they pass it
// by half (expiry reads every retained manifest list, so it runs once per max/2 publishes): the metadata file lists every retained snapshot and is rewritten by every
// publish, so a 1-second-trigger table with a week of versions would otherwise carry 600,000.
// Time travel then reaches the newest max snapshots; the versions stay readable through DoGet.
func capSnapshots(ctx context.Context, cat *storeCatalog, tbl *table.Table, max int) error {
	snaps := tbl.Metadata().Snapshots()
	if max <= 0 || len(snaps) <= max+max/2 {
		return nil
	}
	cur := tbl.CurrentSnapshot()
	slices.SortFunc(snaps, func(a, b table.Snapshot) int { return cmp.Compare(a.SequenceNumber, b.SequenceNumber) })
	var ids []int64
	for _, s := range snaps[:len(snaps)-max] {
		if cur == nil || s.SnapshotID != cur.SnapshotID {
			ids = append(ids, s.SnapshotID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return expireSnapshots(ctx, cat, tbl, ids)
}
