package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kong"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
)

// cleanupBarMin is the smallest phase of a cleanup (versions or files to remove) that gets a
// progress bar under --progress=auto.
const cleanupBarMin = 256

// CleanupCmd removes a table's expired versions and the files no retained version references.
type CleanupCmd struct {
	Table     string        `arg:"" name:"TABLE_URI" help:"Table URI: ./root/table, file:///root/table or s3://bucket/prefix/table."`
	OlderThan time.Duration `name:"older-than" default:"168h" env:"FLIGHT_SINK_CLEANUP_OLDER_THAN" help:"Remove a version once the version after it has been committed for longer than this (at least 1s): a reader gets that long to finish with a version that was the latest."`
	KeepLast  int           `name:"keep-last" default:"1" env:"FLIGHT_SINK_CLEANUP_KEEP_LAST" help:"Keep this many of the newest versions whatever their age (at least 1: the latest version is never removed)."`
	Grace     time.Duration `name:"grace" default:"24h" env:"FLIGHT_SINK_CLEANUP_GRACE" help:"Remove a file no retained version or kept stage references only once it is older than this (at least 1s), since it may belong to a commit in flight. Keep it above the longest compaction."`
	StageTTL  time.Duration `name:"stage-ttl" default:"24h" env:"FLIGHT_SINK_STAGE_TTL" help:"Expire a multi-writer stage that was never committed once it is older than this (at least 1s), as the servers' cleanup does: use the servers' --stage-ttl."`
	DryRun    bool          `name:"dry-run" env:"FLIGHT_SINK_DRY_RUN" help:"List exactly what a real run would remove; remove nothing."`
	JSON      bool          `name:"json" env:"FLIGHT_SINK_JSON" help:"Print JSON instead of text."`
}

// Validate checks the flags before anything is opened.
func (c *CleanupCmd) Validate() error {
	// The engine raises a shorter OlderThan to its floor; refuse it instead, so that what runs
	// is what was asked for.
	if c.OlderThan < time.Second {
		return fmt.Errorf("--older-than must be at least 1s, got %v", c.OlderThan)
	}
	if c.KeepLast < 1 {
		return fmt.Errorf("--keep-last must be at least 1 (the latest version is always kept), got %d", c.KeepLast)
	}
	if c.Grace < time.Second {
		return fmt.Errorf("--grace must be at least 1s, got %v", c.Grace)
	}
	if c.StageTTL < time.Second {
		return fmt.Errorf("--stage-ttl must be at least 1s, got %v", c.StageTTL)
	}
	return nil
}

// cleanupJSON is the --json output; the text output shows the same facts. A dry run lists what
// a real run with the same policy at the same moment would remove.
type cleanupJSON struct {
	FormatVersion int    `json:"format_version"`
	Table         string `json:"table"`
	URI           string `json:"uri"`
	DryRun        bool   `json:"dry_run"`
	// LatestVersion is the latest version when the cleanup started: it is kept.
	LatestVersion uint64            `json:"latest_version"`
	Policy        cleanupPolicyJSON `json:"policy"`
	// VersionsRemoved lists the versions whose manifests were removed, ascending.
	VersionsRemoved []uint64 `json:"versions_removed"`
	// FilesRemoved lists every other removed file, relative to the table, sorted.
	FilesRemoved []string `json:"files_removed"`
	// StagesExpired counts the stage records removed for being older than --stage-ttl.
	StagesExpired int `json:"stages_expired"`
	// The counts of removed files by kind, and bytes_removed, as the cleanup action reports them.
	// Its dry_run is shadowed by DryRun above, which says the same.
	flightsvc.RemovedFiles
}

type cleanupPolicyJSON struct {
	OlderThan string `json:"older_than"`
	KeepLast  int    `json:"keep_last"`
	Grace     string `json:"grace"`
	StageTTL  string `json:"stage_ttl"`
	// Now is the reference time of every age.
	Now string `json:"now"`
}

// Run removes (or, dry, lists) what the policy expires.
func (c *CleanupCmd) Run(ctx context.Context, g *Globals, kctx *kong.Context) error {
	t, latest, err := openTableLatest(ctx, g, c.Table)
	if err != nil {
		return err
	}
	bar := &cleanupBar{g: g, dryRun: c.DryRun}
	policy := engine.CleanupPolicy{
		OlderThan: c.OlderThan, KeepLast: c.KeepLast, Grace: c.Grace, StageTTL: c.StageTTL, DryRun: c.DryRun,
		Now: time.Now(), Progress: bar.report,
	}
	rep, err := t.Cleanup(ctx, policy)
	if err != nil {
		bar.abandon()
		if c.DryRun {
			return fmt.Errorf("cleanup %s: %w", t.Name(), err)
		}
		return fmt.Errorf("cleanup %s: %w (removed %d versions and %d files before the error)",
			t.Name(), err, len(rep.VersionsRemoved), len(rep.FilesRemoved))
	}
	bar.finish()
	out := cleanupJSON{
		FormatVersion: flightsvc.FormatVersion, Table: t.Name(), URI: t.URI(), DryRun: c.DryRun, LatestVersion: latest.Version,
		Policy: cleanupPolicyJSON{
			OlderThan: c.OlderThan.String(), KeepLast: c.KeepLast, Grace: c.Grace.String(), StageTTL: c.StageTTL.String(),
			Now: timeJSON(policy.Now),
		},
		VersionsRemoved: slices.Sorted(slices.Values(rep.VersionsRemoved)),
		FilesRemoved:    slices.Sorted(slices.Values(rep.FilesRemoved)),
		StagesExpired:   rep.StagesExpired,
		RemovedFiles:    flightsvc.RemovedFilesOf(rep.OrphanReport),
	}
	if out.VersionsRemoved == nil {
		out.VersionsRemoved = []uint64{}
	}
	if out.FilesRemoved == nil {
		out.FilesRemoved = []string{}
	}
	if c.JSON {
		enc := json.NewEncoder(kctx.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return writeCleanupText(kctx.Stdout, &out)
}

func writeCleanupText(out io.Writer, d *cleanupJSON) error {
	removed := "removed"
	if d.DryRun {
		removed = "to remove"
		fmt.Fprintf(out, "cleanup of %s (dry run: nothing removed; a real run now would remove what is listed)\n", d.Table)
	} else {
		fmt.Fprintf(out, "cleanup of %s\n", d.Table)
	}
	now, _ := time.Parse(time.RFC3339Nano, d.Policy.Now)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "policy:\tversions superseded over %s ago, keeping the last %d; unreferenced files older than %s; stages older than %s; as of %s\n",
		d.Policy.OlderThan, d.Policy.KeepLast, d.Policy.Grace, d.Policy.StageTTL, timeText(now))
	fmt.Fprintf(w, "latest version:\t%d (kept)\n", d.LatestVersion)
	fmt.Fprintf(w, "stages %s:\t%d\n", map[bool]string{true: "to expire", false: "expired"}[d.DryRun], d.StagesExpired)
	fmt.Fprintf(w, "versions %s:\t%d (%s)\n", removed, len(d.VersionsRemoved), rangesText(d.VersionsRemoved))
	kinds := fmt.Sprintf("%d data, %d deletion, %d transaction", d.DataFilesRemoved, d.DeletionFilesRemoved, d.TransactionFilesRemoved)
	if other := len(d.FilesRemoved) - d.DataFilesRemoved - d.DeletionFilesRemoved - d.TransactionFilesRemoved; other > 0 {
		kinds += fmt.Sprintf(", %d other", other)
	}
	fmt.Fprintf(w, "files %s:\t%d (%s)\n", removed, len(d.FilesRemoved), kinds)
	fmt.Fprintf(w, "bytes %s:\t%d (%s)\n", removed, d.BytesRemoved, bytesText(d.BytesRemoved))
	if err := w.Flush(); err != nil {
		return err
	}
	if len(d.FilesRemoved) > 0 {
		fmt.Fprintf(out, "\nfiles %s:\n", removed)
		for _, f := range d.FilesRemoved {
			fmt.Fprintf(out, "  %s\n", f)
		}
	}
	return nil
}

// cleanupBar drives a progress bar from CleanupPolicy.Progress: one bar per phase (versions,
// then files), made at the phase's first report, when its total is known.
type cleanupBar struct {
	g      *Globals
	dryRun bool
	phase  string
	bar    *progress
	done   int
}

func (b *cleanupBar) report(p engine.CleanupProgress) {
	if p.Phase != b.phase {
		b.bar.Finish()
		verb := "removing"
		if b.dryRun {
			verb = "listing"
		}
		b.bar = b.g.newProgress(int64(p.Total), cleanupBarMin, verb+" "+p.Phase)
		b.phase, b.done = p.Phase, 0
	}
	b.bar.Add(p.Done - b.done)
	b.done = p.Done
}

func (b *cleanupBar) finish() { b.bar.Finish() }

func (b *cleanupBar) abandon() { abandonProgress(b.bar) }
