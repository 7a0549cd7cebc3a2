package engine

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/flight-sink/flight-sink/engine/rowset"
)

// Index catch-up for MemWAL (docs/indices.md, Index catch-up for MemWAL).
//
// A MemWAL shard's flushed generation may be retired (its files deleted) only once every index
// holds its rows. The base manifest records, per index and shard, the merged generation the index
// is proven to cover (Manifest.IndexCatchup), and IndexesCoverGeneration reads it at retirement.
//
// The proof is derived at commit time from the version the commit read (R), with nothing passed
// in: an index that, as this commit publishes it, covers every fragment that was live at R holds
// every row that a MemWAL fold had merged into the table by R, so it is caught up to R's
// merged-generation watermark. Fragment ids are only comparable within one id space, which is why
// the index and the fragment set are both judged at R: comparing the index to the fragments live
// at commit time would fail whenever anything (an append, a fold) landed in between, and a
// scalar fragment-id watermark breaks under compaction, which replaces low ids with high ones.
//
// Per index and per shard in the new manifest's merged-watermark map:
//
//   - covers R: credit R's watermark, capped by the watermark the new manifest itself records
//     (so a read version whose fold is not in the new manifest's history cannot retire anything);
//   - the index is physically unchanged since the version this commit lands on (same segments,
//     same coverage): carry its recorded position forward;
//   - neither: 0.
//
// A position never goes below the position carried forward, so a commit that read an old
// version does not withdraw what an index already proved. Every index gets an entry for every
// shard, 0 included, because a missing entry must never read as caught up; a table that was
// never folded into (no merged watermark) records nothing.
//
// There is no partial credit: an index covering 90% of R records nothing new. Rows folded by a
// commit land in fragments no index covers yet, so its own fold is credited by the next index
// optimize that reads it.

// readVersionState loads the manifest of the version a commit read, at most once per Commit.
type readVersionState struct {
	txn    *Transaction
	m      *Manifest
	loaded bool
}

func (rs *readVersionState) get(ctx context.Context, t *Table) (*Manifest, error) {
	if rs.loaded {
		return rs.m, nil
	}
	v := rs.txn.ReadVersion
	if b := rs.txn.base; b != nil && b.Version == v {
		rs.m, rs.loaded = b, true
		return rs.m, nil
	}
	m, err := t.Manifest(ctx, v)
	if errors.Is(err, ErrVersionNotFound) {
		// Cleaned up: nothing can be proven from it; positions are carried forward only.
		rs.loaded = true
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rs.m, rs.loaded = m, true
	return m, nil
}

// recordIndexCatchup sets next.IndexCatchup for a commit landing on base.
func (t *Table) recordIndexCatchup(ctx context.Context, rs *readVersionState, base, next *Manifest) error {
	if len(next.Indices) == 0 || len(next.MemWALMerged) == 0 {
		next.IndexCatchup = nil
		return nil
	}
	read, err := rs.get(ctx, t)
	if err != nil {
		return err
	}
	next.IndexCatchup = deriveIndexCatchup(read, base, next)
	return nil
}

// deriveIndexCatchup computes the catch-up positions of next's indices for a commit that read
// version read (nil when it is gone) and lands on base. It returns base's map itself when nothing
// changes, so a commit that proves nothing new leaves the recorded state as it was.
func deriveIndexCatchup(read, base, next *Manifest) map[string]map[string]uint64 {
	if len(next.Indices) == 0 || len(next.MemWALMerged) == 0 {
		return nil
	}
	out := make(map[string]map[string]uint64, len(next.Indices))
	for i := range next.Indices {
		ix := &next.Indices[i]
		var prior map[string]uint64
		if base != nil && indexUnchanged(base.Index(ix.Name), ix) {
			prior = base.IndexCatchup[ix.Name]
		}
		covers := read != nil && indexCovers(ix, read)
		pos := make(map[string]uint64, len(next.MemWALMerged))
		for shard, committed := range next.MemWALMerged {
			var p uint64
			if covers {
				if rv, ok := read.MemWALMerged[shard]; ok {
					p = min(rv, committed) // capped by the read version and by this commit
				}
			}
			if old, ok := prior[shard]; ok && old > p {
				p = old // never lowered
			}
			pos[shard] = p
		}
		out[ix.Name] = pos
	}
	if base != nil && catchupEqual(base.IndexCatchup, out) {
		return base.IndexCatchup
	}
	return out
}

// indexCovers reports whether the union of ix's segment coverage holds every fragment of m.
func indexCovers(ix *Index, m *Manifest) bool {
	cov := ix.Coverage()
	for _, f := range m.Fragments {
		if f.ID > rowset.MaxFragmentID || !cov.Contains(uint32(f.ID)) {
			return false
		}
	}
	return true
}

// indexUnchanged reports whether a and b are the same physical index: the same segments with the
// same coverage. A nil a (the index is new) is a change.
func indexUnchanged(a, b *Index) bool {
	if a == nil || b == nil || a.ID != b.ID || len(a.Segments) != len(b.Segments) {
		return false
	}
	for i := range a.Segments {
		sa, sb := &a.Segments[i], &b.Segments[i]
		if sa.ID != sb.ID || !slices.Equal(sa.Fragments, sb.Fragments) {
			return false
		}
	}
	return true
}

func catchupEqual(a, b map[string]map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, av := range a {
		bv, ok := b[k]
		if !ok || !maps.Equal(av, bv) {
			return false
		}
	}
	return true
}

// IndexesCoverGeneration reports whether every index of version m is proven to hold the rows of
// MemWAL shard's flushed generation gen, so that the generation's files may be retired. It is true
// for a table without indices. An index without a recorded position for the shard is not caught
// up, whatever the generation.
func IndexesCoverGeneration(m *Manifest, shard string, gen uint64) bool {
	for i := range m.Indices {
		pos, ok := m.IndexCatchup[m.Indices[i].Name][shard]
		if !ok || pos < gen {
			return false
		}
	}
	return true
}
