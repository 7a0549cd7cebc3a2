package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// timeText renders a commit time for people: UTC, millisecond precision.
func timeText(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// timeJSON renders a commit time for programs: UTC, full precision.
func timeJSON(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// propertiesText renders properties as sorted key=value pairs, or "-" when there are none.
func propertiesText(p map[string]string) string {
	if len(p) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + p[k]
	}
	return strings.Join(parts, ", ")
}

// bytesText renders a size in binary units, exact below 1 KiB.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
