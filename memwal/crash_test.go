package memwal

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal/wal"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

const (
	helperStoreEnv   = "FLIGHT_SINK_MEMWAL_HELPER_STORE" // store URI of the child
	helperGrowEnv    = "FLIGHT_SINK_MEMWAL_HELPER_GROW"  // "1": the child's WAL grows its first segment
	growSegmentBytes = 64 << 10
	crashEpochRows   = 20
	crashAcks        = 40 // acknowledged epochs before the kill
)

// TestHelperProcessWriter is not a test: it is the child that TestKillDuringStream kills. It puts
// epoch after epoch into the shard and prints "ACK <epoch>" once each put returned.
func TestHelperProcessWriter(t *testing.T) {
	if os.Getenv(helperProcessEnv) != "1" {
		t.Skip("helper process")
	}
	ctx := context.Background()
	store, err := objstore.Open(ctx, os.Getenv(helperStoreEnv), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	tbl, err := engine.Open(ctx, store, "events", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	o := &Options{MemtableMaxRows: 5 * crashEpochRows, MemtableMaxAge: -1}
	if os.Getenv(helperGrowEnv) == "1" {
		// The spare segment never gets ready: every entry past the first 64 KiB segment grows it.
		// No flush frees a segment to recycle either.
		o.WALSegmentBytes, o.MemtableMaxRows = growSegmentBytes, 1<<40
		wal.SwapPreallocateSpareForTesting(func(string, int64) (string, error) { select {} })
	}
	s, err := OpenShard(ctx, tbl, testShardID, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	for e := int64(1); ; e++ {
		rec := makeRows(e*1000, crashEpochRows, "k", e)
		_, err := s.Put(ctx, &epochid.ID{QueryID: "q", EpochID: e}, rec)
		rec.Release()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintf(out, "ACK %d\n", e)
		out.Flush()
	}
}

// kill -9 during a stream of epochs: after a restart every acknowledged epoch is there exactly
// once, no epoch is there partly or twice, and a replay of an acknowledged epoch is refused. On a
// local disk also with the WAL growing its segment past the preallocated end (no spare is ready),
// where the file's size changes under every fdatasync.
func TestKillDuringStream(t *testing.T) {
	if os.Getenv(helperProcessEnv) == "1" {
		t.Skip("in the helper process")
	}
	type variant struct {
		st   storetest.Named
		name string
		grow bool
	}
	var variants []variant
	for _, st := range storetest.Stores(t) {
		variants = append(variants, variant{st, st.Name, false})
		if st.Name == "local" {
			variants = append(variants, variant{st, st.Name + "/grown-segment", true})
		}
	}
	for _, v := range variants {
		st := v.st
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store, uri, env := processStore(t, st)
			if v.grow {
				env = append(env, helperGrowEnv+"=1")
			}
			tbl := createTable(t, store, nil)
			child := startHelper(t, "TestHelperProcessWriter", uri, env, 60*time.Second)
			n := crashAcks
			if v.grow {
				n = 200 // about 1.5 KB an entry: past the 64 KiB segment
			}
			acked := child.awaitAcks(t, n)
			if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			child.drainAcks(acked) // acks printed before the kill still count
			_ = child.cmd.Wait()
			if v.grow {
				dir := filepath.Join(store.(*objstore.Local).Root(), "events", "_mem_wal", testShardID, "wal")
				ents, err := os.ReadDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				var sizes []int64
				for _, e := range ents {
					if fi, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), wal.SegmentExt) {
						sizes = append(sizes, fi.Size())
					}
				}
				if len(sizes) != 1 || sizes[0] <= growSegmentBytes {
					t.Fatalf("segment sizes %v: want one segment grown past %d bytes", sizes, growSegmentBytes)
				}
			}

			s := openShard(t, tbl, testShardID, nil)
			perEpoch := map[int64]int{}
			for _, r := range readMerged(t, tbl, s) {
				perEpoch[r.ID/1000]++
			}
			for e, n := range perEpoch {
				if n != crashEpochRows {
					t.Fatalf("epoch %d has %d rows, want all %d or none", e, n, crashEpochRows)
				}
			}
			for e := range acked {
				if perEpoch[e] != crashEpochRows {
					t.Fatalf("acknowledged epoch %d lost after kill -9 (%d rows)", e, perEpoch[e])
				}
				if ok, _ := s.EpochCommitted("q", e); !ok {
					t.Fatalf("acknowledged epoch %d not committed after restart", e)
				}
			}
			t.Logf("%d epochs acknowledged, %d present after kill -9 and restart", len(acked), len(perEpoch))
			rec := makeRows(1000, crashEpochRows, "k", 1)
			defer rec.Release()
			if _, err := s.Put(ctx, &epochid.ID{QueryID: "q", EpochID: 1}, rec); err == nil {
				t.Fatal("a replay of acknowledged epoch 1 was accepted")
			}
		})
	}
}
