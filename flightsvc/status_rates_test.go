package flightsvc

import (
	"testing"
	"time"
)

// TestTableRates: the ring counts what was acknowledged in the window that ends now, per bucket,
// forgets buckets older than the window (a slot is reused for a newer bucket), and forgets tables
// the root no longer lists once their window is empty.
func TestTableRates(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	r := newTableRates(func() time.Time { return at })
	r.record("a", 100, 1)
	at = at.Add(rateBucket)
	r.record("a", 50, 1)
	got := r.rates("a")
	if got.RowsPerSec != 150/rateWindow.Seconds() || got.EpochsPerSec != 2/rateWindow.Seconds() {
		t.Fatalf("rates %+v", got)
	}
	if b := got.RowsPerBucket; len(b) != rateBuckets || b[rateBuckets-1] != 50 || b[rateBuckets-2] != 100 {
		t.Fatalf("buckets %v", b)
	}
	// One window later the first bucket's slot holds a new bucket; the old rows are gone.
	at = at.Add(rateWindow - rateBucket)
	r.record("a", 7, 1)
	got = r.rates("a")
	if got.RowsPerSec != 57/rateWindow.Seconds() || got.RowsPerBucket[rateBuckets-1] != 7 || got.RowsPerBucket[0] != 50 {
		t.Fatalf("after a window: %+v", got)
	}
	if none := r.rates("b"); none.RowsPerSec != 0 || len(none.RowsPerBucket) != rateBuckets {
		t.Fatalf("an unknown table: %+v", none)
	}
	r.retain([]string{"b"})
	if got := r.rates("a"); got.RowsPerSec == 0 {
		t.Fatal("a table not listed yet lost the rates of its window")
	}
	at = at.Add(rateWindow)
	r.retain([]string{"b"})
	if len(r.tables) != 0 {
		t.Fatalf("a dropped table idle for a window is still held: %v", r.tables)
	}
	if pts := sparkline(got.RowsPerBucket); pts == "" {
		t.Fatal("no sparkline points for an idle table")
	}
}
