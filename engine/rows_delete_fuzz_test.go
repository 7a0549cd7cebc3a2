package engine

// Fuzz targets for the roaring bitmaps the engine reads back: deletion files
// (_deletions/<fragment>-<version>-<uuid>.bin, one 32-bit bitmap of deleted row offsets) and the
// 64-bit row sets inside Delete/Update/Upsert transactions.

import (
	"bytes"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/flight-sink/flight-sink/engine/rowset"
)

func FuzzDecodeDeletionFile(f *testing.F) {
	for _, bm := range []*roaring.Bitmap{
		roaring.New(),
		roaring.BitmapOf(0, 1, 2, 100, 65535, 65536, 1<<20),
		bitmapOfRange(70_000), // a run container after RunOptimize
	} {
		b, err := rowset.EncodeBitmap(bm)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	sparse := roaring.New()
	for i := uint32(0); i < 5000; i += 3 {
		sparse.Add(i)
	}
	if b, err := sparse.ToBytes(); err == nil { // array/bitmap containers, not run-optimised
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x3a, 0x30, 0, 0, 1, 0, 0, 0})
	f.Add([]byte{0x3b, 0x30, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		bm, err := rowset.DecodeBitmap(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		// What readDeletions accepted must encode and read back as the same set: a deletion file
		// the engine rewrites (merging new deletions) may not change the old ones.
		b, err := rowset.EncodeBitmap(bm)
		if err != nil {
			t.Fatalf("encode a decoded bitmap: %v", err)
		}
		bm2, err := rowset.DecodeBitmap(b)
		if err != nil {
			t.Fatalf("decode a re-encoded bitmap: %v", err)
		}
		if !bm.Equals(bm2) || bm.GetCardinality() != bm2.GetCardinality() {
			t.Fatalf("bitmap of %d offsets became %d offsets", bm.GetCardinality(), bm2.GetCardinality())
		}
		if b2, err := rowset.EncodeBitmap(bm2); err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("encoding is not stable: %v", err)
		}
	})
}

func FuzzRowSetBinary(f *testing.F) {
	for _, rs := range []*rowset.Set{
		rowset.New(),
		rowset.New(rowset.Address(1, 0), rowset.Address(1, 9), rowset.Address(7, 1<<31)),
		func() *rowset.Set { s := rowset.New(); s.AddBitmap(3, bitmapOfRange(10_000)); return s }(),
	} {
		b, err := rs.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var rs rowset.Set
		if err := rs.UnmarshalBinary(data); err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		b, err := rs.MarshalBinary()
		if err != nil {
			t.Fatalf("encode a decoded row set: %v", err)
		}
		var rs2 rowset.Set
		if err := rs2.UnmarshalBinary(b); err != nil {
			t.Fatalf("decode a re-encoded row set: %v", err)
		}
		if rs.Len() != rs2.Len() {
			t.Fatalf("row set of %d rows became %d rows", rs.Len(), rs2.Len())
		}
		for _, a := range rs.Addresses() {
			if !rs2.Contains(a) {
				t.Fatalf("address %#x lost in a round trip", a)
			}
		}
	})
}
