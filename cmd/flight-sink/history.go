package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/alecthomas/kong"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
)

// historyChunk is how many versions one engine History call reads; the progress bar advances
// per chunk. The engine overlaps the reads inside a chunk.
const historyChunk = 256

// HistoryCmd lists a table's versions.
type HistoryCmd struct {
	Table string `arg:"" name:"TABLE_URI" help:"Table URI: ./root/table, file:///root/table or s3://bucket/prefix/table."`
	Limit int    `default:"20" env:"FLIGHT_SINK_HISTORY_LIMIT" help:"Show at most this many versions; 0 shows every version."`
	JSON  bool   `name:"json" env:"FLIGHT_SINK_JSON" help:"Print JSON (the history action's result) instead of a table."`
}

// Validate checks the flags before anything is opened.
func (c *HistoryCmd) Validate() error {
	if c.Limit < 0 {
		return fmt.Errorf("--limit must be 0 (every version) or positive, got %d", c.Limit)
	}
	return nil
}

// Run prints the history, newest first.
func (c *HistoryCmd) Run(ctx context.Context, g *Globals, kctx *kong.Context) error {
	t, latest, err := openTableLatest(ctx, g, c.Table)
	if err != nil {
		return err
	}
	n := uint64(c.Limit)
	if n == 0 || n > latest.Version {
		n = latest.Version
	}
	entries, err := readHistory(ctx, g, t, latest.Version, int(n))
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(kctx.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(flightsvc.HistoryResultOf(t.Name(), latest.Version, entries))
	}
	w := tabwriter.NewWriter(kctx.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "VERSION\tTIMESTAMP\tOPERATION\tREAD VERSION\tPROPERTIES")
	for _, e := range entries {
		if e.Missing {
			fmt.Fprintf(w, "%d\t-\t(removed by cleanup)\t-\t-\n", e.Version)
			continue
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\n", e.Version, timeText(e.Timestamp), e.Operation, e.ReadVersion, propertiesText(e.Properties))
	}
	return w.Flush()
}

// readHistory reads n versions ending at newest, newest first, in chunks so that a long history
// shows progress.
func readHistory(ctx context.Context, g *Globals, t *engine.Table, newest uint64, n int) ([]engine.HistoryEntry, error) {
	bar := g.newProgress(int64(n), 2*historyChunk, "reading history")
	out := make([]engine.HistoryEntry, 0, n)
	for len(out) < n {
		chunk, err := t.HistoryFrom(ctx, newest, min(historyChunk, n-len(out)))
		if err != nil {
			return nil, err
		}
		if len(chunk) == 0 {
			return nil, errors.New("history: engine returned no versions") // cannot happen while newest >= 1
		}
		out = append(out, chunk...)
		newest -= uint64(len(chunk))
		bar.Add(len(chunk))
	}
	bar.Finish()
	return out, nil
}
