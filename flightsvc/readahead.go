package flightsvc

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
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
	// queued is the bytes of the batches in batches; taken signals the reader that Next took one.
	queued atomic.Int64
	taken  chan struct{}
	// held is the bytes (arrowschema.RecordBytes) of every batch the stream holds: the one the
	// reader decoded and waits to queue, those queued and the current one; peak is its most.
	held, peak atomic.Int64
}

// hold counts n more bytes held (n < 0: fewer) and keeps the peak.
func (ra *readAhead) hold(n int64) {
	h := ra.held.Add(n)
	for p := ra.peak.Load(); h > p && !ra.peak.CompareAndSwap(p, h); p = ra.peak.Load() {
	}
}

// readAheadPeak, when set (by tests), is told the peak of held bytes of every readAhead closed.
var readAheadPeak atomic.Pointer[func(peak int64)]

// readAheadDepth is how many decoded batches wait for the sender at most (each is a scan batch:
// up to 65,536 rows and about engine.DefaultScanBatchBytes), and readAheadBytes how many bytes of
// them (arrowschema.RecordBytes):
// a batch is read ahead only while those waiting leave room for it, or none waits. A stream
// whose client stops reading therefore holds at most the batch being sent, the batches waiting
// (readAheadBytes, or one batch when a single one is larger) and the batch the reader is
// decoding; MaxConcurrentGets bounds how many such streams there are.
const (
	readAheadDepth = 2
	readAheadBytes = 8 << 20
)

func newReadAhead(ctx context.Context, src array.RecordReader) *readAhead {
	ctx, cancel := context.WithCancel(ctx)
	ra := &readAhead{batches: make(chan arrow.RecordBatch, readAheadDepth), stop: cancel, done: make(chan struct{}),
		taken: make(chan struct{}, 1)}
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
			size := arrowschema.RecordBytes(rec)
			ra.hold(size)
			for q := ra.queued.Load(); q > 0 && q+size > readAheadBytes; q = ra.queued.Load() {
				select {
				case <-ra.taken:
				case <-ctx.Done():
					ra.hold(-size)
					rec.Release()
					return
				}
			}
			ra.queued.Add(size)
			select {
			case ra.batches <- rec:
			case <-ctx.Done():
				ra.hold(-size)
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
		ra.hold(-arrowschema.RecordBytes(ra.cur))
		ra.cur.Release()
		ra.cur = nil
	}
	rec, ok := <-ra.batches
	if !ok {
		return false
	}
	ra.queued.Add(-arrowschema.RecordBytes(rec))
	select {
	case ra.taken <- struct{}{}:
	default: // a signal is pending already
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
		ra.hold(-arrowschema.RecordBytes(rec))
		rec.Release()
	}
	<-ra.done
	if ra.cur != nil {
		ra.hold(-arrowschema.RecordBytes(ra.cur))
		ra.cur.Release()
		ra.cur = nil
	}
	if report := readAheadPeak.Load(); report != nil {
		(*report)(ra.peak.Load())
	}
}
