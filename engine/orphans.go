package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flight-sink/flight-sink/engine/objstore"
)

// OrphanReport says what RemoveOrphans found and removed.
type OrphanReport struct {
	DataFilesRemoved        int   `json:"data_files_removed"`
	TransactionFilesRemoved int   `json:"transaction_files_removed"`
	BytesRemoved            int64 `json:"bytes_removed"`
	DryRun                  bool  `json:"dry_run,omitempty"`
}

// RemoveOrphans deletes data and transaction files that no existing manifest references and that
// are older than grace. Such files are left by commits that failed or crashed before their
// manifest was created, and by staged writes that were never committed.
//
// REQUIRES: grace is longer than any write may take between writing its files and committing
// them (for multi-writer epochs: longer than the stage TTL). A file younger than grace may belong
// to an in-flight commit and is never removed.
func (t *Table) RemoveOrphans(ctx context.Context, grace time.Duration, dryRun bool) (OrphanReport, error) {
	rep := OrphanReport{DryRun: dryRun}
	// List the candidates before reading manifests: a file written after this listing is not a
	// candidate, and a manifest committed after the listing can only reference files that are
	// younger than grace (its writer wrote them recently) or already referenced before.
	data, err := t.store.List(ctx, t.key(dataDir), "")
	if err != nil {
		return rep, fmt.Errorf("table %s: list data files: %w", t.name, err)
	}
	txns, err := t.store.List(ctx, t.key(transactionsDir), "")
	if err != nil {
		return rep, fmt.Errorf("table %s: list transaction files: %w", t.name, err)
	}
	versions, err := t.listVersions(ctx, 0)
	if err != nil {
		return rep, err
	}
	referenced := make(map[string]bool)
	for _, v := range versions {
		m, err := t.Manifest(ctx, v)
		if errors.Is(err, ErrVersionNotFound) {
			continue // removed meanwhile by another cleanup
		}
		if err != nil {
			return rep, err
		}
		referenced[t.key(m.Transaction.File)] = true
		for _, f := range m.Fragments {
			for _, df := range f.Files {
				referenced[t.key(df.Path)] = true
			}
			if f.DeletionFile != "" {
				referenced[t.key(f.DeletionFile)] = true
			}
		}
	}
	cutoff := time.Now().Add(-grace)
	remove := func(o objstore.ObjectInfo) (bool, error) {
		if referenced[o.Key] || o.ModTime.After(cutoff) {
			return false, nil
		}
		rep.BytesRemoved += o.Size
		if dryRun {
			return true, nil
		}
		return true, t.store.Delete(ctx, o.Key)
	}
	for _, o := range data {
		ok, err := remove(o)
		if err != nil {
			return rep, err
		}
		if ok {
			rep.DataFilesRemoved++
		}
	}
	for _, o := range txns {
		ok, err := remove(o)
		if err != nil {
			return rep, err
		}
		if ok {
			rep.TransactionFilesRemoved++
		}
	}
	return rep, nil
}
