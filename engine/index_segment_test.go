package engine

import (
	"slices"
	"testing"

	"github.com/flight-sink/flight-sink/engine/rowset"
)

// TestIndexSegmentFormat round-trips a primary-key segment file and checks that damage is
// detected rather than misread.
func TestIndexSegmentFormat(t *testing.T) {
	es := []pkEntry{{"b", rowset.Address(2, 7)}, {"a", rowset.Address(1, 0)}, {"b", rowset.Address(1, 3)}, {"", rowset.Address(4, 1)}, {"c\x00d", 9}}
	sortEntries(es)
	data := encodePKSegment(es)
	s, err := decodePKSegment(data)
	if err != nil || s.len() != len(es) {
		t.Fatalf("decode: %v", err)
	}
	for _, tc := range []struct {
		key  string
		want []uint64
	}{{"a", []uint64{rowset.Address(1, 0)}}, {"b", []uint64{rowset.Address(1, 3), rowset.Address(2, 7)}}, {"", []uint64{rowset.Address(4, 1)}},
		{"c\x00d", []uint64{9}}, {"c", nil}, {"zz", nil}} {
		var got []uint64
		s.lookup(tc.key, func(a uint64) { got = append(got, a) })
		if !slices.Equal(got, tc.want) {
			t.Errorf("lookup %q: %v, want %v", tc.key, got, tc.want)
		}
	}
	if empty, err := decodePKSegment(encodePKSegment(nil)); err != nil || empty.len() != 0 {
		t.Fatalf("empty segment: %v", err)
	}
	for i := range data {
		bad := slices.Clone(data)
		bad[i] ^= 0x5a
		if _, err := decodePKSegment(bad); err == nil {
			t.Fatalf("flipping byte %d went unnoticed", i)
		}
	}
	for n := range len(data) {
		if _, err := decodePKSegment(data[:n]); err == nil {
			t.Fatalf("a segment truncated to %d bytes decoded", n)
		}
	}
}
