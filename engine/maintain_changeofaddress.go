package engine

import (
	"fmt"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/flight-sink/flight-sink/engine/rowset"
)

// ChangeOfAddress is a Rewrite's record of where it moved rows: for every fragment it
// replaced, the offsets it kept (the rows live at its read version), and how many of the
// transaction's new fragments each group of replaced fragments became.
//
// The mapping is implied by the order of writing, so it costs one run-compressed roaring bitmap
// per replaced fragment instead of a pair of addresses per row: a group's kept rows, fragment by
// fragment and offset by offset ascending, fill the group's new fragments in order. The k-th kept
// row of a group lands at position k of the concatenation of its new fragments.
//
// Rows a Rewrite does not keep (deleted at its read version) have no new address.
type ChangeOfAddress struct {
	Groups []RewriteGroup `json:"groups"`
}

// RewriteGroup is a run of adjacent fragments a Rewrite merged into NewFragments consecutive
// fragments of Transaction.Fragments (after those of the groups before it).
type RewriteGroup struct {
	Old          []RewrittenFragment `json:"old"`
	NewFragments int                 `json:"new_fragments"`
}

// RewrittenFragment is one fragment a Rewrite replaced.
type RewrittenFragment struct {
	ID           uint64 `json:"id"`
	PhysicalRows int64  `json:"physical_rows"`
	// Kept is the roaring bitmap (portable encoding) of the offsets that were live at the
	// Rewrite's read version and were written to the new fragments.
	Kept []byte `json:"kept"`
}

// OldFragmentIDs returns the ids of every fragment the Rewrite replaces.
func (c *ChangeOfAddress) OldFragmentIDs() []uint64 {
	var ids []uint64
	for _, g := range c.Groups {
		for _, o := range g.Old {
			ids = append(ids, o.ID)
		}
	}
	return ids
}

// addressMap is a ChangeOfAddress resolved against the fragment ids its new fragments got when
// the Rewrite committed: it answers old address -> new address.
type addressMap struct {
	old map[uint64]*movedFragment
}

type movedFragment struct {
	kept  *roaring.Bitmap
	first int64 // position of this fragment's first kept row within its group's output
	group *movedGroup
}

type movedGroup struct {
	newIDs []uint64
	starts []int64 // starts[j] = position of new fragment j's first row; starts[len] = total
}

// resolve builds the addressMap of c, where newFrags are the Rewrite's new fragments in
// transaction order with the ids they were committed under.
func (c *ChangeOfAddress) resolve(newFrags []Fragment) (*addressMap, error) {
	m := &addressMap{old: make(map[uint64]*movedFragment)}
	next := 0
	for gi, g := range c.Groups {
		if g.NewFragments < 0 || next+g.NewFragments > len(newFrags) {
			return nil, fmt.Errorf("change of address: group %d names %d new fragments, only %d remain", gi, g.NewFragments, len(newFrags)-next)
		}
		mg := &movedGroup{starts: make([]int64, 0, g.NewFragments+1)}
		var pos int64
		for _, f := range newFrags[next : next+g.NewFragments] {
			mg.newIDs = append(mg.newIDs, f.ID)
			mg.starts = append(mg.starts, pos)
			pos += f.PhysicalRows
		}
		mg.starts = append(mg.starts, pos)
		next += g.NewFragments
		var kept int64
		for _, o := range g.Old {
			bm, err := rowset.DecodeBitmap(o.Kept)
			if err != nil {
				return nil, fmt.Errorf("change of address: fragment %d: %w", o.ID, err)
			}
			m.old[o.ID] = &movedFragment{kept: bm, first: kept, group: mg}
			kept += int64(bm.GetCardinality())
		}
		if kept != pos {
			return nil, fmt.Errorf("change of address: group %d kept %d rows but its new fragments hold %d", gi, kept, pos)
		}
	}
	if next != len(newFrags) {
		return nil, fmt.Errorf("change of address: %d new fragments, groups account for %d", len(newFrags), next)
	}
	return m, nil
}

// moved reports whether fragment frag was rewritten.
func (m *addressMap) moved(frag uint64) bool { _, ok := m.old[frag]; return ok }

// mapOffsets maps offsets of the rewritten fragment frag to their new addresses, adding them to
// into. It returns the offsets that have no new address (not kept by the Rewrite).
func (m *addressMap) mapOffsets(frag uint64, offs *roaring.Bitmap, into *rowset.Set) *roaring.Bitmap {
	mf := m.old[frag]
	lost := roaring.New()
	it := offs.Iterator()
	for it.HasNext() {
		off := it.Next()
		if !mf.kept.Contains(off) {
			lost.Add(off)
			continue
		}
		pos := mf.first + int64(mf.kept.Rank(off)) - 1
		g := mf.group
		j := sort.Search(len(g.newIDs), func(j int) bool { return g.starts[j+1] > pos })
		into.Add(rowset.Address(g.newIDs[j], uint32(pos-g.starts[j])))
	}
	return lost
}

// mapRows maps a whole row set: addresses in rewritten fragments move, others stay. It returns
// the mapped set and the addresses that have no new address.
func (m *addressMap) mapRows(rows *rowset.Set) (mapped, lost *rowset.Set) {
	mapped, lost = &rowset.Set{}, &rowset.Set{}
	for _, f := range rows.Fragments() {
		offs := rows.Offsets(f)
		if !m.moved(f) {
			mapped.AddBitmap(f, offs)
			continue
		}
		lost.AddBitmap(f, m.mapOffsets(f, offs, mapped))
	}
	return mapped, lost
}
