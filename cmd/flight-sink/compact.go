package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kong"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
)

// compactBarMinRows is the smallest compaction (in live rows to rewrite) that gets a progress
// bar under --progress=auto: anything smaller is over before a bar would be read.
const compactBarMinRows = 1 << 18

// CompactCmd rewrites a table's small fragments, and fragments with many deleted rows, into
// fewer and denser ones: one Rewrite commit that streaming writers, deletes and upserts rebase
// over (docs/conflicts.md).
type CompactCmd struct {
	Table           string  `arg:"" name:"TABLE_URI" help:"Table URI: ./root/table, file:///root/table or s3://bucket/prefix/table."`
	TargetRows      int64   `name:"target-rows" default:"1048576" env:"FLIGHT_SINK_COMPACT_TARGET_ROWS" help:"Live rows a compacted fragment is filled to; fragments with fewer are merged with their neighbours."`
	MaxDeletedShare float64 `name:"max-deleted-share" default:"0.1" env:"FLIGHT_SINK_COMPACT_MAX_DELETED_SHARE" help:"Rewrite a fragment whose share of deleted rows exceeds this (above 0, at most 1), dropping those rows, even when it has no neighbour to merge with."`
	DryRun          bool    `name:"dry-run" env:"FLIGHT_SINK_DRY_RUN" help:"Print the groups of fragments a compaction would rewrite; write and commit nothing."`
	JSON            bool    `name:"json" env:"FLIGHT_SINK_JSON" help:"Print JSON instead of text."`
}

// Validate checks the flags before anything is opened.
func (c *CompactCmd) Validate() error {
	if c.TargetRows < 1 {
		return fmt.Errorf("--target-rows must be positive, got %d", c.TargetRows)
	}
	// Written so that NaN fails too.
	if !(c.MaxDeletedShare > 0 && c.MaxDeletedShare <= 1) {
		return fmt.Errorf("--max-deleted-share must be in (0, 1], got %v", c.MaxDeletedShare)
	}
	return nil
}

// compactJSON is the --json output. The counters are the result of the compact action
// (flightsvc.CompactResult), under the same names. A dry run fills what the plan knows (read_version,
// groups, fragments_removed, rows_rewritten, deleted_rows_dropped, bytes_read) and lists the
// groups in plan; what only writing tells (version, fragments_added, bytes_written) stays 0.
type compactJSON struct {
	Table  string `json:"table"`
	URI    string `json:"uri"`
	DryRun bool   `json:"dry_run"`
	flightsvc.CompactResult
	Plan []compactGroupJSON `json:"plan,omitempty"`
}

// compactGroupJSON is one group of adjacent fragments a compaction would rewrite together.
type compactGroupJSON struct {
	Fragments   []uint64 `json:"fragments"`
	Rows        int64    `json:"rows"`
	DeletedRows int64    `json:"deleted_rows"`
	Bytes       int64    `json:"bytes"`
}

// Run compacts the latest version, or with --dry-run prints what compacting it would rewrite.
func (c *CompactCmd) Run(ctx context.Context, g *Globals, kctx *kong.Context) error {
	t, err := openTable(ctx, g, c.Table)
	if err != nil {
		return err
	}
	opts := engine.CompactOptions{TargetRowsPerFragment: c.TargetRows, MaxDeletedShare: c.MaxDeletedShare}
	out := compactJSON{Table: t.Name(), URI: t.URI(), DryRun: c.DryRun}
	if c.DryRun {
		m, err := t.Latest(ctx)
		if err != nil {
			return err
		}
		var rep engine.CompactReport
		rep, out.Plan = describePlan(t.PlanCompaction(m, opts))
		out.CompactResult = flightsvc.CompactResultOf(rep)
	} else {
		bar := &compactBar{g: g}
		opts.Progress = bar.report
		rep, err := t.Compact(ctx, opts)
		if err != nil {
			bar.abandon()
			return fmt.Errorf("compact %s: %w", t.Name(), err)
		}
		bar.finish()
		out.CompactResult = flightsvc.CompactResultOf(rep)
	}
	if c.JSON {
		enc := json.NewEncoder(kctx.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if c.DryRun {
		return writeCompactPlanText(kctx.Stdout, &out)
	}
	return writeCompactReportText(kctx.Stdout, &out)
}

// describePlan sums up a compaction plan (CompactionPlan.Report) and each of its groups.
func describePlan(plan engine.CompactionPlan) (engine.CompactReport, []compactGroupJSON) {
	groups := make([]compactGroupJSON, 0, len(plan.Groups))
	for _, frags := range plan.Groups {
		gj := compactGroupJSON{Fragments: make([]uint64, 0, len(frags))}
		for _, f := range frags {
			gj.Fragments = append(gj.Fragments, f.ID)
			gj.Rows += f.LiveRows()
			gj.DeletedRows += f.DeletedRows
			gj.Bytes += f.DataBytes()
		}
		groups = append(groups, gj)
	}
	return plan.Report(), groups
}

func writeCompactPlanText(out io.Writer, d *compactJSON) error {
	if d.Groups == 0 {
		_, err := fmt.Fprintf(out, "nothing to compact in %s at version %d (dry run)\n", d.Table, d.ReadVersion)
		return err
	}
	fmt.Fprintf(out, "compaction plan for %s at version %d (dry run: nothing written)\n", d.Table, d.ReadVersion)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "groups:\t%d\n", d.Groups)
	fmt.Fprintf(w, "fragments to rewrite:\t%d\n", d.FragmentsRemoved)
	fmt.Fprintf(w, "rows to rewrite:\t%d\n", d.RowsRewritten)
	fmt.Fprintf(w, "deleted rows to drop:\t%d\n", d.DeletedRowsDropped)
	fmt.Fprintf(w, "bytes to read:\t%d (%s)\n", d.BytesRead, bytesText(d.BytesRead))
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n")
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "GROUP\tFRAGMENTS\tROWS\tDELETED\tSIZE\tFRAGMENT IDS\n")
	for i, gj := range d.Plan {
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%s\t%s\n", i+1, len(gj.Fragments), gj.Rows, gj.DeletedRows, bytesText(gj.Bytes), rangesText(gj.Fragments))
	}
	return w.Flush()
}

func writeCompactReportText(out io.Writer, d *compactJSON) error {
	if d.Version == 0 {
		_, err := fmt.Fprintf(out, "nothing to compact in %s at version %d\n", d.Table, d.ReadVersion)
		return err
	}
	fmt.Fprintf(out, "compacted %s: committed version %d (read version %d) in %s\n",
		d.Table, d.Version, d.ReadVersion, time.Duration(d.DurationNanos).Round(time.Millisecond))
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "groups:\t%d\n", d.Groups)
	fmt.Fprintf(w, "fragments:\t%d removed, %d added\n", d.FragmentsRemoved, d.FragmentsAdded)
	fmt.Fprintf(w, "rows rewritten:\t%d\n", d.RowsRewritten)
	fmt.Fprintf(w, "deleted rows dropped:\t%d\n", d.DeletedRowsDropped)
	fmt.Fprintf(w, "bytes read:\t%d (%s)\n", d.BytesRead, bytesText(d.BytesRead))
	fmt.Fprintf(w, "bytes written:\t%d (%s)\n", d.BytesWritten, bytesText(d.BytesWritten))
	return w.Flush()
}

// rangesText renders ascending numbers compactly, runs of consecutive ones as a range:
// 1, 2, 3, 5, 7, 8 -> "1-3, 5, 7-8". It renders "-" when there are none.
func rangesText(ns []uint64) string {
	if len(ns) == 0 {
		return "-"
	}
	var parts []string
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.FormatUint(ns[i], 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ns[i], ns[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// compactBar drives a progress bar, in rows, from CompactOptions.Progress. The bar is made at
// the first report, when the number of rows to rewrite is known. The engine serializes the
// calls.
type compactBar struct {
	g    *Globals
	bar  *progress
	done int64
}

func (b *compactBar) report(p engine.CompactProgress) {
	if b.bar == nil {
		b.bar = b.g.newProgress(p.RowsTotal, compactBarMinRows, "compacting (rows)")
	}
	b.bar.Add(int(p.RowsDone - b.done))
	b.done = p.RowsDone
}

func (b *compactBar) finish() { b.bar.Finish() }

// abandon ends a bar cut short by an error on its own line, so the error message that follows
// on stderr does not run into it.
func (b *compactBar) abandon() { abandonProgress(b.bar) }

// abandonProgress stops a bar that will not finish where it stands and ends its line (the bar's
// completion hook prints the newline).
func abandonProgress(p *progress) {
	if p != nil && p.bar != nil {
		_ = p.bar.Exit()
	}
}
