package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// ConfigMaintenance is the table config key holding the table's maintenance configuration
// (MaintenanceConfig as JSON). A table without it gets the defaults: background maintenance with
// every operation on.
const ConfigMaintenance = "flight_sink.maintenance"

// MaintenanceMode says when a TableMaintainer runs after a user commit.
type MaintenanceMode string

// Maintenance modes.
const (
	// MaintenanceBackground runs maintenance in a goroutine after the commit is acknowledged, at
	// most one run per table at a time (commits during a run trigger one more run after it).
	MaintenanceBackground MaintenanceMode = "background"
	// MaintenanceInline runs maintenance before MaintainAfterCommit returns (the commit is
	// visible already; its acknowledgement waits).
	MaintenanceInline MaintenanceMode = "inline"
	// MaintenanceOff never runs maintenance after commits.
	MaintenanceOff MaintenanceMode = "off"
)

// FailurePolicy says what a failed maintenance operation does to the run (docs/indices.md).
type FailurePolicy string

// Failure policies.
const (
	// BestEffort logs and counts the failure and continues with the next operation.
	BestEffort FailurePolicy = "best_effort"
	// Strict stops the run and returns a *MaintenanceError naming the operation (in background
	// mode, where nobody waits for it, it is logged as an error).
	Strict FailurePolicy = "strict"
)

// MaintenanceConfig is a table's maintenance configuration, stored as JSON under
// ConfigMaintenance. The zero value (and any unset field) means the default.
type MaintenanceConfig struct {
	// Mode: "background" (default), "inline" or "off".
	Mode            MaintenanceMode       `json:"mode,omitempty"`
	OptimizeIndices IndexMaintenance      `json:"optimize_indices,omitzero"`
	Compaction      CompactionMaintenance `json:"compaction,omitzero"`
	Cleanup         CleanupMaintenance    `json:"cleanup,omitzero"`
	// Health is the table's own thresholds of the status page's health states (and of the alert
	// rules, through the metrics the server exports); none of maintenance's steps reads them.
	Health HealthThresholds `json:"health,omitzero"`
}

// HealthThresholds are how long a table streaming queries write may go without a committed
// epoch before it is lagging, then stalled. Zero: the server's (serve --health-lagging-after,
// --health-stalled-after).
type HealthThresholds struct {
	LaggingAfter Duration `json:"lagging_after,omitempty"`
	StalledAfter Duration `json:"stalled_after,omitempty"`
}

// IndexMaintenance configures the optimize-indices step.
type IndexMaintenance struct {
	// Enabled: default true.
	Enabled       *bool         `json:"enabled,omitempty"`
	FailurePolicy FailurePolicy `json:"failure_policy,omitempty"`
	// MinUnindexedFragments: optimize an index once this many fragments are not covered by it.
	// Default 1.
	MinUnindexedFragments int `json:"min_unindexed_fragments,omitempty"`
	// MaxSegments: optimize (merge) an index that has more segments than this. Default 8.
	MaxSegments int `json:"max_segments,omitempty"`
}

// CompactionMaintenance configures the compaction step.
type CompactionMaintenance struct {
	// Enabled: default true.
	Enabled       *bool         `json:"enabled,omitempty"`
	FailurePolicy FailurePolicy `json:"failure_policy,omitempty"`
	// MinFragments: compact once the compaction plan would rewrite at least this many fragments
	// (small fragments piling up), or any fragment with too many deleted rows. Default 16.
	MinFragments int `json:"min_fragments,omitempty"`
	// TargetRowsPerFragment: CompactOptions.TargetRowsPerFragment (default: the table's).
	TargetRowsPerFragment int64 `json:"target_rows_per_fragment,omitempty"`
	// MaxDeletedShare: CompactOptions.MaxDeletedShare (default 0.1).
	MaxDeletedShare float64 `json:"max_deleted_share,omitempty"`
	// MergeRatio: CompactOptions.MergeRatio. Default 4: incremental compaction, each row
	// rewritten about log4(target / epoch size) + 1 times.
	MergeRatio float64 `json:"merge_ratio,omitempty"`
	// MaxFragments is the fragment ceiling (maintain_ceiling.go): a commit that adds fragments to a
	// version holding this many small fragments (fewer live rows than the target; in a partitioned
	// table, each partition's first one not counted) stalls until a
	// compaction has brought them below it, whatever the mode and whether this step is enabled.
	// Default 64; MinMaxFragments..MaxMaxFragments.
	MaxFragments int `json:"max_fragments,omitempty"`
}

// CleanupMaintenance configures the cleanup step.
type CleanupMaintenance struct {
	// Enabled: default true.
	Enabled       *bool         `json:"enabled,omitempty"`
	FailurePolicy FailurePolicy `json:"failure_policy,omitempty"`
	// OlderThan: CleanupPolicy.OlderThan. Default 1 hour.
	OlderThan Duration `json:"older_than,omitempty"`
	// KeepLast: CleanupPolicy.KeepLast. Default 1000, ten times the default dedupe look-back, so
	// a streaming writer's history scan finds every epoch of its window (the manifest's epoch
	// watermark catches replays beyond it).
	KeepLast int `json:"keep_last,omitempty"`
	// Grace: CleanupPolicy.Grace. Default 24 hours; never less than the maintainer's
	// MinCleanupGrace.
	Grace Duration `json:"grace,omitempty"`
	// CheckInterval: how often (per table and process) to look for versions past retention.
	// Default 10 minutes.
	CheckInterval Duration `json:"check_interval,omitempty"`
}

// Defaults of MaintenanceConfig.
const (
	defaultMinUnindexedFragments = 1
	defaultMaxIndexSegments      = 8
	defaultMinCompactFragments   = 16
	defaultCompactMergeRatio     = 4
	defaultMaxFragments          = 64
	defaultMaintenanceOlderThan  = time.Hour
	defaultMaintenanceKeepLast   = 1000
	defaultMaintenanceGrace      = 24 * time.Hour
	defaultCleanupCheckInterval  = 10 * time.Minute
)

// Bounds of CompactionMaintenance.MaxFragments. A ceiling below 2 leaves compaction nothing to
// merge; one above 100,000 bounds nothing a manifest could still hold comfortably.
const (
	MinMaxFragments = 2
	MaxMaxFragments = 100_000
)

// Duration is a time.Duration that encodes in JSON as a Go duration string ("90s", "1h") and
// decodes from one or from a number of seconds.
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	// A number of seconds beyond MaxSettingDuration (or below its negative) is refused before the
	// conversion, which would overflow.
	if err != nil || math.Abs(f) > MaxSettingDuration.Seconds() {
		return fmt.Errorf("duration %s: want a string like \"90s\" or a number of seconds up to %v", b, MaxSettingDuration.Seconds())
	}
	*d = Duration(f * float64(time.Second))
	return nil
}

func enabled(b *bool) bool { return b == nil || *b }

// EnsureDefaults fills unset fields with their defaults and returns c.
func (c *MaintenanceConfig) EnsureDefaults() *MaintenanceConfig {
	if c.Mode == "" {
		c.Mode = MaintenanceBackground
	}
	for _, p := range []*FailurePolicy{&c.OptimizeIndices.FailurePolicy, &c.Compaction.FailurePolicy, &c.Cleanup.FailurePolicy} {
		if *p == "" {
			*p = BestEffort
		}
	}
	if c.OptimizeIndices.MinUnindexedFragments <= 0 {
		c.OptimizeIndices.MinUnindexedFragments = defaultMinUnindexedFragments
	}
	if c.OptimizeIndices.MaxSegments <= 0 {
		c.OptimizeIndices.MaxSegments = defaultMaxIndexSegments
	}
	if c.Compaction.MinFragments <= 0 {
		c.Compaction.MinFragments = defaultMinCompactFragments
	}
	if c.Compaction.MergeRatio <= 0 {
		c.Compaction.MergeRatio = defaultCompactMergeRatio
	}
	if c.Compaction.MaxFragments <= 0 {
		c.Compaction.MaxFragments = defaultMaxFragments
	}
	if c.Cleanup.OlderThan <= 0 {
		c.Cleanup.OlderThan = Duration(defaultMaintenanceOlderThan)
	}
	if c.Cleanup.KeepLast <= 0 {
		c.Cleanup.KeepLast = defaultMaintenanceKeepLast
	}
	if c.Cleanup.Grace <= 0 {
		c.Cleanup.Grace = Duration(defaultMaintenanceGrace)
	}
	if c.Cleanup.CheckInterval <= 0 {
		c.Cleanup.CheckInterval = Duration(defaultCleanupCheckInterval)
	}
	return c
}

// Validate reports a configuration no maintainer can follow: a *ConfigKeyError (wrapping
// ErrInvalidConfig) naming the first key, in listing order, whose value the key does not take.
// Every key's check runs, so each numeric field is finite and within its bounds.
func (c *MaintenanceConfig) Validate() error {
	for _, k := range settingKeys {
		if k.check == nil {
			continue
		}
		if err := k.check(c); err != nil {
			return err
		}
	}
	if h := c.Health; h.LaggingAfter < 0 || h.StalledAfter < 0 || (h.LaggingAfter > 0 && h.StalledAfter > 0 && h.StalledAfter <= h.LaggingAfter) {
		return fmt.Errorf("health lagging_after %v and stalled_after %v: want positive durations, stalled_after longer than lagging_after",
			time.Duration(h.LaggingAfter), time.Duration(h.StalledAfter))
	}
	return nil
}

// ParseMaintenanceConfig decodes and validates a ConfigMaintenance value; "" is the default
// configuration. Unknown fields are errors, so a typo does not silently keep a default.
func ParseMaintenanceConfig(s string) (MaintenanceConfig, error) {
	var c MaintenanceConfig
	if s != "" {
		dec := json.NewDecoder(bytes.NewReader([]byte(s)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return c, fmt.Errorf("table config %s: %w", ConfigMaintenance, err)
		}
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("table config %s: %w", ConfigMaintenance, err)
	}
	c.EnsureDefaults()
	return c, nil
}

// Encode encodes c as the ConfigMaintenance value. It fails on a configuration Validate
// refuses, so what it returns always parses back to c.
func (c MaintenanceConfig) Encode() (string, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encode table config %s: %w", ConfigMaintenance, err)
	}
	return string(b), nil
}

// MaintenanceConfigOf returns the maintenance configuration of table version m, defaults filled.
func MaintenanceConfigOf(m *Manifest) (MaintenanceConfig, error) {
	return ParseMaintenanceConfig(m.Config[ConfigMaintenance])
}

// UpdateConfig sets the keys of set and removes the keys of unset in the table config, as one
// UpdateConfig transaction with props. It lands on top of whatever committed meanwhile (last
// writer wins per key). A ConfigMaintenance and a ConfigDataCodec value are validated first
// (a changed codec applies to the files written after the change).
func (t *Table) UpdateConfig(ctx context.Context, set map[string]string, unset []string, props map[string]string) (*Manifest, error) {
	if v, ok := set[ConfigDataCodec]; ok {
		if _, err := ParseDataCodec(v); err != nil {
			return nil, fmt.Errorf("table %s: table config %s: %w", t.name, ConfigDataCodec, err)
		}
	}
	if v, ok := set[ConfigMaintenance]; ok {
		if _, err := ParseMaintenanceConfig(v); err != nil {
			return nil, fmt.Errorf("table %s: %w", t.name, err)
		}
	}
	if len(set) == 0 && len(unset) == 0 {
		return nil, fmt.Errorf("table %s: update config changes nothing", t.name)
	}
	return t.Commit(ctx, &Transaction{Operation: OpUpdateConfig, Properties: props,
		ConfigSet: cloneMap(set), ConfigUnset: append([]string(nil), unset...)})
}

// applyConfigChange applies an UpdateConfig to next.
func applyConfigChange(next *Manifest, txn *Transaction) {
	if next.Config == nil && len(txn.ConfigSet) > 0 {
		next.Config = make(map[string]string, len(txn.ConfigSet))
	}
	for k, v := range txn.ConfigSet {
		next.Config[k] = v
	}
	for _, k := range txn.ConfigUnset {
		delete(next.Config, k)
	}
}
