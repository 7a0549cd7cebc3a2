package engine

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flight-sink/flight-sink/objstore"
)

// gatedStore holds data-file uploads until release is closed (or fails them with failData), and
// reports when a transaction file is written.
type gatedStore struct {
	objstore.Store
	release  chan struct{}
	txnPut   chan struct{} // closed at the first transaction file
	txnOnce  atomic.Bool
	failData error
	dataPuts atomic.Int64
}

func newGatedStore(t *testing.T) *gatedStore {
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &gatedStore{Store: local, release: make(chan struct{}), txnPut: make(chan struct{})}
}

func (g *gatedStore) Put(ctx context.Context, key string, body io.Reader) error {
	if strings.Contains(key, "/"+dataDir) {
		g.dataPuts.Add(1)
		if g.failData != nil {
			return g.failData
		}
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Store.Put(ctx, key, body)
}

func (g *gatedStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	err := g.Store.PutIfAbsent(ctx, key, data)
	if strings.Contains(key, "/"+transactionsDir) && g.txnOnce.CompareAndSwap(false, true) {
		close(g.txnPut)
	}
	return err
}

// FinishLater's last data file lands while the commit writes its transaction file, and the
// manifest is not written before the file is stored: the upload is held until the commit waits
// for it, and a manifest attempt while it is held fails the test.
func TestFinishLaterOverlapsTheCommit(t *testing.T) {
	ctx := t.Context()
	g := newGatedStore(t)
	manifestAttempt := make(chan struct{}, 1)
	opts := &Options{BeforeManifestWrite: func(uint64) error {
		select {
		case manifestAttempt <- struct{}{}:
		default:
		}
		return nil
	}}
	tbl := createRowsTable(t, g, "later", opts)
	select {
	case <-manifestAttempt: // whatever Create wrote
	default:
	}

	w, frags := writeRows(t, tbl, idRange(0, 100), true) // returns although the upload is held
	waiting := make(chan struct{})
	durable := func(ctx context.Context) error {
		close(waiting)
		return w.Durable(ctx)
	}
	done := make(chan error, 1)
	go func() {
		_, err := tbl.Commit(ctx, &Transaction{Operation: OpAppend, Fragments: frags, FilesDurable: durable})
		done <- err
	}()
	select {
	case <-waiting:
	case <-manifestAttempt:
		close(g.release)
		t.Fatalf("the commit reached its manifest write while its data file was not stored (commit: %v)", <-done)
	}
	select {
	case <-g.txnPut: // the transaction file was written while the data file was held
	default:
		close(g.release)
		t.Fatalf("the commit waited for its data file before writing its transaction file: no overlap (commit: %v)", <-done)
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := g.Store.Stat(ctx, tbl.key(frags[0].Files[0].Path)); err != nil {
		t.Fatalf("data file after the commit: %v", err)
	}
	requireSameIDs(t, "rows after the commit", scanRows(t, tbl, 0), idRange(0, 100))
}

// A data file that fails to land fails the commit before any manifest names it: the version does
// not move, the error says the commit definitely failed, and Abort leaves no data file behind.
func TestFinishLaterUploadFailure(t *testing.T) {
	ctx := t.Context()
	g := newGatedStore(t)
	close(g.release)
	tbl := createRowsTable(t, g, "later", nil)
	appendIDs(t, tbl, idRange(0, 10), nil) // version 2
	before := listKeys(t, tbl, dataDir)

	g.failData = errors.New("injected: disk full")
	w, frags := writeRows(t, tbl, idRange(100, 50), true)
	_, err := tbl.Commit(ctx, &Transaction{Operation: OpAppend, Fragments: frags, FilesDurable: w.Durable})
	if err == nil || !strings.Contains(err.Error(), "disk full") || !CommitDefinitelyFailed(err) {
		t.Fatalf("commit with a failed data file: %v (definitely failed: %v)", err, CommitDefinitelyFailed(err))
	}
	w.Abort(ctx)
	if v := latestVersion(t, tbl); v != 2 {
		t.Fatalf("version after the failed commit is %d, want 2", v)
	}
	requireSameIDs(t, "rows after the failed commit", scanRows(t, tbl, 0), idRange(0, 10))
	if after := listKeys(t, tbl, dataDir); len(after) != len(before) {
		t.Fatalf("data files after the failed commit: %v, want %v", after, before)
	}
}
