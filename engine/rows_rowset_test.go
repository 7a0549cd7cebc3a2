package engine

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/flight-sink/flight-sink/engine/rowset"
)

func TestRowSetEncoding(t *testing.T) {
	s := rowset.New(rowset.Address(1, 0), rowset.Address(1, 7), rowset.Address(5, 1<<20), rowset.Address(1<<31, 3))
	s.AddOffsets(9, 1, 2, 3)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back rowset.Set
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Addresses(), s.Addresses()) || back.Len() != 7 {
		t.Fatalf("round trip: %v, want %v", back.Addresses(), s.Addresses())
	}
	if f, off := rowset.SplitAddress(rowset.Address(42, 99)); f != 42 || off != 99 {
		t.Fatalf("SplitRowAddress: %d %d", f, off)
	}
	if err := back.UnmarshalBinary([]byte{1, 2}); err == nil {
		t.Fatal("truncated row set decoded")
	}
}
