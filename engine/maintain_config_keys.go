package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The maintenance configuration as flat settings: each field of MaintenanceConfig has a dotted
// key ("mode", "compaction.max_fragments", "cleanup.older_than", ...) whose value is text. The CLI's
// `config get|set` and the get_table_config / set_table_config actions read and write these keys;
// the table stores them as one MaintenanceConfig under ConfigMaintenance.

// MaintenanceSetting is one key of a table's maintenance configuration.
type MaintenanceSetting struct {
	Key string `json:"key"`
	// Value is the value in force: the stored one, or the default.
	Value string `json:"value"`
	// Stored: the table stores a value for the key (otherwise Value is the default).
	Stored bool `json:"stored"`
}

// settingKey reads, writes and checks one field of a MaintenanceConfig.
type settingKey struct {
	name string
	// get renders the field; "" when it is unset.
	get func(c *MaintenanceConfig) string
	// set parses v into the field; "" unsets it (the default). It refuses what check refuses.
	set func(c *MaintenanceConfig, v string) error
	// check reports a field value no maintainer can follow, however it was set (a text value
	// through set, or a decoded ConfigMaintenance); nil when the field takes any value.
	check func(c *MaintenanceConfig) error
	// unset renders the default of a field EnsureDefaults leaves unset.
	unset string
}

// ConfigKeyError is a maintenance setting refused: the key, and the values the key takes. It
// wraps ErrInvalidConfig.
type ConfigKeyError struct {
	Key string
	// Value is the value refused, as given.
	Value string
	// Want says what the key takes.
	Want string
}

func (e *ConfigKeyError) Error() string {
	return fmt.Sprintf("%s=%q: want %s", e.Key, e.Value, e.Want)
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigKeyError) Unwrap() error { return ErrInvalidConfig }

// numberBounds are the values a numeric setting takes besides 0 (unset: the default). Every
// numeric key has them; the key's set and check both test them, so NaN, an infinity or a number
// out of range is refused whichever way it arrives.
type numberBounds struct {
	min, max         float64
	openMin, openMax bool // the bound itself is excluded
}

func (b numberBounds) contains(x float64) bool {
	return !math.IsNaN(x) && !math.IsInf(x, 0) &&
		(x > b.min || !b.openMin && x == b.min) && (x < b.max || !b.openMax && x == b.max)
}

func (b numberBounds) String() string {
	lo, hi := "[", "]"
	if b.openMin {
		lo = "("
	}
	if b.openMax {
		hi = ")"
	}
	return lo + strconv.FormatFloat(b.min, 'f', -1, 64) + ", " + strconv.FormatFloat(b.max, 'f', -1, 64) + hi
}

// Bounds of the numeric settings.
var (
	countBounds     = numberBounds{min: 1, max: math.MaxInt32}
	rowsBounds      = numberBounds{min: 1, max: 1 << 40}
	shareBounds     = numberBounds{min: 0, max: 1, openMin: true, openMax: true}
	ratioBounds     = numberBounds{min: 0, max: 1_000_000, openMin: true}
	ceilingBounds   = numberBounds{min: MinMaxFragments, max: MaxMaxFragments}
	durationBounds  = numberBounds{min: 0, max: float64(MaxSettingDuration), openMin: true}
	maxDurationText = time.Duration(MaxSettingDuration).String()
)

// MaxSettingDuration is the longest duration a maintenance setting takes (about 100 years).
const MaxSettingDuration = 100 * 365 * 24 * time.Hour

// number is the Go type of a numeric setting's field.
type number interface{ ~int | ~int64 | ~float64 }

// numberKey is a numeric setting: whole numbers for int fields, any finite number for float64
// fields, always within b.
func numberKey[T number](name, unset string, b numberBounds, f func(c *MaintenanceConfig) *T) settingKey {
	_, isFloat := any(T(0)).(float64)
	want := "a whole number in " + b.String()
	if isFloat {
		want = "a number in " + b.String()
	}
	check := func(c *MaintenanceConfig) error {
		if x := *f(c); x != 0 && !b.contains(float64(x)) {
			return &ConfigKeyError{Key: name, Value: formatNumber(x), Want: want}
		}
		return nil
	}
	return settingKey{name: name, unset: unset, check: check,
		get: func(c *MaintenanceConfig) string {
			if x := *f(c); x != 0 {
				return formatNumber(x)
			}
			return ""
		},
		set: func(c *MaintenanceConfig, v string) error {
			if v == "" {
				*f(c) = 0
				return nil
			}
			var x float64
			if isFloat {
				p, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return &ConfigKeyError{Key: name, Value: v, Want: want}
				}
				x = p
			} else {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return &ConfigKeyError{Key: name, Value: v, Want: want}
				}
				x = float64(n)
			}
			// Bounds first, then the conversion: every bound fits T, so T(x) is exact.
			if !b.contains(x) {
				return &ConfigKeyError{Key: name, Value: v, Want: want}
			}
			*f(c) = T(x)
			return nil
		}}
}

func formatNumber[T number](x T) string {
	if f, ok := any(x).(float64); ok {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strconv.FormatInt(int64(x), 10)
}

func boolKey(name string, f func(c *MaintenanceConfig) **bool) settingKey {
	return settingKey{name: name, unset: "true",
		get: func(c *MaintenanceConfig) string {
			if p := *f(c); p != nil {
				return strconv.FormatBool(*p)
			}
			return ""
		},
		set: func(c *MaintenanceConfig, v string) error {
			if v == "" {
				*f(c) = nil
				return nil
			}
			b, err := strconv.ParseBool(v)
			if err != nil {
				return &ConfigKeyError{Key: name, Value: v, Want: "true or false"}
			}
			*f(c) = &b
			return nil
		}}
}

func durationKey(name string, f func(c *MaintenanceConfig) *Duration) settingKey {
	want := "a positive duration up to " + maxDurationText + " such as 90s, 10m or 24h"
	return settingKey{name: name,
		get: func(c *MaintenanceConfig) string {
			if d := *f(c); d != 0 {
				return time.Duration(d).String()
			}
			return ""
		},
		set: func(c *MaintenanceConfig, v string) error {
			if v == "" {
				*f(c) = 0
				return nil
			}
			d, err := time.ParseDuration(v)
			if err != nil || !durationBounds.contains(float64(d)) {
				return &ConfigKeyError{Key: name, Value: v, Want: want}
			}
			*f(c) = Duration(d)
			return nil
		},
		check: func(c *MaintenanceConfig) error {
			if d := *f(c); d != 0 && !durationBounds.contains(float64(d)) {
				return &ConfigKeyError{Key: name, Value: time.Duration(d).String(), Want: want}
			}
			return nil
		}}
}

func policyKey(name string, f func(c *MaintenanceConfig) *FailurePolicy) settingKey {
	const want = "best_effort or strict"
	return settingKey{name: name,
		get: func(c *MaintenanceConfig) string { return string(*f(c)) },
		set: func(c *MaintenanceConfig, v string) error {
			*f(c) = FailurePolicy(v)
			return nil // check refuses a policy it does not know
		},
		check: func(c *MaintenanceConfig) error {
			switch p := *f(c); p {
			case "", BestEffort, Strict:
				return nil
			default:
				return &ConfigKeyError{Key: name, Value: string(p), Want: want}
			}
		}}
}

// settingKeys are the settings, in the order `config get` lists them.
var settingKeys = []settingKey{
	{name: "mode",
		get: func(c *MaintenanceConfig) string { return string(c.Mode) },
		set: func(c *MaintenanceConfig, v string) error {
			c.Mode = MaintenanceMode(v)
			return nil // check refuses a mode it does not know
		},
		check: func(c *MaintenanceConfig) error {
			switch c.Mode {
			case "", MaintenanceBackground, MaintenanceInline, MaintenanceOff:
				return nil
			default:
				return &ConfigKeyError{Key: "mode", Value: string(c.Mode), Want: "background, inline or off"}
			}
		}},
	boolKey("optimize_indices.enabled", func(c *MaintenanceConfig) **bool { return &c.OptimizeIndices.Enabled }),
	policyKey("optimize_indices.failure_policy", func(c *MaintenanceConfig) *FailurePolicy { return &c.OptimizeIndices.FailurePolicy }),
	numberKey("optimize_indices.min_unindexed_fragments", "", countBounds, func(c *MaintenanceConfig) *int { return &c.OptimizeIndices.MinUnindexedFragments }),
	numberKey("optimize_indices.max_segments", "", countBounds, func(c *MaintenanceConfig) *int { return &c.OptimizeIndices.MaxSegments }),
	boolKey("compaction.enabled", func(c *MaintenanceConfig) **bool { return &c.Compaction.Enabled }),
	policyKey("compaction.failure_policy", func(c *MaintenanceConfig) *FailurePolicy { return &c.Compaction.FailurePolicy }),
	numberKey("compaction.min_fragments", "", countBounds, func(c *MaintenanceConfig) *int { return &c.Compaction.MinFragments }),
	numberKey("compaction.target_rows_per_fragment", "table", rowsBounds, func(c *MaintenanceConfig) *int64 { return &c.Compaction.TargetRowsPerFragment }),
	numberKey("compaction.max_deleted_share", "0.1", shareBounds, func(c *MaintenanceConfig) *float64 { return &c.Compaction.MaxDeletedShare }),
	numberKey("compaction.merge_ratio", "", ratioBounds, func(c *MaintenanceConfig) *float64 { return &c.Compaction.MergeRatio }),
	numberKey("compaction.max_fragments", "", ceilingBounds, func(c *MaintenanceConfig) *int { return &c.Compaction.MaxFragments }),
	boolKey("cleanup.enabled", func(c *MaintenanceConfig) **bool { return &c.Cleanup.Enabled }),
	policyKey("cleanup.failure_policy", func(c *MaintenanceConfig) *FailurePolicy { return &c.Cleanup.FailurePolicy }),
	durationKey("cleanup.older_than", func(c *MaintenanceConfig) *Duration { return &c.Cleanup.OlderThan }),
	numberKey("cleanup.keep_last", "", countBounds, func(c *MaintenanceConfig) *int { return &c.Cleanup.KeepLast }),
	durationKey("cleanup.grace", func(c *MaintenanceConfig) *Duration { return &c.Cleanup.Grace }),
	durationKey("cleanup.check_interval", func(c *MaintenanceConfig) *Duration { return &c.Cleanup.CheckInterval }),
	withUnset(durationKey("health.lagging_after", func(c *MaintenanceConfig) *Duration { return &c.Health.LaggingAfter }), "server"),
	withUnset(durationKey("health.stalled_after", func(c *MaintenanceConfig) *Duration { return &c.Health.StalledAfter }), "server"),
}

// withUnset returns k rendering unset as its default.
func withUnset(k settingKey, unset string) settingKey {
	k.unset = unset
	return k
}

// MaintenanceKeys returns the keys of the maintenance settings, in listing order.
func MaintenanceKeys() []string {
	out := make([]string, len(settingKeys))
	for i, k := range settingKeys {
		out[i] = k.name
	}
	return out
}

func findMaintenanceKey(name string) (settingKey, error) {
	for _, k := range settingKeys {
		if k.name == name {
			return k, nil
		}
	}
	return settingKey{}, fmt.Errorf("%w: unknown key %q (keys: %s)", ErrInvalidConfig, name, strings.Join(MaintenanceKeys(), ", "))
}

// storedMaintenanceConfig decodes the maintenance configuration m stores, without defaults.
func storedMaintenanceConfig(m *Manifest) (MaintenanceConfig, error) {
	var c MaintenanceConfig
	s := m.Config[ConfigMaintenance]
	if s == "" {
		return c, nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("table config %s: %w", ConfigMaintenance, err)
	}
	return c, nil
}

// MaintenanceSettings lists every maintenance setting of table version m: the stored value, or
// the default in force.
func MaintenanceSettings(m *Manifest) ([]MaintenanceSetting, error) {
	stored, err := storedMaintenanceConfig(m)
	if err != nil {
		return nil, err
	}
	effective := stored
	effective.EnsureDefaults()
	out := make([]MaintenanceSetting, len(settingKeys))
	for i, k := range settingKeys {
		v, set := k.get(&effective), k.get(&stored) != ""
		if v == "" {
			v = k.unset
		}
		out[i] = MaintenanceSetting{Key: k.name, Value: v, Stored: set}
	}
	return out, nil
}

// SetMaintenance changes the keys of set in the table's stored maintenance configuration (an
// empty value removes the key: its default applies again) and commits the result as one
// UpdateConfig transaction with props. Every key and value is checked, and the whole
// configuration validated, before anything is written; a bad one fails with an error wrapping
// ErrInvalidConfig that names the key. The next maintenance run reads it from the new version.
// Two concurrent calls each commit a whole configuration: the later commit's wins.
//
// A table that stores a configuration no longer takes the server's default one
// (MaintainerOptions.DefaultConfig) for the keys it leaves unset; it takes the built-in defaults.
func (t *Table) SetMaintenance(ctx context.Context, set map[string]string, props map[string]string) (*Manifest, error) {
	if len(set) == 0 {
		return nil, fmt.Errorf("table %s: %w: no setting to change (KEY=VALUE)", t.name, ErrInvalidConfig)
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, name := range keys {
		if _, err := findMaintenanceKey(name); err != nil {
			return nil, fmt.Errorf("table %s: %w", t.name, err)
		}
	}
	latest, err := t.Latest(ctx)
	if err != nil {
		return nil, err
	}
	c, err := storedMaintenanceConfig(latest)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", t.name, err)
	}
	for _, name := range keys {
		k, _ := findMaintenanceKey(name)
		if err := k.set(&c, strings.TrimSpace(set[name])); err != nil {
			return nil, fmt.Errorf("table %s: %w", t.name, err)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("table %s: %w", t.name, err)
	}
	if (c == MaintenanceConfig{}) {
		if _, stored := latest.Config[ConfigMaintenance]; !stored {
			return latest, nil // nothing stored and nothing to store
		}
		return t.UpdateConfig(ctx, nil, []string{ConfigMaintenance}, props)
	}
	enc, err := c.Encode()
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", t.name, err)
	}
	return t.UpdateConfig(ctx, map[string]string{ConfigMaintenance: enc}, nil, props)
}
