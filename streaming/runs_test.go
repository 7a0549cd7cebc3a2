package streaming

import (
	"errors"
	"strconv"
	"testing"
)

// TestRunTrackerBounds: past maxTrackedQueries the least recently written queries are forgotten
// (their next run starts afresh), the recently written ones are kept with their superseded runs,
// and a query keeps at most maxSupersededRuns of those.
func TestRunTrackerBounds(t *testing.T) {
	var rt runTracker
	if err := rt.observe("t", "kept", "old"); err != nil {
		t.Fatal(err)
	}
	if err := rt.observe("t", "kept", "new"); err != nil {
		t.Fatal(err)
	}
	for i := range maxTrackedQueries + 10 {
		if err := rt.observe("t", "q"+strconv.Itoa(i), "r"); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 { // "kept" keeps being written
			if err := rt.observe("t", "kept", "new"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := len(rt.queries); n > maxTrackedQueries {
		t.Fatalf("%d queries tracked, bound %d", n, maxTrackedQueries)
	}
	if err := rt.observe("t", "kept", "old"); !errors.Is(err, ErrRunSuperseded) {
		t.Fatalf("the superseded run of a recently written query: %v, want ErrRunSuperseded", err)
	}
	if _, ok := rt.queries[runKey{"t", "q0"}]; ok {
		t.Fatal("the least recently written query is still tracked")
	}

	// Runs r0..r19 of one query in turn: the last maxSupersededRuns are remembered.
	for i := range 20 {
		if err := rt.observe("t", "many", "r"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.observe("t", "many", "r18"); !errors.Is(err, ErrRunSuperseded) {
		t.Fatalf("a recent superseded run: %v", err)
	}
	if err := rt.observe("t", "many", "r0"); err != nil {
		t.Fatalf("a run older than the remembered ones starts afresh: %v", err)
	}
	// Another table's query of the same id has runs of its own.
	if err := rt.observe("other", "many", "r18"); err != nil {
		t.Fatal(err)
	}
}
