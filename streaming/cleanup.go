package streaming

import (
	"context"
	"encoding/json"
	"time"

	"github.com/flight-sink/flight-sink/engine"
)

// CleanupReport says what Cleanup removed.
type CleanupReport struct {
	engine.OrphanReport
	StagesExpired int `json:"stages_expired"`
}

// Cleanup removes a table's expired stages (older than Options.StageTTL, never committed) and the
// files no version references that are older than the stage TTL: data of expired stages and of
// failed commits.
func (s *Sink) Cleanup(ctx context.Context, table string, dryRun bool) (CleanupReport, error) {
	t, err := s.Table(ctx, table)
	if err != nil {
		return CleanupReport{}, err
	}
	var rep CleanupReport
	stages, err := s.store.List(ctx, table+"/_staging/", "")
	if err != nil {
		return rep, err
	}
	cutoff := time.Now().Add(-s.opts.StageTTL).UnixNano()
	for _, o := range stages {
		b, err := s.store.Get(ctx, o.Key)
		if err != nil {
			continue // removed meanwhile
		}
		var rec stageRecord
		created := o.ModTime.UnixNano()
		if json.Unmarshal(b, &rec) == nil && rec.CreatedNanos > 0 {
			created = rec.CreatedNanos
		}
		if created >= cutoff {
			continue
		}
		rep.StagesExpired++
		if !dryRun {
			if err := s.store.Delete(ctx, o.Key); err != nil {
				return rep, err
			}
		}
	}
	// Staged data files are unreferenced until their epoch commits, so the orphan grace must be
	// at least the stage TTL.
	orph, err := t.RemoveOrphans(ctx, s.opts.StageTTL, dryRun)
	rep.OrphanReport = orph
	return rep, err
}
