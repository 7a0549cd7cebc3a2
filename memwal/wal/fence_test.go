package wal

import (
	"slices"
	"testing"
)

// TestFenceRule: countingEntries keeps an entry of epoch e at position p unless a fence of a
// later epoch sits at a position <= p, whatever order the entries are listed in; a fence hides
// nothing of its own epoch or a later one, nor anything below it.
func TestFenceRule(t *testing.T) {
	type entry struct {
		pos, epoch uint64
		fence      bool
	}
	for _, c := range []struct {
		name    string
		entries []entry
		want    []uint64 // positions that count, in the listing's order
	}{
		{"empty", nil, nil},
		{"no fence", []entry{{1, 1, false}, {2, 1, false}, {3, 2, false}}, []uint64{1, 2, 3}},
		{"fence hides an older epoch at and above it",
			[]entry{{1, 1, false}, {2, 1, false}, {3, 2, true}, {3, 1, false}, {4, 1, false}},
			[]uint64{1, 2, 3}},
		{"fence keeps its own epoch and later ones above it",
			[]entry{{3, 2, true}, {4, 2, false}, {5, 3, false}},
			[]uint64{3, 4, 5}},
		{"entries below the fence count",
			[]entry{{1, 1, false}, {2, 1, false}, {2, 2, true}},
			[]uint64{1, 2}},
		{"a later fence hides an earlier writer's fence",
			[]entry{{2, 1, true}, {3, 1, false}, {3, 2, true}, {4, 1, false}, {4, 2, false}, {5, 3, true}, {5, 2, false}},
			[]uint64{2, 3, 4, 5}},
		{"an older fence hides nothing of a newer writer",
			[]entry{{5, 3, false}, {4, 2, true}, {6, 3, false}},
			[]uint64{5, 4, 6}},
		{"listing order does not matter",
			[]entry{{7, 1, false}, {9, 1, false}, {8, 4, true}, {6, 1, false}},
			[]uint64{7, 8, 6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var in []listedEntry
			for _, e := range c.entries {
				in = append(in, listedEntry{pos: e.pos, epoch: e.epoch, fence: e.fence, segment: -1})
			}
			var got []uint64
			for _, e := range countingEntries(in) {
				got = append(got, e.pos)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("counting positions %v, want %v", got, c.want)
			}
		})
	}
}
