package engine

import (
	"github.com/flight-sink/flight-sink/objstore"
)

// WriterOption configures a Writer.
type WriterOption func(*Writer)

// InBackground makes the writer encode in background slots (background.Run): for work no put is
// waiting on, such as compaction and MemWAL folds.
func InBackground() WriterOption { return func(w *Writer) { w.background = true } }

// localStore reports whether the table's store is a local directory.
func (t *Table) localStore() bool {
	_, ok := t.store.(*objstore.Local)
	return ok
}
