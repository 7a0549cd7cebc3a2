package engine

import (
	"context"
	"fmt"

	"github.com/flight-sink/flight-sink/objstore"
)

// Drop deletes every object of table name from store and returns the version that was its
// newest. The manifests go first, so that from the moment Drop begins every reader and writer of
// the table finds it gone (ErrTableNotFound: Latest never returns a version no longer stored),
// then the data, deletion, index and transaction files and the Iceberg metadata. A table that
// does not exist is ErrTableNotFound. A Drop cut short leaves a table without manifests, which
// reads as gone; dropping it again removes the rest, and creating it again starts at version 1
// beside the leftover files (which a later Drop removes).
//
// A writer that commits on another server while the table is dropped may land one version
// after the drop listed the manifests; drop a table whose writers have stopped.
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
	if err := store.DeletePrefix(ctx, t.key(versionsDir)); err != nil {
		return 0, fmt.Errorf("drop table %s: remove versions: %w", name, err)
	}
	if err := store.DeletePrefix(ctx, t.prefix); err != nil {
		return 0, fmt.Errorf("drop table %s: remove files: %w", name, err)
	}
	return vs[len(vs)-1], nil
}
