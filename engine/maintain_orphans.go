package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/flight-sink/flight-sink/internal/panics"
	"github.com/flight-sink/flight-sink/objstore"
)

// OrphanReport says what RemoveOrphans (or the file sweep of Cleanup) found and removed.
type OrphanReport struct {
	DataFilesRemoved        int
	DeletionFilesRemoved    int
	TransactionFilesRemoved int
	IndexFilesRemoved       int
	BytesRemoved            int64
	DryRun                  bool
}

// RemoveOrphans deletes data, deletion, transaction and index files that no existing manifest
// or stage record references and that are older than grace. Such files are left by commits that
// failed or crashed before their manifest was created, by stages that expired, and by versions
// that cleanup removed.
//
// REQUIRES: grace is longer than any write may take between writing its files and committing
// them (or, for a staged partition, writing its stage record). A file younger than grace may
// belong to an in-flight commit and is never removed.
func (t *Table) RemoveOrphans(ctx context.Context, grace time.Duration, dryRun bool) (OrphanReport, error) {
	rep, _, err := t.sweepFiles(ctx, nil, nil, time.Now().Add(-grace), dryRun, nil)
	return rep, err
}

// sweepFiles removes (or, dry, only lists) every data, deletion, transaction and index file that no
// version except those in dropped references, that no stage record except those in droppedStages
// names, and that was last modified before cutoff. dropped and droppedStages hold the versions and
// stage records a dry-run cleanup would have removed, so that it decides like a real run. It
// returns the table-relative keys it removed.
func (t *Table) sweepFiles(ctx context.Context, dropped map[uint64]bool, droppedStages map[string]bool, cutoff time.Time, dryRun bool, progress func(done, total int)) (OrphanReport, []string, error) {
	rep := OrphanReport{DryRun: dryRun}
	// List the candidates before reading manifests: a file written after this listing is not a
	// candidate, and a manifest committed after the listing can only reference files that are
	// younger than the grace period (its writer wrote them recently) or were referenced by the
	// version it was built on, which is read below.
	var candidates []objstore.ObjectInfo
	for _, dir := range []string{dataDir, deletionsDir, transactionsDir, indicesDir, streamsDir, schemasDir} {
		objs, err := t.store.List(ctx, t.key(dir), "")
		if err != nil {
			return rep, nil, fmt.Errorf("table %s: list %s: %w", t.name, dir, err)
		}
		candidates = append(candidates, objs...)
	}
	// Stages before versions: a stage is committed before its record is removed, so a stage this
	// misses has its files named by a version read below.
	stages, err := t.listStages(ctx)
	if err != nil {
		return rep, nil, err
	}
	referenced, err := t.referencedFiles(ctx, dropped)
	if err != nil {
		return rep, nil, err
	}
	for _, st := range stages {
		if droppedStages[st.key] {
			continue
		}
		for _, f := range st.files {
			referenced[f] = true // unreferenced by any version until the stage's epoch commits
		}
	}
	var removed []string
	var victims []objstore.ObjectInfo
	for _, o := range candidates {
		if !referenced[o.Key] && o.ModTime.Before(cutoff) {
			victims = append(victims, o)
		}
	}
	for i, o := range victims {
		if !dryRun {
			if err := t.store.Delete(ctx, o.Key); err != nil {
				return rep, removed, fmt.Errorf("table %s: remove %s: %w", t.name, o.Key, err)
			}
		}
		rel := strings.TrimPrefix(o.Key, t.prefix)
		removed = append(removed, rel)
		rep.BytesRemoved += o.Size
		switch {
		case strings.HasPrefix(rel, dataDir):
			rep.DataFilesRemoved++
		case strings.HasPrefix(rel, deletionsDir):
			rep.DeletionFilesRemoved++
		case strings.HasPrefix(rel, indicesDir):
			rep.IndexFilesRemoved++
		default:
			rep.TransactionFilesRemoved++
		}
		if progress != nil {
			progress(i+1, len(victims))
		}
	}
	return rep, removed, nil
}

// referencedFiles returns the keys of every file a version of the table references, skipping
// the versions in dropped. Manifests are read concurrently; a version removed meanwhile (by
// another cleanup) is skipped.
func (t *Table) referencedFiles(ctx context.Context, dropped map[uint64]bool) (map[string]bool, error) {
	versions, err := t.listVersions(ctx, 0)
	if err != nil {
		return nil, err
	}
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	referenced := make(map[string]bool)
	sem := make(chan struct{}, 16)
	for _, v := range versions {
		if dropped[v] {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var m *Manifest
			err := panics.Recover(t.opts.Logger, "read manifest for cleanup", func() (err error) {
				m, err = t.Manifest(ctx, v)
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, ErrVersionNotFound) {
				return
			}
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			referenced[t.key(m.Transaction.File)] = true
			if m.StreamsArchive != "" {
				referenced[t.key(m.StreamsArchive)] = true
			}
			if m.SchemaFile != "" {
				referenced[t.key(m.SchemaFile)] = true
			}
			for _, f := range m.Fragments {
				for _, df := range f.Files {
					referenced[t.key(df.Path)] = true
				}
				if f.DeletionFile != "" {
					referenced[t.key(f.DeletionFile)] = true
				}
			}
			for _, ix := range m.Indices {
				for _, p := range segmentFiles(ix.Segments) {
					referenced[t.key(p)] = true
				}
			}
		}()
	}
	wg.Wait()
	return referenced, firstErr
}
