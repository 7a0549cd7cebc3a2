package streaming

import (
	"context"
	"time"

	"github.com/flight-sink/flight-sink/engine"
)

// CleanupRequest is a cleanup of one table (the DoAction "cleanup").
type CleanupRequest struct {
	Table string
	// OlderThanSeconds: versions superseded for longer than this are removed (default 7 days).
	OlderThanSeconds int64
	// KeepLast keeps the newest N versions whatever their age (default 1; the latest always).
	KeepLast int
	DryRun   bool
}

// MaxCleanupAgeSeconds is the largest older_than_seconds a cleanup takes: 100 years, far inside
// what a time.Duration can hold.
const MaxCleanupAgeSeconds = 100 * 365 * 24 * 3600

// CleanupReport says what Cleanup removed (or, in a dry run, would remove), expired stages
// included (StagesExpired).
type CleanupReport struct {
	engine.CleanupReport
}

// Cleanup removes a table's expired stages (older than Options.StageTTL, never committed), the
// versions the policy expires, and the files no retained version or kept stage references and
// that are older than Options.CleanupGrace: engine.Table.Cleanup, as the CLI and the
// maintainer's cleanup step run it.
func (s *Sink) Cleanup(ctx context.Context, req CleanupRequest) (CleanupReport, error) {
	// A count of seconds past what a time.Duration holds (~292 years) would wrap negative and
	// expire every old version.
	if req.OlderThanSeconds < 0 || req.OlderThanSeconds > MaxCleanupAgeSeconds {
		return CleanupReport{}, invalid("cleanup older_than_seconds must be 0..%d (0: the default, 7 days), got %d", MaxCleanupAgeSeconds, req.OlderThanSeconds)
	}
	if req.KeepLast < 0 {
		return CleanupReport{}, invalid("cleanup keep_last must be >= 0, got %d", req.KeepLast)
	}
	t, err := s.Table(ctx, req.Table)
	if err != nil {
		return CleanupReport{}, err
	}
	var rep CleanupReport
	policy := engine.CleanupPolicy{
		OlderThan: time.Duration(req.OlderThanSeconds) * time.Second, KeepLast: req.KeepLast,
		Grace: s.opts.CleanupGrace, StageTTL: s.opts.StageTTL, DryRun: req.DryRun,
	}
	rep.CleanupReport, err = t.Cleanup(ctx, policy)
	return rep, err
}
