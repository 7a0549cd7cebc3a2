package arrowschema

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// RecordBytes returns the size of the Arrow buffers behind rec's columns: every buffer of every
// array, its children and its dictionary. Buffers are counted whole even when rec is a slice of
// them (it is what the batch keeps alive), and a buffer two columns share is counted twice. This
// is the one measure of a batch's size: memtable accounting, DoGet message sizing and the
// benchmarks' throughput all use it.
func RecordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, c := range rec.Columns() {
		n += arrayDataBytes(c.Data())
	}
	return n
}

func arrayDataBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += arrayDataBytes(c)
	}
	// Dictionary returns an unset dictionary as a nil *array.Data inside a non-nil interface.
	if dict, ok := d.Dictionary().(*array.Data); ok && dict != nil {
		n += arrayDataBytes(dict)
	}
	return n
}

// ReleaseBatches releases every batch of recs (nil entries are skipped).
func ReleaseBatches(recs []arrow.RecordBatch) {
	for _, r := range recs {
		if r != nil {
			r.Release()
		}
	}
}
