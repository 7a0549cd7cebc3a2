package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/objstore"
)

// TestDropFencesStaleWriter: a writer that read the table before a drop and creates its manifest
// after it (the worst a writer on another server can do: its commit is prepared, then the whole
// drop runs, and, in the second case, the name is created anew) is refused with ErrTableNotFound,
// leaves no version behind, and the table under the name (none, or the new one) is untouched:
// the new table never sees the dropped one's rows and goes on committing.
func TestDropFencesStaleWriter(t *testing.T) {
	for _, recreate := range []bool{false, true} {
		name := map[bool]string{false: "dropped", true: "recreated"}[recreate]
		t.Run(name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, store objstore.Store) {
				ctx := t.Context()
				createRowsTable(t, store, "events", nil)
				var hookErr error
				var fresh *Table
				armed := false
				opts := &Options{BeforeManifestWrite: func(uint64) error {
					if !armed {
						return nil
					}
					armed = false
					if _, hookErr = Drop(ctx, store, "events"); hookErr != nil || !recreate {
						return nil
					}
					// The new table reaches the stale writer's version: its manifest has no gap to fall in.
					if fresh, hookErr = Create(ctx, store, "events", rowsSchema, CreateOptions{}, nil); hookErr == nil {
						appendIDs(t, fresh, idRange(1000, 3), nil)
						appendIDs(t, fresh, idRange(1003, 3), nil)
					}
					return nil
				}}
				stale, err := Open(ctx, store, "events", opts)
				if err != nil {
					t.Fatal(err)
				}
				appendIDs(t, stale, idRange(0, 5), nil) // version 2
				armed = true
				rec := makeRows(idRange(5, 5))
				defer rec.Release()
				m, err := stale.Append(ctx, []arrow.RecordBatch{rec}, nil) // version 3, after the drop
				if hookErr != nil {
					t.Fatalf("drop (and create) during the commit: %v", hookErr)
				}
				if !errors.Is(err, ErrTableNotFound) {
					t.Fatalf("commit after the drop: version %v, err %v; want ErrTableNotFound", versionOf(m), err)
				}
				if !recreate {
					if _, err := Open(ctx, store, "events", nil); !errors.Is(err, ErrTableNotFound) {
						t.Fatalf("open after the drop: %v, want ErrTableNotFound", err)
					}
					if keys := listKeys(t, stale, versionsDir); len(keys) != 0 {
						t.Fatalf("the dropped table holds versions %v", keys)
					}
					if _, err := Create(ctx, store, "events", rowsSchema, CreateOptions{}, nil); err != nil {
						t.Fatalf("create after the drop: %v", err)
					}
					return
				}
				requireDenseVersions(t, fresh, 3)
				requireSameIDs(t, "the new table", scanRows(t, fresh, 0), idRange(1000, 6))
				// The stale handle reads the new table anew and commits on it.
				appendIDs(t, stale, idRange(2000, 2), nil)
				requireSameIDs(t, "the new table after the stale handle's next append", scanRows(t, fresh, 0),
					append(idRange(1000, 6), idRange(2000, 2)...))
			})
		})
	}
}

// TestDropDamagedTable: a table whose newest manifest is cut short and whose schema file is gone
// is dropped like any other (the drop reads nothing of it but a manifest header), and the name
// is free afterwards.
func TestDropDamagedTable(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := createRowsTable(t, store, "damaged", nil)
		appendIDs(t, tbl, idRange(0, 5), nil)
		m := appendIDs(t, tbl, idRange(5, 5), nil)
		if err := store.Delete(ctx, tbl.key(m.SchemaFile)); err != nil {
			t.Fatal(err)
		}
		if err := store.Put(ctx, tbl.key(makeManifestKey(m.Version)), strings.NewReader(`{"format_version": 2, "vers`)); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(ctx, store, "damaged", nil); err == nil {
			t.Fatal("the damaged table opened")
		}
		v, err := Drop(ctx, store, "damaged")
		if err != nil || v != m.Version {
			t.Fatalf("drop of the damaged table: version %d, %v; want version %d", v, err, m.Version)
		}
		fresh := createRowsTable(t, store, "damaged", nil)
		requireSameIDs(t, "the new table", scanRows(t, fresh, 0), nil)
	})
}

// A handle that read a table before it was dropped and created again under the name reads the
// new table, never its cached manifest of the dropped one (which the new table's version of the
// same number would seem to confirm), and CheckNotDropped tells the two incarnations apart.
func TestLatestAfterDropAndCreateAgain(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		old := createRowsTable(t, store, "events", nil)
		before, err := old.Latest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Drop(ctx, store, "events"); err != nil {
			t.Fatal(err)
		}
		if err := CheckNotDropped(ctx, store, "events", before.TableID); !errors.Is(err, ErrTableNotFound) {
			t.Fatalf("CheckNotDropped of the dropped incarnation: %v, want ErrTableNotFound", err)
		}
		fresh, err := Create(ctx, store, "events", rowsSchema, CreateOptions{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, err := fresh.Latest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want.Version != before.Version || want.TableID == before.TableID {
			t.Fatalf("the new table is at version %d (%s), the dropped one was at %d (%s): the case needs the same version", want.Version, want.TableID, before.Version, before.TableID)
		}
		if err := CheckNotDropped(ctx, store, "events", want.TableID); err != nil {
			t.Fatalf("CheckNotDropped of the new incarnation: %v", err)
		}
		got, err := old.Latest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.TableID != want.TableID {
			t.Fatalf("the old handle reads incarnation %s, want the new table's %s", got.TableID, want.TableID)
		}
	})
}
