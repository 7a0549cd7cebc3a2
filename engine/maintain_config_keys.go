package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

// settingKey reads and writes one field of a MaintenanceConfig.
type settingKey struct {
	name string
	// get renders the field; "" when it is unset.
	get func(c *MaintenanceConfig) string
	// set parses v into the field; "" unsets it (the default).
	set func(c *MaintenanceConfig, v string) error
	// unset renders the default of a field EnsureDefaults leaves unset.
	unset string
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
				return fmt.Errorf("want true or false")
			}
			*f(c) = &b
			return nil
		}}
}

func intKey(name string, f func(c *MaintenanceConfig) *int) settingKey {
	return settingKey{name: name,
		get: func(c *MaintenanceConfig) string {
			if n := *f(c); n != 0 {
				return strconv.Itoa(n)
			}
			return ""
		},
		set: func(c *MaintenanceConfig, v string) error {
			if v == "" {
				*f(c) = 0
				return nil
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("want a whole number of at least 1")
			}
			*f(c) = n
			return nil
		}}
}

func floatKey(name, unset string, f func(c *MaintenanceConfig) *float64) settingKey {
	return settingKey{name: name, unset: unset,
		get: func(c *MaintenanceConfig) string {
			if x := *f(c); x != 0 {
				return strconv.FormatFloat(x, 'g', -1, 64)
			}
			return ""
		},
		set: func(c *MaintenanceConfig, v string) error {
			if v == "" {
				*f(c) = 0
				return nil
			}
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x <= 0 {
				return fmt.Errorf("want a number above 0")
			}
			*f(c) = x
			return nil
		}}
}

func durationKey(name string, f func(c *MaintenanceConfig) *Duration) settingKey {
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
			if err != nil || d <= 0 {
				return fmt.Errorf("want a positive duration such as 90s, 10m or 24h")
			}
			*f(c) = Duration(d)
			return nil
		}}
}

func policyKey(name string, f func(c *MaintenanceConfig) *FailurePolicy) settingKey {
	return settingKey{name: name,
		get: func(c *MaintenanceConfig) string { return string(*f(c)) },
		set: func(c *MaintenanceConfig, v string) error {
			switch p := FailurePolicy(v); p {
			case "", BestEffort, Strict:
				*f(c) = p
				return nil
			}
			return fmt.Errorf("want best_effort or strict")
		}}
}

// settingKeys are the settings, in the order `config get` lists them.
var settingKeys = []settingKey{
	{name: "mode",
		get: func(c *MaintenanceConfig) string { return string(c.Mode) },
		set: func(c *MaintenanceConfig, v string) error {
			switch m := MaintenanceMode(v); m {
			case "", MaintenanceBackground, MaintenanceInline, MaintenanceOff:
				c.Mode = m
				return nil
			}
			return fmt.Errorf("want background, inline or off")
		}},
	boolKey("optimize_indices.enabled", func(c *MaintenanceConfig) **bool { return &c.OptimizeIndices.Enabled }),
	policyKey("optimize_indices.failure_policy", func(c *MaintenanceConfig) *FailurePolicy { return &c.OptimizeIndices.FailurePolicy }),
	intKey("optimize_indices.min_unindexed_fragments", func(c *MaintenanceConfig) *int { return &c.OptimizeIndices.MinUnindexedFragments }),
	intKey("optimize_indices.max_segments", func(c *MaintenanceConfig) *int { return &c.OptimizeIndices.MaxSegments }),
	boolKey("compaction.enabled", func(c *MaintenanceConfig) **bool { return &c.Compaction.Enabled }),
	policyKey("compaction.failure_policy", func(c *MaintenanceConfig) *FailurePolicy { return &c.Compaction.FailurePolicy }),
	intKey("compaction.min_fragments", func(c *MaintenanceConfig) *int { return &c.Compaction.MinFragments }),
	{name: "compaction.target_rows_per_fragment", unset: "table",
		get: func(c *MaintenanceConfig) string {
			if n := c.Compaction.TargetRowsPerFragment; n != 0 {
				return strconv.FormatInt(n, 10)
			}
			return ""
		},
		set: func(c *MaintenanceConfig, v string) error {
			if v == "" {
				c.Compaction.TargetRowsPerFragment = 0
				return nil
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return fmt.Errorf("want a whole number of at least 1")
			}
			c.Compaction.TargetRowsPerFragment = n
			return nil
		}},
	floatKey("compaction.max_deleted_share", "0.1", func(c *MaintenanceConfig) *float64 { return &c.Compaction.MaxDeletedShare }),
	floatKey("compaction.merge_ratio", "", func(c *MaintenanceConfig) *float64 { return &c.Compaction.MergeRatio }),
	intKey("compaction.max_fragments", func(c *MaintenanceConfig) *int { return &c.Compaction.MaxFragments }),
	boolKey("cleanup.enabled", func(c *MaintenanceConfig) **bool { return &c.Cleanup.Enabled }),
	policyKey("cleanup.failure_policy", func(c *MaintenanceConfig) *FailurePolicy { return &c.Cleanup.FailurePolicy }),
	durationKey("cleanup.older_than", func(c *MaintenanceConfig) *Duration { return &c.Cleanup.OlderThan }),
	intKey("cleanup.keep_last", func(c *MaintenanceConfig) *int { return &c.Cleanup.KeepLast }),
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
			return nil, fmt.Errorf("table %s: %w: %s=%q: %v", t.name, ErrInvalidConfig, name, set[name], err)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("table %s: %w: %v", t.name, ErrInvalidConfig, err)
	}
	if (c == MaintenanceConfig{}) {
		if _, stored := latest.Config[ConfigMaintenance]; !stored {
			return latest, nil // nothing stored and nothing to store
		}
		return t.UpdateConfig(ctx, nil, []string{ConfigMaintenance}, props)
	}
	return t.UpdateConfig(ctx, map[string]string{ConfigMaintenance: c.String()}, nil, props)
}
