package main

import (
	"fmt"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress reports long work on stderr. The zero value (and nil) is a silent progress, so
// callers need not care whether bars are on.
type progress struct {
	bar *progressbar.ProgressBar
}

// newProgress returns a progress bar for total units of work, or a silent one when progress is
// off: --progress=never, or auto and stderr is not a terminal, or auto and the work is smaller
// than minAuto units (not worth a bar). Stdout stays clean either way, so --json output can be
// piped while a bar runs.
func (g *Globals) newProgress(total int64, minAuto int64, desc string) *progress {
	switch g.Progress {
	case "never":
		return &progress{}
	case "always":
	default: // auto
		if total < minAuto || !term.IsTerminal(int(os.Stderr.Fd())) {
			return &progress{}
		}
	}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }),
	)
	return &progress{bar: bar}
}

// Add records n more units done.
func (p *progress) Add(n int) {
	if p != nil && p.bar != nil {
		_ = p.bar.Add(n) // a failed write to stderr must not fail the work
	}
}

// Finish completes the bar.
func (p *progress) Finish() {
	if p != nil && p.bar != nil {
		_ = p.bar.Finish()
	}
}
