package flightsvc_test

// Reads of a MemWAL table never fence its writer: epoch_status, DoGet and table_stats on a
// server that does not own a shard answer from a read-only view of the shard's manifest and WAL,
// and see every epoch the owning server acknowledged.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// sharedRoot is one table root that several in-process servers serve, on local disk or S3.
type sharedRoot struct {
	uri string
	s3  *objstore.S3Options
}

func (r sharedRoot) server(t *testing.T) *testServer {
	t.Helper()
	cfg := flightsvc.Config{Root: r.uri, S3: r.s3}
	// These tests check that reads write no shard manifest, by comparing manifest versions: with
	// a lease longer than any test, no owner's renewal (a manifest commit after a third of the
	// lease without one, docs/storage.md) lands in between, however slow the machine.
	cfg.Sink.MemWAL.OwnerLeaseTTL = time.Hour
	// Likewise no flush by age (the freshness bound's): a writer's memtables stay in its WAL until
	// the test flushes them.
	cfg.Sink.MemWALFreshness = -1
	return startServer(t, cfg)
}

// shardManifests reads the newest manifest of every shard of a table with shards shards straight
// from the store, by shard id.
func (r sharedRoot) shardManifests(t *testing.T, table string, shards int) map[string]*memwal.ShardManifest {
	t.Helper()
	ctx := testCtx(t)
	store, err := objstore.Open(ctx, r.uri, r.s3)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*memwal.ShardManifest)
	for _, id := range memwal.ShardIDs(shards) {
		m, err := memwal.NewManifestStore(store, table, id, nil).ReadLatest(ctx)
		if err != nil {
			continue // a shard no put reached has no manifest
		}
		out[id] = m
	}
	return out
}

// forEachRoot runs fn on a fresh local root and, when an S3 server runs, a fresh S3 prefix.
func forEachRoot(t *testing.T, fn func(t *testing.T, root sharedRoot)) {
	t.Run("local", func(t *testing.T) { fn(t, sharedRoot{uri: t.TempDir()}) })
	t.Run("s3", func(t *testing.T) {
		uri, opts := storetest.S3(t)
		fn(t, sharedRoot{uri: uri, s3: &opts})
	})
}

// epochStatus is the result of the epoch_status action.
type epochStatus struct {
	Committed bool   `json:"committed"`
	Version   uint64 `json:"version"`
	Route     string `json:"route"`
}

// memwalStats is the memwal part of table_stats.
type memwalStats struct {
	MemWAL struct {
		Shards []flightsvc.ShardStats `json:"shards"`
	} `json:"memwal"`
}

// TestMemWALReadsNeverFence: server A acknowledges 40 MemWAL epochs (kept in the WAL by the
// default memtable thresholds, or partly flushed to generations and partly folded); server B, which
// never wrote the table, answers epoch_status committed for every one of them, reads every row
// exactly once and reports the shard backlog in table_stats, all without touching the shard
// manifests; and A's writer still owns its shards: its next put commits.
func TestMemWALReadsNeverFence(t *testing.T) {
	cases := []struct {
		name   string
		create cmd
		// flushAt and foldAt: A flushes its shards after these epochs, and folds them.
		flushAt, foldAt []int64
	}{
		{name: "wal", create: cmd{"memwal": cmd{"shards": 2}}},
		{name: "wal-keyed", create: cmd{"primary_key": []string{"id"}, "memwal": cmd{"shards": 2}}},
		{name: "generations", create: cmd{"memwal": cmd{"shards": 2}}, flushAt: []int64{9, 19, 29}, foldAt: []int64{19}},
		{name: "generations-keyed", create: cmd{"primary_key": []string{"id"}, "memwal": cmd{"shards": 2}}, flushAt: []int64{9, 19, 29}, foldAt: []int64{19}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEachRoot(t, func(t *testing.T, root sharedRoot) {
				const table, q, epochs, rows = "rw", "q-a", 40, 5
				a, b := root.server(t), root.server(t)
				var want []int64
				for e := int64(0); e < epochs; e++ {
					ids := idRange(e*rows, rows)
					ack := a.mustPut(t, cmd{"table": table, "query_id": q, "epoch_id": e, "create": tc.create}, ids)
					if ack.Status != "committed" || ack.Route != "memwal" {
						t.Fatalf("epoch %d on A: %+v", e, ack)
					}
					want = append(want, ids...)
					if slices.Contains(tc.flushAt, e) {
						a.mustAction(t, "flush_memwal", cmd{"table": table}, nil)
					}
					if slices.Contains(tc.foldAt, e) {
						a.mustAction(t, "fold_memwal_shard", cmd{"table": table}, nil)
					}
				}
				before := root.shardManifests(t, table, 2)
				if len(before) == 0 {
					t.Fatal("no shard manifest after A's puts")
				}

				for e := int64(0); e < epochs; e++ {
					var st epochStatus
					b.mustAction(t, "epoch_status", cmd{"table": table, "query_id": q, "epoch_id": e}, &st)
					if !st.Committed {
						t.Fatalf("B: epoch_status of epoch %d acknowledged by A: %+v, want committed", e, st)
					}
					if st.Version == 0 && st.Route != "memwal" {
						t.Fatalf("B: epoch_status of epoch %d: %+v, want a base version or route memwal", e, st)
					}
				}
				var st epochStatus
				b.mustAction(t, "epoch_status", cmd{"table": table, "query_id": q, "epoch_id": epochs}, &st)
				if st.Committed {
					t.Fatalf("B: epoch_status of epoch %d that nobody sent: %+v", epochs, st)
				}
				b.wantIDs(t, table, want)

				// table_stats on B: the backlog A left, as the shard manifests and WALs hold it.
				var stats memwalStats
				b.mustAction(t, "table_stats", cmd{"table": table}, &stats)
				var aStats memwalStats
				a.mustAction(t, "table_stats", cmd{"table": table}, &aStats)
				if len(stats.MemWAL.Shards) != 2 {
					t.Fatalf("B: table_stats memwal: %+v", stats.MemWAL)
				}
				var walRows int64
				for i, sh := range stats.MemWAL.Shards {
					own := aStats.MemWAL.Shards[i]
					if m := before[sh.Shard]; m != nil && (sh.WriterEpoch != m.WriterEpoch || sh.ManifestVersion != m.Version) {
						t.Fatalf("B: shard %s at writer epoch %d, manifest %d; the store holds %d, %d", sh.Shard, sh.WriterEpoch, sh.ManifestVersion, m.WriterEpoch, m.Version)
					}
					if sh.MemtableRows != own.MemtableRows {
						t.Fatalf("B: shard %s holds %d rows in its WAL; A, its writer, holds %d in its memtable", sh.Shard, sh.MemtableRows, own.MemtableRows)
					}
					if m := before[sh.Shard]; m != nil && sh.Generations != len(m.FlushedGenerations) {
						t.Fatalf("B: shard %s has %d generations; its manifest lists %d", sh.Shard, sh.Generations, len(m.FlushedGenerations))
					}
					walRows += sh.MemtableRows
				}
				if len(tc.flushAt) == 0 && walRows != epochs*rows {
					t.Fatalf("B: table_stats counts %d rows in the WALs, A acknowledged %d", walRows, epochs*rows)
				}
				if len(tc.flushAt) > 0 && walRows != (epochs-1-tc.flushAt[len(tc.flushAt)-1])*rows {
					t.Fatalf("B: table_stats counts %d rows in the WALs after the last flush", walRows)
				}

				// Nothing B did wrote a shard manifest: A's writers still own their shards.
				after := root.shardManifests(t, table, 2)
				for id, m := range before {
					if n := after[id]; n.Version != m.Version || n.WriterEpoch != m.WriterEpoch {
						t.Fatalf("shard %s: manifest %d writer epoch %d before B's reads, %d, %d after", id, m.Version, m.WriterEpoch, n.Version, n.WriterEpoch)
					}
				}
				ids := idRange(epochs*rows, rows)
				if ack := a.mustPut(t, cmd{"table": table, "query_id": q, "epoch_id": epochs}, ids); ack.Status != "committed" {
					t.Fatalf("A's put after B's reads: %+v", ack)
				}
				want = append(want, ids...)
				final := root.shardManifests(t, table, 2)
				for id, m := range before {
					if n := final[id]; n.WriterEpoch != m.WriterEpoch {
						t.Fatalf("shard %s: A's put after B's reads claimed it again (writer epoch %d -> %d): A was fenced", id, m.WriterEpoch, n.WriterEpoch)
					}
				}
				b.mustAction(t, "epoch_status", cmd{"table": table, "query_id": q, "epoch_id": epochs}, &st)
				if !st.Committed {
					t.Fatalf("B: epoch_status of A's last epoch: %+v", st)
				}
				a.wantIDs(t, table, want)
				b.wantIDs(t, table, want)
			})
		})
	}
}

// TestMemWALReadsRacingFlushAndFold: while server A writes epochs and flushes and folds its
// shards, readers on A and on B read the table over and over. Every read holds each row at most
// once, and every row acknowledged before the read began; epoch_status on B finds every
// acknowledged epoch.
func TestMemWALReadsRacingFlushAndFold(t *testing.T) {
	forEachRoot(t, func(t *testing.T, root sharedRoot) {
		const table, q, epochs, rows = "race", "q-race", 60, 4
		a, b := root.server(t), root.server(t)
		a.mustPut(t, cmd{"table": table, "query_id": q, "epoch_id": 0, "create": cmd{"memwal": cmd{"shards": 2}}}, idRange(0, rows))
		var acked atomic.Int64 // epochs acknowledged, a prefix 0..acked-1
		acked.Store(1)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		reader := func(name string, c *testServer) {
			defer wg.Done()
			for reads := 0; ; reads++ {
				select {
				case <-stop:
					if reads == 0 {
						errs <- fmt.Errorf("%s: no read finished", name)
					}
					return
				default:
				}
				lo := acked.Load()
				r, err := c.get(context.Background(), cmd{"table": table})
				hi := acked.Load() + 1 // the put in flight may be durable, and readable, before its ack
				if err != nil {
					errs <- fmt.Errorf("%s: read %d: %w", name, reads, err)
					return
				}
				if err := checkPrefixRead(r.IDs, lo*rows, hi*rows); err != nil {
					errs <- fmt.Errorf("%s: read %d (acknowledged %d..%d epochs): %w", name, reads, lo, hi, err)
					return
				}
			}
		}
		// epoch_status on B, racing the same flushes and folds: every acknowledged epoch is
		// committed whether it is in the WAL, a generation or the base table.
		status := func() {
			defer wg.Done()
			for checks := 0; ; checks++ {
				select {
				case <-stop:
					return
				default:
				}
				for _, e := range []int64{acked.Load() - 1, int64(checks) % acked.Load()} {
					var st epochStatus
					body, err := b.action(context.Background(), "epoch_status", cmd{"table": table, "query_id": q, "epoch_id": e})
					if err == nil {
						err = json.Unmarshal(body, &st)
					}
					if err != nil || !st.Committed {
						errs <- fmt.Errorf("B: epoch_status of acknowledged epoch %d: %+v, %v", e, st, err)
						return
					}
				}
			}
		}
		wg.Add(3)
		go reader("A", a)
		go reader("B", b)
		go status()
		for e := int64(1); e < epochs; e++ {
			a.mustPut(t, cmd{"table": table, "query_id": q, "epoch_id": e}, idRange(e*rows, rows))
			acked.Store(e + 1)
			if e%3 == 0 {
				a.mustAction(t, "flush_memwal", cmd{"table": table}, nil)
			}
			if e%6 == 0 {
				a.mustAction(t, "fold_memwal_shard", cmd{"table": table}, nil)
			}
		}
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		a.wantIDs(t, table, idRange(0, epochs*rows))
		b.wantIDs(t, table, idRange(0, epochs*rows))
	})
}

// checkPrefixRead checks that ids (sorted) hold every id below lo, no id at or above hi, and none
// twice.
func checkPrefixRead(ids []int64, lo, hi int64) error {
	for i, id := range ids {
		if i > 0 && ids[i-1] == id {
			return fmt.Errorf("id %d read twice (%d rows read)", id, len(ids))
		}
		if id < 0 || id >= hi {
			return fmt.Errorf("id %d read, only ids below %d were sent", id, hi)
		}
	}
	for want := int64(0); want < lo; want++ {
		if _, found := slices.BinarySearch(ids, want); !found {
			return fmt.Errorf("id %d missing: %d rows read, ids below %d were acknowledged before the read began", want, len(ids), lo)
		}
	}
	return nil
}

// TestMemWALReadOnlyViewRefusesBadInput: epoch_status bodies that are wrong answer the right code
// on a server that reads a MemWAL table it does not write; a WAL entry that is corrupt in storage
// fails the reads that need it with Internal, leaves the server up, and the reads still write
// nothing.
func TestMemWALReadOnlyViewRefusesBadInput(t *testing.T) {
	root := sharedRoot{uri: t.TempDir()}
	const table, q = "bad", "q-bad"
	a, b := root.server(t), root.server(t)
	for e := int64(0); e < 3; e++ {
		a.mustPut(t, cmd{"table": table, "query_id": q, "epoch_id": e, "create": cmd{"memwal": cmd{"shards": 1}}}, idRange(e*10, 10))
	}
	for _, c := range []struct {
		name string
		body any
		code codes.Code
	}{
		{"no epoch_id", cmd{"table": table, "query_id": q}, codes.InvalidArgument},
		{"negative epoch_id", cmd{"table": table, "query_id": q, "epoch_id": -1}, codes.InvalidArgument},
		{"epoch_id not a number", cmd{"table": table, "query_id": q, "epoch_id": "1"}, codes.InvalidArgument},
		{"epoch_id past int64", []byte(`{"table":"bad","query_id":"q-bad","epoch_id":9223372036854775808}`), codes.InvalidArgument},
		{"blank query_id", cmd{"table": table, "query_id": "  ", "epoch_id": 0}, codes.InvalidArgument},
		{"table outside the root", cmd{"table": "../bad", "query_id": q, "epoch_id": 0}, codes.InvalidArgument},
		{"unknown table", cmd{"table": "nope", "query_id": q, "epoch_id": 0}, codes.NotFound},
		{"not JSON", []byte(`{"table":`), codes.InvalidArgument},
	} {
		_, err := b.action(testCtx(t), "epoch_status", c.body)
		if codeOf(err) != c.code {
			t.Errorf("%s: %v, want %v", c.name, err, c.code)
		}
	}
	var st epochStatus
	b.mustAction(t, "epoch_status", cmd{"table": table, "query_id": q, "epoch_id": int64(1) << 62}, &st)
	if st.Committed {
		t.Fatalf("epoch 2^62 that nobody sent: %+v", st)
	}

	// Corrupt entries after the acknowledged ones: garbage, a truncated entry, and an entry whose
	// bytes name another position.
	wal := filepath.Join(root.uri, table, "_mem_wal", memwal.ShardIDs(1)[0], "wal")
	names, err := os.ReadDir(wal)
	if err != nil || len(names) == 0 {
		t.Fatalf("wal dir: %v, %d entries", err, len(names))
	}
	last := names[len(names)-1].Name()
	good, err := os.ReadFile(filepath.Join(wal, last))
	if err != nil {
		t.Fatal(err)
	}
	var tip uint64
	if name, ok := strings.CutSuffix(last, ".arrow"); ok {
		if tip, err = strconv.ParseUint(name, 10, 64); err != nil {
			t.Fatal(err)
		}
	} else {
		// A WAL segment on a local disk (memwal/wal/segment.go): its first record is a 16-byte header
		// (CRC, payload length, log number) and a whole entry. Entry objects beside it are read
		// too; put the corrupt ones far past any position the writer reached.
		n := binary.LittleEndian.Uint32(good[4:8])
		good, tip = good[16:16+n], 1<<40
	}
	for i, bad := range [][]byte{[]byte("not an arrow stream"), good[:len(good)/3], good} {
		t.Run(fmt.Sprintf("corrupt-%d", i), func(t *testing.T) {
			key := filepath.Join(wal, fmt.Sprintf("%020d.arrow", tip+1))
			if err := os.WriteFile(key, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(key)
			before := listFiles(t, root.uri)
			_, err := b.action(testCtx(t), "epoch_status", cmd{"table": table, "query_id": q, "epoch_id": 7})
			wantCode(t, err, codes.Internal, "wal entry")
			_, err = b.action(testCtx(t), "table_stats", cmd{"table": table})
			wantCode(t, err, codes.Internal, "wal entry")
			_, err = b.get(testCtx(t), cmd{"table": table})
			wantCode(t, err, codes.Internal, "wal entry")
			if after := listFiles(t, root.uri); !slices.Equal(before, after) {
				t.Fatalf("reads of a corrupt shard changed the store:\nbefore %v\n after %v", before, after)
			}
			b.mustAction(t, "history", cmd{"table": table, "limit": 1}, nil) // the server is up
		})
	}
	b.wantIDs(t, table, idRange(0, 30))
	a.wantIDs(t, table, idRange(0, 30))
}

// listFiles returns every file under dir, relative and sorted, with its size.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			return nil // a store's temporary file, no object (a writer's WAL segment being preallocated)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, fmt.Sprintf("%s:%d", rel, info.Size()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
