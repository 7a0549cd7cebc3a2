package streaming

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/flight-sink/flight-sink/engine"
)

// Defaults of Options.HealthLaggingAfter and Options.HealthStalledAfter.
const (
	DefaultHealthLaggingAfter = 2 * time.Minute
	DefaultHealthStalledAfter = 15 * time.Minute
)

// HealthThresholds returns how long the table at version m may go without a committed epoch
// before its health is lagging, then stalled: its configuration's health.lagging_after and
// health.stalled_after, else the sink's. A configuration that does not parse leaves the sink's.
func (s *Sink) HealthThresholds(m *engine.Manifest) (lagging, stalled time.Duration) {
	lagging, stalled = s.opts.HealthLaggingAfter, s.opts.HealthStalledAfter
	c, err := engine.ParseMaintenanceConfig(m.Config[engine.ConfigMaintenance])
	if err != nil {
		return lagging, stalled
	}
	if d := time.Duration(c.Health.LaggingAfter); d > 0 {
		lagging = d
	}
	if d := time.Duration(c.Health.StalledAfter); d > 0 {
		stalled = d
	}
	return lagging, stalled
}

// recordHealthThresholds exports table's thresholds as of version m (committed by this
// process), for the alert rules to compare its last commit's age with.
func (s *Sink) recordHealthThresholds(ctx context.Context, table string, m *engine.Manifest) {
	lagging, stalled := s.HealthThresholds(m)
	attr := metric.WithAttributes(attribute.String("table", table))
	laggingAfter.Record(ctx, lagging.Seconds(), attr)
	stalledAfter.Record(ctx, stalled.Seconds(), attr)
}
