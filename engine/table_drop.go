package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// errTableDropped: a commit's manifest landed in a table whose drop had begun (its drop marker
// exists); the commit was refused and nothing may reference its files. It travels with
// ErrTableNotFound.
var errTableDropped = errors.New("table dropped")

// Drop deletes every object of table name from store and returns the newest version it found.
//
// Drop fences the table's writers before it deletes anything: it creates the drop marker of the
// table's incarnation (Manifest.TableID; the marker lives at the root, outside the table's
// directory), and every commit looks for that marker after its manifest lands (Table.Commit).
// A commit that finds it is refused with ErrTableNotFound and removes its manifest; one that does
// not find it landed before the marker. So every version a writer was told committed is at most
// the version Drop returns, which it lists once the marker exists. Then the manifests go, so the
// table reads as gone (ErrTableNotFound), then the data, deletion, index and transaction files,
// the MemWAL shards and the Iceberg metadata.
//
// The marker is kept (a few bytes per dropped incarnation): a writer that read the table before
// the drop may create its manifest at any later time, even once the name holds a new table, and
// must still find it. A table created again under the name has a new TableID, so the markers of
// the names' earlier tables never touch it.
//
// A table without versions (never created, or a drop cut short) is ErrTableNotFound, after its
// leftover files are removed. A damaged table is dropped too: the marker names the incarnation of
// the newest version whose header can be read, and Drop reads nothing else of the table.
func Drop(ctx context.Context, store objstore.Store, name string) (uint64, error) {
	if err := ValidateTableName(name); err != nil {
		return 0, err
	}
	t := newTable(store, name, nil)
	vs, err := t.listVersions(ctx, 0)
	if err != nil {
		return 0, err
	}
	if len(vs) == 0 {
		// No manifest: gone, or a drop cut short. Remove what remains either way.
		if err := store.DeletePrefix(ctx, t.prefix); err != nil {
			return 0, fmt.Errorf("drop table %s: %w", name, err)
		}
		return 0, fmt.Errorf("drop table %s at %s: %w", name, store, ErrTableNotFound)
	}
	if id, ok := t.incarnation(ctx, vs); ok {
		// The marker before any deletion: a commit that lands after this put finds it.
		if err := t.markDropped(ctx, id); err != nil {
			return 0, err
		}
		// Versions that landed since the first listing were acknowledged: count them.
		if vs, err = t.listVersions(ctx, 0); err != nil {
			return 0, err
		}
	}
	newest := uint64(0)
	if len(vs) > 0 {
		newest = vs[len(vs)-1]
	}
	// The manifests first: from here on the table reads as gone.
	if err := store.DeletePrefix(ctx, t.key(versionsDir)); err != nil {
		return 0, fmt.Errorf("drop table %s: remove versions: %w", name, err)
	}
	if err := store.DeletePrefix(ctx, t.prefix); err != nil {
		return 0, fmt.Errorf("drop table %s: remove files: %w", name, err)
	}
	return newest, nil
}

// maxIncarnationProbes bounds the manifests Drop reads, newest first, for the table's id.
const maxIncarnationProbes = 8

// incarnation returns the TableID of the newest of versions vs (ascending) whose manifest header
// can be read; ok is false when none of the newest few can.
func (t *Table) incarnation(ctx context.Context, vs []uint64) (id string, ok bool) {
	for i := len(vs) - 1; i >= 0 && i >= len(vs)-maxIncarnationProbes; i-- {
		h, err := t.manifestHeader(ctx, vs[i])
		if err == nil {
			return h.TableID, true
		}
		t.opts.Logger.Warn("drop: manifest header unreadable", "table", t.name, "version", vs[i], "err", err)
	}
	return "", false
}

// dropMarker is the body of a drop marker: what a person listing the root finds.
type dropMarker struct {
	Table   string `json:"table"`
	TableID string `json:"table_id"`
}

// markDropped creates the drop marker of incarnation id of the table (an existing one is kept: a
// drop cut short, dropped again).
func (t *Table) markDropped(ctx context.Context, id string) error {
	b, err := json.Marshal(dropMarker{Table: t.name, TableID: id})
	if err != nil {
		return err
	}
	key := makeDropMarkerKey(t.name, id)
	if err := t.store.PutIfAbsent(ctx, key, b); err != nil && !errors.Is(err, objstore.ErrExists) {
		return fmt.Errorf("drop table %s: write drop marker %s: %w", t.name, key, err)
	}
	return nil
}

// isDropped reports whether incarnation id of the table has a drop marker.
func (t *Table) isDropped(ctx context.Context, id string) (bool, error) {
	key := makeDropMarkerKey(t.name, id)
	_, err := t.store.Stat(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("table %s: read drop marker %s: %w", t.name, key, err)
	}
	return true, nil
}

// CheckNotDropped is the drop fence of a write that is not one of the table's commits but lands
// under its directory (a MemWAL shard's manifest): it fails with ErrTableNotFound when
// incarnation tableID (Manifest.TableID) of table name has a drop marker. Drop creates the marker
// before it deletes anything, so a write checked after it landed that finds no marker landed
// before the drop began, and the drop removes it; a write that finds one must remove itself.
func CheckNotDropped(ctx context.Context, store objstore.Store, name, tableID string) error {
	t := newTable(store, name, nil)
	dropped, err := t.isDropped(ctx, tableID)
	if err != nil {
		return err
	}
	if dropped {
		return fmt.Errorf("table %s at %s: %w: %w", name, store, ErrTableNotFound, errTableDropped)
	}
	return nil
}

// refuseIfDropped is the drop fence of a commit whose manifest m has landed: it fails with
// ErrTableNotFound (and errTableDropped) when m's incarnation has a drop marker, after removing
// m so that nothing builds on it. Drop creates the marker before it deletes anything, so a
// commit that does not find it landed before the drop began.
func (t *Table) refuseIfDropped(ctx context.Context, m *Manifest) error {
	dropped, err := t.isDropped(ctx, m.TableID)
	if err != nil {
		// The manifest landed, but whether the table is being dropped is unknown: not acknowledged.
		return fmt.Errorf("table %s: commit version %d: %w", t.name, m.Version, err)
	}
	if !dropped {
		return nil
	}
	key := t.key(makeManifestKey(m.Version))
	if err := t.store.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		t.opts.Logger.Warn("commit into a dropped table: manifest not removed (a drop of the table removes it)", "table", t.name, "key", key, "err", err)
	}
	t.forgetLatest()
	return fmt.Errorf("table %s at %s: version %d landed after the table's drop began, refused: %w: %w",
		t.name, t.store, m.Version, ErrTableNotFound, errTableDropped)
}

// droppedWhileCommitting returns the error err of a commit on incarnation id, as
// ErrTableNotFound (and errTableDropped) when the incarnation has a drop marker: a commit racing
// a drop fails on whatever the drop removed first (a manifest, a directory, a file the commit
// reads), and its caller is told the table is gone. The marker is read only for errors a drop
// can explain.
func (t *Table) droppedWhileCommitting(ctx context.Context, id string, err error) error {
	if err == nil || errors.Is(err, ErrTableNotFound) || errors.Is(err, epochid.ErrCommitted) || ctx.Err() != nil {
		return err
	}
	if dropped, derr := t.isDropped(ctx, id); derr != nil || !dropped {
		return err
	}
	t.forgetLatest()
	return fmt.Errorf("table %s at %s: dropped while committing: %w: %w (%v)", t.name, t.store, ErrTableNotFound, errTableDropped, err)
}
