package flightsvc

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// readAhead runs a record reader one step ahead of its consumer: while DoGet encodes and sends
// a batch, the next one is already being read and decoded from storage on another core.
//
// Next delivers the batches of src in order and ends at the first error, reported by Err. Close
// stops the reading goroutine and releases what it had read; call it before releasing src.
type readAhead struct {
	batches chan arrow.RecordBatch
	stop    context.CancelFunc
	done    chan struct{}
	err     error // src.Err() or a panic in src, set before batches is closed
	// panicStack is the stack of the panic that ended the read, for the log; nil without one.
	panicStack []byte
	cur        arrow.RecordBatch
}

// readAheadDepth is how many decoded batches wait for the sender at most (each is a full scan
// batch, up to 65,536 rows).
const readAheadDepth = 2

func newReadAhead(ctx context.Context, src array.RecordReader) *readAhead {
	ctx, cancel := context.WithCancel(ctx)
	ra := &readAhead{batches: make(chan arrow.RecordBatch, readAheadDepth), stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(ra.done)
		defer close(ra.batches)
		// A panic here would kill the process (no interceptor covers this goroutine): it ends the
		// read with an error instead, set before batches is closed.
		defer func() {
			if r := recover(); r != nil {
				ra.err = fmt.Errorf("reading the table panicked: %v", r)
				ra.panicStack = debug.Stack()
			}
		}()
		for src.Next() {
			rec := src.RecordBatch()
			rec.Retain() // src reuses nothing, but its batch is only valid until its next Next
			select {
			case ra.batches <- rec:
			case <-ctx.Done():
				rec.Release()
				return
			}
		}
		ra.err = src.Err()
	}()
	return ra
}

// Next advances to the next batch.
func (ra *readAhead) Next() bool {
	if ra.cur != nil {
		ra.cur.Release()
		ra.cur = nil
	}
	rec, ok := <-ra.batches
	if !ok {
		return false
	}
	ra.cur = rec
	return true
}

// RecordBatch returns the current batch, valid until the next call to Next or Close.
func (ra *readAhead) RecordBatch() arrow.RecordBatch { return ra.cur }

// Err returns the source's error, or the panic that ended the read, once Next has returned false.
func (ra *readAhead) Err() error { return ra.err }

// Close stops reading ahead and releases every batch not consumed.
func (ra *readAhead) Close() {
	ra.stop()
	for rec := range ra.batches {
		rec.Release()
	}
	<-ra.done
	if ra.cur != nil {
		ra.cur.Release()
		ra.cur = nil
	}
}
