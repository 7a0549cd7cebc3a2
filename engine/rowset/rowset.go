// Package rowset names rows by address (a fragment id and an offset in it) and holds sets of
// addresses as one roaring bitmap per fragment: what a delete, an update or a MemWAL read
// excludes, with a portable binary encoding.
package rowset

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
)

// Address returns the address of the row at offset in fragment frag: frag<<32 | offset.
// Addresses are stable until a Rewrite (compaction) moves the row, which records the move in its
// ChangeOfAddress.
func Address(frag uint64, offset uint32) uint64 { return frag<<32 | uint64(offset) }

// SplitAddress is the inverse of Address.
func SplitAddress(addr uint64) (frag uint64, offset uint32) { return addr >> 32, uint32(addr) }

// MaxFragmentID is the largest fragment id a row address can hold.
const MaxFragmentID = 1<<32 - 1

// Set is a set of row addresses, kept as one roaring bitmap of row offsets per fragment.
// The zero value is an empty set ready to use. A Set is not safe for concurrent mutation.
//
// Its binary encoding (MarshalBinary) is the portable 64-bit roaring format: a little-endian
// uint64 count of fragments, then per fragment (ascending) its id as a little-endian uint32 and
// the fragment's offsets as a standard 32-bit roaring bitmap. Its JSON encoding is that binary
// encoding in base64, so a transaction file stays compact however many rows it touches.
type Set struct {
	frags map[uint64]*roaring.Bitmap
}

// New returns a set holding addrs.
func New(addrs ...uint64) *Set {
	s := &Set{}
	for _, a := range addrs {
		s.Add(a)
	}
	return s
}

// Add inserts one row address.
func (s *Set) Add(addr uint64) {
	f, off := SplitAddress(addr)
	s.fragment(f).Add(off)
}

// AddOffsets inserts the given offsets of fragment frag.
func (s *Set) AddOffsets(frag uint64, offsets ...uint32) {
	if len(offsets) == 0 {
		return
	}
	s.fragment(frag).AddMany(offsets)
}

// AddBitmap inserts every offset of bm into fragment frag.
func (s *Set) AddBitmap(frag uint64, bm *roaring.Bitmap) {
	if bm == nil || bm.IsEmpty() {
		return
	}
	s.fragment(frag).Or(bm)
}

func (s *Set) fragment(frag uint64) *roaring.Bitmap {
	if s.frags == nil {
		s.frags = make(map[uint64]*roaring.Bitmap)
	}
	bm, ok := s.frags[frag]
	if !ok {
		bm = roaring.New()
		s.frags[frag] = bm
	}
	return bm
}

// Contains reports whether addr is in the set.
func (s *Set) Contains(addr uint64) bool {
	f, off := SplitAddress(addr)
	bm := s.frags[f]
	return bm != nil && bm.Contains(off)
}

// Len returns the number of row addresses in the set.
func (s *Set) Len() int64 {
	if s == nil {
		return 0
	}
	var n uint64
	for _, bm := range s.frags {
		n += bm.GetCardinality()
	}
	return int64(n)
}

// IsEmpty reports whether the set holds no address.
func (s *Set) IsEmpty() bool { return s.Len() == 0 }

// Fragments returns the ids of the fragments the set touches, ascending.
func (s *Set) Fragments() []uint64 {
	if s == nil {
		return nil
	}
	ids := make([]uint64, 0, len(s.frags))
	for id, bm := range s.frags {
		if !bm.IsEmpty() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Offsets returns the bitmap of fragment frag's offsets in the set, or nil. The bitmap belongs
// to the set: do not modify it.
func (s *Set) Offsets(frag uint64) *roaring.Bitmap {
	if s == nil {
		return nil
	}
	return s.frags[frag]
}

// Remove drops every offset of fragment frag from the set.
func (s *Set) Remove(frag uint64) {
	if s != nil {
		delete(s.frags, frag)
	}
}

// Addresses returns every address in the set, ascending. For tests and small sets.
func (s *Set) Addresses() []uint64 {
	var out []uint64
	for _, f := range s.Fragments() {
		s.frags[f].Iterate(func(off uint32) bool {
			out = append(out, Address(f, off))
			return true
		})
	}
	return out
}

// Clone returns a deep copy of s.
func (s *Set) Clone() *Set {
	c := &Set{}
	if s == nil {
		return c
	}
	for f, bm := range s.frags {
		if !bm.IsEmpty() {
			c.fragment(f).Or(bm)
		}
	}
	return c
}

// Union adds every address of o to s.
func (s *Set) Union(o *Set) {
	if o == nil {
		return
	}
	for f, bm := range o.frags {
		s.AddBitmap(f, bm)
	}
}

// MarshalBinary encodes the set in the portable 64-bit roaring format.
func (s *Set) MarshalBinary() ([]byte, error) {
	var buf bytes.Buffer
	ids := s.Fragments()
	var hdr [8]byte
	binary.LittleEndian.PutUint64(hdr[:], uint64(len(ids)))
	buf.Write(hdr[:])
	for _, f := range ids {
		if f > MaxFragmentID {
			return nil, fmt.Errorf("row set: fragment id %d does not fit a row address", f)
		}
		binary.LittleEndian.PutUint32(hdr[:4], uint32(f))
		buf.Write(hdr[:4])
		bm := s.frags[f].Clone()
		bm.RunOptimize()
		if _, err := bm.WriteTo(&buf); err != nil {
			return nil, fmt.Errorf("row set: encode fragment %d: %w", f, err)
		}
	}
	return buf.Bytes(), nil
}

// UnmarshalBinary decodes MarshalBinary's encoding, replacing the contents of s.
func (s *Set) UnmarshalBinary(data []byte) error {
	s.frags = nil
	r := bytes.NewReader(data)
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return fmt.Errorf("row set: truncated header: %w", err)
	}
	n := binary.LittleEndian.Uint64(hdr[:])
	if n > uint64(len(data)) {
		return fmt.Errorf("row set: header claims %d fragments in %d bytes", n, len(data))
	}
	for i := uint64(0); i < n; i++ {
		if _, err := io.ReadFull(r, hdr[:4]); err != nil {
			return fmt.Errorf("row set: truncated fragment id: %w", err)
		}
		f := uint64(binary.LittleEndian.Uint32(hdr[:4]))
		bm := roaring.New()
		if _, err := bm.ReadFrom(r); err != nil {
			return fmt.Errorf("row set: decode fragment %d: %w", f, err)
		}
		if err := bm.Validate(); err != nil { // ReadFrom accepts containers later calls panic on
			return fmt.Errorf("row set: decode fragment %d: %w", f, err)
		}
		s.AddBitmap(f, bm)
	}
	return nil
}

// MarshalJSON encodes the set as a base64 string of its binary encoding.
func (s *Set) MarshalJSON() ([]byte, error) {
	b, err := s.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return json.Marshal(b)
}

// UnmarshalJSON is the inverse of MarshalJSON.
func (s *Set) UnmarshalJSON(data []byte) error {
	var b []byte
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("row set: %w", err)
	}
	return s.UnmarshalBinary(b)
}

// String describes the set briefly for messages.
func (s *Set) String() string {
	ids := s.Fragments()
	return fmt.Sprintf("%d rows in %d fragments", s.Len(), len(ids))
}

// EncodeBitmap serialises a 32-bit roaring bitmap (run-optimised) for a file or a JSON field.
func EncodeBitmap(bm *roaring.Bitmap) ([]byte, error) {
	c := bm.Clone()
	c.RunOptimize()
	return c.ToBytes()
}

// DecodeBitmap parses EncodeBitmap's output.
func DecodeBitmap(b []byte) (*roaring.Bitmap, error) {
	bm := roaring.New()
	if len(b) == 0 {
		return bm, nil
	}
	if _, err := bm.ReadFrom(bytes.NewReader(b)); err != nil {
		return nil, err
	}
	if err := bm.Validate(); err != nil { // ReadFrom accepts containers later calls panic on
		return nil, err
	}
	return bm, nil
}
