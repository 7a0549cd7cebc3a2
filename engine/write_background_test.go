package engine

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/internal/background"
	"github.com/flight-sink/flight-sink/objstore"
)

// withBackgroundSlots runs the test with n background slots of its own (work started by earlier
// tests keeps the slots it took) and returns them.
func withBackgroundSlots(t *testing.T, n int64) *background.Slots {
	t.Helper()
	s := background.NewSlots(n)
	old := background.Replace(s)
	t.Cleanup(func() { background.Replace(old) })
	return s
}

// TestBackgroundWorkStaysInItsSlots: compaction and a background writer encode and decode in
// background slots, never more at once than there are slots, and finish with a single slot (no
// step waits for a slot while holding one). A foreground append takes no slot.
func TestBackgroundWorkStaysInItsSlots(t *testing.T) {
	for _, slots := range []int64{1, 2} {
		bg := withBackgroundSlots(t, slots)
		store, err := objstore.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		// Small row groups: every file has several, so column encodes of one row group overlap
		// the next one's batches and the read-ahead of the next fragment.
		tbl, err := Create(ctx, store, "bg", benchSchema, CreateOptions{}, &Options{MaxRowGroupRows: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for i := range int64(6) {
			rec := benchBatch(i*2500, 2500)
			_, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil)
			rec.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
		if p := bg.Peak(); p != 0 {
			t.Fatalf("%d slots: appends took %d background slots", slots, p)
		}
		rep, err := tbl.Compact(ctx, CompactOptions{TargetRowsPerFragment: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		m, err := tbl.Latest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.FragmentsRemoved != 6 || len(m.Fragments) != 1 || m.Rows() != 15000 {
			t.Fatalf("%d slots: compaction report %+v, %d fragments, %d rows", slots, rep, len(m.Fragments), m.Rows())
		}
		if p := bg.Peak(); p < 1 || p > slots {
			t.Fatalf("%d slots: background work held %d at once", slots, p)
		}

		bg.ResetPeak()
		w, err := tbl.NewWriter(ctx, benchSchema, InBackground())
		if err != nil {
			t.Fatal(err)
		}
		for i := range int64(4) {
			rec := benchBatch(100000+i*3000, 3000)
			err := w.Write(ctx, rec)
			rec.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
		frags, err := w.Finish(ctx)
		if err != nil || len(frags) != 1 || frags[0].PhysicalRows != 12000 {
			t.Fatalf("%d slots: background writer wrote %v, %v", slots, frags, err)
		}
		if p := bg.Peak(); p < 1 || p > slots {
			t.Fatalf("%d slots: background writer held %d slots at once", slots, p)
		}
	}
}
