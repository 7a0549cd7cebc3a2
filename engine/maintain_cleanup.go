package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/flight-sink/flight-sink/objstore"
)

// CleanupPolicy says which versions and files Cleanup may remove. The zero value is the
// conservative default: keep a week of history and files younger than a day.
type CleanupPolicy struct {
	// OlderThan: a version is removed once it has been superseded (the version after it was
	// committed) for longer than this, so a reader that opened a version while it was the latest
	// has at least OlderThan to finish with it. Default 7 days; at least 1 second.
	OlderThan time.Duration
	// KeepLast keeps the newest KeepLast versions whatever their age. The latest version is
	// always kept. Default 1.
	KeepLast int
	// Grace: a file that no retained version references is removed only once it is older than
	// Grace, because it may belong to a commit still in flight. Default 24 hours.
	//
	// REQUIRES: Grace exceeds the longest time between a commit writing its first file and its
	// manifest landing (a compaction's whole run, a prepared transaction's wait), or, for a
	// staged partition, its stage record landing.
	Grace time.Duration
	// StageTTL: a stage record (a staged partition of a multi-writer epoch, engine/write_stage.go)
	// written longer ago than this is expired: removed, so that its epoch can no longer commit
	// it, and its data files are left to the file sweep (and Grace). Default DefaultStageTTL (24
	// hours). The files of a stage that is kept are kept whatever their age: they are
	// unreferenced until the stage's epoch commits, and a kept stage must still commit.
	StageTTL time.Duration
	// DryRun reports what a real run would remove, and removes nothing.
	DryRun bool
	// Now is the reference time of every age; default time.Now(). A dry run and a real run given
	// the same Now (and no commits in between) decide exactly the same.
	Now time.Time
	// Progress, when set, is called as versions and files are removed (or listed, dry).
	Progress func(CleanupProgress)
}

// CleanupProgress reports how far a cleanup has come.
type CleanupProgress struct {
	Phase string // "versions" or "files"
	Done  int
	Total int
}

// CleanupReport says what Cleanup removed (or, dry, would remove).
type CleanupReport struct {
	OrphanReport
	// VersionsRemoved lists the versions whose manifests were removed, ascending.
	VersionsRemoved []uint64
	// FilesRemoved lists every other file removed, relative to the table.
	FilesRemoved []string
	// StagesExpired counts the stage records removed for being older than the stage TTL.
	StagesExpired int
}

// minCleanupAge is the floor of CleanupPolicy.OlderThan: a reader must always get a moment.
const minCleanupAge = time.Second

// EnsureDefaults fills unset fields with their defaults and returns p.
func (p *CleanupPolicy) EnsureDefaults() *CleanupPolicy {
	if p.OlderThan <= 0 {
		p.OlderThan = 7 * 24 * time.Hour
	}
	if p.OlderThan < minCleanupAge {
		p.OlderThan = minCleanupAge
	}
	if p.KeepLast < 1 {
		p.KeepLast = 1
	}
	if p.Grace <= 0 {
		p.Grace = 24 * time.Hour
	}
	if p.StageTTL <= 0 {
		p.StageTTL = DefaultStageTTL
	}
	if p.Now.IsZero() {
		p.Now = time.Now()
	}
	return p
}

// Cleanup removes the stages older than the stage TTL, the versions the policy expires and then
// every data, deletion and transaction file that no retained version references and that is
// older than the grace period (files of removed versions, of failed commits, of expired stages).
//
// Order matters for crash safety and for concurrent readers:
//   - expired stage records go first, so that the sweep below may take their files once past the
//     grace period; a stage younger than the TTL keeps its record and its files, whatever the
//     grace: it still commits;
//   - versions are removed oldest first, one at a time, so the versions that exist are always a
//     contiguous range ending at the latest (Table.Latest relies on it);
//   - files are removed only after the manifests that referenced them, so a crash leaves
//     unreferenced files for the next run, never a manifest naming a missing file;
//   - the latest version, and any version superseded less than OlderThan ago, is never removed,
//     nor is any file younger than Grace.
//
// Several cleanups may run at once (each removes what the others have not).
func (t *Table) Cleanup(ctx context.Context, p CleanupPolicy) (CleanupReport, error) {
	p.EnsureDefaults()
	ctx, span := tracer.Start(ctx, "engine.Cleanup")
	defer span.End()
	rep := CleanupReport{OrphanReport: OrphanReport{DryRun: p.DryRun}}
	stages, err := t.listStages(ctx)
	if err != nil {
		return rep, err
	}
	expiredStages := make(map[string]bool)
	for _, st := range stages {
		if !st.created.Before(p.Now.Add(-p.StageTTL)) {
			continue
		}
		if !p.DryRun {
			if err := t.store.Delete(ctx, st.key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				return rep, fmt.Errorf("table %s: remove expired stage %s: %w", t.name, st.key, err)
			}
		}
		expiredStages[st.key] = true
		rep.StagesExpired++
	}
	expired, err := t.expiredVersions(ctx, p)
	if err != nil {
		return rep, err
	}
	if len(expired) > 0 && t.opts.CleanupRetain != nil {
		// Before any manifest goes: the hook expires what mirrors the versions (Iceberg
		// snapshots) first, so that nothing outside reads a version once it is removed.
		keep, err := t.opts.CleanupRetain(ctx, t, expired[len(expired)-1]+1, p.DryRun)
		if err != nil {
			return rep, fmt.Errorf("table %s: cleanup retention: %w", t.name, err)
		}
		for len(expired) > 0 && expired[len(expired)-1] >= keep {
			expired = expired[:len(expired)-1]
		}
	}
	dropped := make(map[uint64]bool, len(expired))
	for i, v := range expired {
		dropped[v] = true
		if !p.DryRun {
			// Oldest first: the existing versions stay a contiguous range.
			if err := t.store.Delete(ctx, t.key(makeManifestKey(v))); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				return rep, fmt.Errorf("table %s: remove version %d: %w", t.name, v, err)
			}
		}
		rep.VersionsRemoved = append(rep.VersionsRemoved, v)
		if p.Progress != nil {
			p.Progress(CleanupProgress{Phase: "versions", Done: i + 1, Total: len(expired)})
		}
	}
	var progress func(done, total int)
	if p.Progress != nil {
		progress = func(done, total int) { p.Progress(CleanupProgress{Phase: "files", Done: done, Total: total}) }
	}
	orph, files, err := t.sweepFiles(ctx, dropped, expiredStages, p.Now.Add(-p.Grace), p.DryRun, progress)
	orph.DryRun = p.DryRun
	rep.OrphanReport, rep.FilesRemoved = orph, files
	if rep.FilesRemoved == nil {
		rep.FilesRemoved = []string{}
	}
	if rep.VersionsRemoved == nil {
		rep.VersionsRemoved = []uint64{}
	}
	return rep, err
}

// expiredVersions returns, ascending, the versions policy p removes: among all but the newest
// KeepLast, those whose successor was committed more than OlderThan before p.Now. Commit
// timestamps increase with the version, so the expired versions are a prefix; it is found by a
// binary search over manifest headers.
func (t *Table) expiredVersions(ctx context.Context, p CleanupPolicy) ([]uint64, error) {
	vs, err := t.listVersions(ctx, 0)
	if err != nil {
		return nil, err
	}
	if len(vs) <= p.KeepLast {
		return nil, nil
	}
	candidates := vs[:len(vs)-p.KeepLast]
	cutoff := p.Now.Add(-p.OlderThan)
	var herr error
	// successorOld(i): the version after candidates[i] was committed before the cutoff.
	successorOld := func(i int) bool {
		if herr != nil {
			return false
		}
		h, err := t.historyEntry(ctx, vs[i+1])
		if err != nil {
			herr = err
			return false
		}
		if h.Missing {
			return true // removed meanwhile by another cleanup: older still
		}
		return h.Timestamp.Before(cutoff)
	}
	n := sort.Search(len(candidates), func(i int) bool { return !successorOld(i) })
	if herr != nil {
		return nil, herr
	}
	return candidates[:n], nil
}
