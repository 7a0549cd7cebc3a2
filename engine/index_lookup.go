package engine

import (
	"context"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/flight-sink/flight-sink/engine/rowset"
)

// lookupKeys returns the addresses of the live rows of version m whose primary key is one of
// keys (encoded as Upsert encodes them) and the set of keys found. With a primary-key index it
// reads the index for the fragments the index covers and scans only the key columns of the
// fragments it does not; without one it scans every fragment.
func (t *Table) lookupKeys(ctx context.Context, m *Manifest, keys map[string]struct{}) (*rowset.Set, map[string]struct{}, error) {
	rows, seen := &rowset.Set{}, make(map[string]struct{})
	if len(keys) == 0 || len(m.Fragments) == 0 {
		return rows, seen, nil
	}
	ix := m.primaryKeyIndex()
	if ix == nil {
		err := t.scanKeys(ctx, m, m.Fragments, keys, rows, seen)
		return rows, seen, err
	}
	live := liveFragmentBitmap(m)
	byID := fragmentsByID(m)
	covered := roaring.New()
	hits := make(map[string][]uint64)
	for i := range ix.Segments {
		seg := &ix.Segments[i]
		cov, ok := seg.coverage()
		if !ok {
			continue // proves nothing: its fragments are scanned below
		}
		cov.And(live)
		if cov.IsEmpty() {
			continue
		}
		ps, err := t.loadPKSegment(ctx, seg)
		if err != nil {
			return nil, nil, err
		}
		if !ps.keysCurrent(m, ix.Columns) {
			continue // proves nothing either: its fragments are scanned below
		}
		covered.Or(cov)
		for k := range keys {
			ps.lookup(k, func(addr uint64) {
				// An entry of a fragment outside the segment's coverage is stale (the fragment
				// was rewritten): its row, if live, is found where it moved to.
				if f, _ := rowset.SplitAddress(addr); f <= rowset.MaxFragmentID && cov.Contains(uint32(f)) {
					hits[k] = append(hits[k], addr)
				}
			})
		}
	}
	// Entries outlive deletions: drop the rows deleted since their segment was built.
	dels := make(map[uint64]*roaring.Bitmap)
	for k, addrs := range hits {
		for _, addr := range addrs {
			f, off := rowset.SplitAddress(addr)
			d, ok := dels[f]
			if !ok {
				var err error
				if d, err = t.cachedDeletions(ctx, byID[f]); err != nil {
					return nil, nil, err
				}
				dels[f] = d
			}
			if !d.Contains(off) {
				rows.Add(addr)
				seen[k] = struct{}{}
			}
		}
	}
	var scan []Fragment
	for _, f := range m.Fragments {
		if f.ID > rowset.MaxFragmentID || !covered.Contains(uint32(f.ID)) {
			scan = append(scan, f)
		}
	}
	if err := t.scanKeys(ctx, m, scan, keys, rows, seen); err != nil {
		return nil, nil, err
	}
	return rows, seen, nil
}
