package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine/rowset"
)

// A primary-key index segment is one file, _indices/<segment id>/pk.idx:
//
//	"FSPK" | format uint32 | entries uint64 | entries × (uvarint key length, key, uint64 address) | crc32
//
// little-endian, entries sorted by key then address, the CRC (Castagnoli) over everything before
// it. Keys are the primary-key encoding of KeyEncoder (engine/expr/key.go); that encoding is part of this
// format, so changing it needs a new format number. Format 2 encodes every NaN key as one
// canonical NaN; format 1 stores a NaN's own bits, so its keys differ from format 2's only for NaN
// values of float key columns (see keysCurrent).

const (
	pkSegmentMagic  = "FSPK"
	pkSegmentFormat = 2
	pkSegmentFile   = "pk.idx"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// pkEntry is one key → row address pair.
type pkEntry struct {
	key  string
	addr uint64
}

func sortEntries(es []pkEntry) {
	sort.Slice(es, func(i, j int) bool {
		if es[i].key != es[j].key {
			return es[i].key < es[j].key
		}
		return es[i].addr < es[j].addr
	})
}

// encodePKSegment encodes sorted entries.
func encodePKSegment(es []pkEntry) []byte {
	var buf bytes.Buffer
	buf.WriteString(pkSegmentMagic)
	var hdr [12]byte
	binary.LittleEndian.PutUint32(hdr[:4], pkSegmentFormat)
	binary.LittleEndian.PutUint64(hdr[4:], uint64(len(es)))
	buf.Write(hdr[:])
	var tmp [binary.MaxVarintLen64 + 8]byte
	for _, e := range es {
		n := binary.PutUvarint(tmp[:], uint64(len(e.key)))
		buf.Write(tmp[:n])
		buf.WriteString(e.key)
		binary.LittleEndian.PutUint64(tmp[:8], e.addr)
		buf.Write(tmp[:8])
	}
	sum := crc32.Checksum(buf.Bytes(), crcTable)
	binary.LittleEndian.PutUint32(tmp[:4], sum)
	buf.Write(tmp[:4])
	return buf.Bytes()
}

// pkSegment is a decoded primary-key segment, searchable by key. It is immutable.
type pkSegment struct {
	format uint32
	keys   []byte   // every key, concatenated in order
	offs   []uint32 // key i is keys[offs[i]:offs[i+1]]
	addrs  []uint64
}

func decodePKSegment(b []byte) (*pkSegment, error) {
	if len(b) < len(pkSegmentMagic)+12+4 || string(b[:4]) != pkSegmentMagic {
		return nil, errors.New("not a primary-key index segment")
	}
	body, tail := b[:len(b)-4], b[len(b)-4:]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(tail) {
		return nil, errors.New("checksum mismatch")
	}
	format := binary.LittleEndian.Uint32(body[4:8])
	if format < 1 || format > pkSegmentFormat {
		return nil, fmt.Errorf("segment format %d, this build reads 1..%d", format, pkSegmentFormat)
	}
	n := binary.LittleEndian.Uint64(body[8:16])
	if n > uint64(len(body)) {
		return nil, fmt.Errorf("header claims %d entries in %d bytes", n, len(body))
	}
	s := &pkSegment{format: format, offs: make([]uint32, 0, n+1), addrs: make([]uint64, 0, n)}
	s.keys = make([]byte, 0, len(body)-16-int(n)*9)
	p := body[16:]
	for i := uint64(0); i < n; i++ {
		l, k := binary.Uvarint(p)
		if k <= 0 || uint64(len(p)-k) < l+8 {
			return nil, fmt.Errorf("entry %d is truncated", i)
		}
		p = p[k:]
		if uint64(len(s.keys))+l > 1<<32-1 {
			return nil, errors.New("segment keys exceed 4 GiB")
		}
		s.offs = append(s.offs, uint32(len(s.keys)))
		s.keys = append(s.keys, p[:l]...)
		p = p[l:]
		s.addrs = append(s.addrs, binary.LittleEndian.Uint64(p[:8]))
		p = p[8:]
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%d bytes after the last entry", len(p))
	}
	s.offs = append(s.offs, uint32(len(s.keys)))
	return s, nil
}

func (s *pkSegment) len() int { return len(s.addrs) }

func (s *pkSegment) key(i int) string { return string(s.keys[s.offs[i]:s.offs[i+1]]) }

// lookup calls fn with the address of every entry of key.
func (s *pkSegment) lookup(key string, fn func(addr uint64)) {
	n := s.len()
	i := sort.Search(n, func(i int) bool {
		return string(s.keys[s.offs[i]:s.offs[i+1]]) >= key // no allocation: compared in place
	})
	for ; i < n && string(s.keys[s.offs[i]:s.offs[i+1]]) == key; i++ {
		fn(s.addrs[i])
	}
}

// keysCurrent reports whether s's keys are in this build's encoding of the key columns cols of
// m. A format-1 segment is current unless a key column is floating-point: its NaN keys may carry
// their own bits rather than the canonical NaN, so a lookup could miss them. A segment that is not
// current proves nothing: callers scan its fragments instead, and a merge rewrites them.
func (s *pkSegment) keysCurrent(m *Manifest, cols []string) bool {
	if s.format >= 2 {
		return true
	}
	sc := m.ArrowSchema()
	for _, c := range cols {
		for _, i := range sc.FieldIndices(c) {
			if id := sc.Field(i).Type.ID(); id == arrow.FLOAT32 || id == arrow.FLOAT64 {
				return false
			}
		}
	}
	return true
}

// sizeBytes estimates the segment's memory.
func (s *pkSegment) sizeBytes() int64 {
	return int64(len(s.keys)) + int64(len(s.offs))*4 + int64(len(s.addrs))*8 + 64
}

// writePKSegment writes sorted entries as a new segment covering frags (built from version
// builtAt) and returns it. Nothing references its file until a manifest lists the segment.
func (t *Table) writePKSegment(ctx context.Context, es []pkEntry, cover *roaring.Bitmap, builtAt uint64) (IndexSegment, error) {
	id := uuid.NewString()
	rel := makeIndexKey(id, pkSegmentFile)
	data := encodePKSegment(es)
	if err := t.store.PutIfAbsent(ctx, t.key(rel), data); err != nil {
		return IndexSegment{}, fmt.Errorf("table %s: write index segment %s: %w", t.name, rel, err)
	}
	cov, err := rowset.EncodeBitmap(cover)
	if err != nil {
		return IndexSegment{}, fmt.Errorf("table %s: encode index coverage: %w", t.name, err)
	}
	seg := IndexSegment{ID: id, Fragments: cov, Files: []IndexFile{{Path: rel, SizeBytes: int64(len(data))}},
		Entries: int64(len(es)), BuiltAt: builtAt}
	// The writer has the decoded form at hand: cache it for the lookups that follow.
	if ps, err := decodePKSegment(data); err == nil {
		t.opts.IndexCache.put(t.cacheKey(id), ps, ps.sizeBytes())
	}
	return seg, nil
}

// segmentFiles returns the table-relative files of segs.
func segmentFiles(segs []IndexSegment) []string {
	var out []string
	for _, s := range segs {
		for _, f := range s.Files {
			out = append(out, f.Path)
		}
	}
	return out
}

// loadPKSegment returns the decoded segment, from the cache when it was read before.
func (t *Table) loadPKSegment(ctx context.Context, seg *IndexSegment) (*pkSegment, error) {
	ck := t.cacheKey(seg.ID)
	if v, ok := t.opts.IndexCache.get(ck); ok {
		return v.(*pkSegment), nil
	}
	if len(seg.Files) != 1 {
		return nil, fmt.Errorf("table %s: index segment %s has %d files; this build reads one", t.name, seg.ID, len(seg.Files))
	}
	key := t.key(seg.Files[0].Path)
	b, err := t.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("table %s: read index segment %s: %w", t.name, key, err)
	}
	ps, err := decodePKSegment(b)
	if err != nil {
		return nil, fmt.Errorf("table %s: corrupt index segment %s: %w", t.name, key, err)
	}
	t.opts.IndexCache.put(ck, ps, ps.sizeBytes())
	return ps, nil
}

// cachedDeletions returns fragment f's deleted offsets through the index cache: deletion files
// never change, so the decoded bitmap of a path stays valid.
func (t *Table) cachedDeletions(ctx context.Context, f Fragment) (*roaring.Bitmap, error) {
	if f.DeletionFile == "" {
		return roaring.New(), nil
	}
	ck := t.cacheKey(f.DeletionFile)
	if v, ok := t.opts.IndexCache.get(ck); ok {
		return v.(*roaring.Bitmap), nil
	}
	bm, err := t.readDeletions(ctx, f)
	if err != nil {
		return nil, err
	}
	t.opts.IndexCache.put(ck, bm, int64(bm.GetSizeInBytes())+64)
	return bm, nil
}

// cacheKey names an immutable object of this table in its index cache, which other tables may
// share (Options.IndexCache).
func (t *Table) cacheKey(id string) string {
	return strings.Join([]string{t.store.String(), t.name, id}, "|")
}
