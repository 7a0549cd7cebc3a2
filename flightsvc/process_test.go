package flightsvc_test

// Servers as real OS processes: kill -9 and restart on the same root, and several processes
// committing to one table at once.

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/flight-sink/flight-sink/objstore/storetest"
)

func TestKill9AndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs server processes")
	}
	t.Parallel()
	root := t.TempDir()
	epochIDs := func(e int64) []int64 { return idRange(e*100, 100) }

	p1 := startProcess(t, root)
	var last ack
	for e := int64(0); e <= 4; e++ {
		last = p1.putEpoch(t, "t", "q", e, epochIDs(e))
		wantAck(t, last, "committed", uint64(e+2))
	}
	// Two partitions of a multi-writer epoch staged on the side: their acks promise durability too.
	var stages []string
	for part := int64(0); part < 2; part++ {
		a := p1.mustPut(t, stageCmd("t", "mw", 0, part, 0), idRange(10_000+part*10, 10))
		wantAck(t, a, "staged", 0)
		stages = append(stages, a.Stage)
	}
	p1.kill9() // right after the acks: no shutdown code runs

	p2 := startProcess(t, root)
	// Spark replays the last epoch after a crash: duplicate with the original version.
	wantAck(t, p2.putEpoch(t, "t", "q", 4, epochIDs(4)), "duplicate", last.Version)
	wantAck(t, p2.putEpoch(t, "t", "q", 5, epochIDs(5)), "committed", last.Version+1)
	p2.wantIDs(t, "t", idRange(0, 600))
	// The stages survived the crash and commit as one transaction.
	var c ack
	p2.mustAction(t, "commit_epoch", cmd{"table": "t", "query_id": "mw", "epoch_id": 0, "stages": stages}, &c)
	wantAck(t, c, "committed", last.Version+2)
	p2.wantIDs(t, "t", idRange(0, 600), idRange(10_000, 20))

	// kill -9 in the middle of an epoch: nothing of it may become visible.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := p2.Client.DoPut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(rowSchema))
	w.SetFlightDescriptor(cmdDesc(t, epochCmd("t", "q", 6)))
	for i := int64(0); i < 4; i++ {
		b := batch(idRange(600+i*25, 25)...)
		if err := w.Write(b); err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	time.Sleep(100 * time.Millisecond)
	p2.kill9()
	if _, err := stream.Recv(); err == nil {
		t.Fatal("epoch acknowledged by a killed server")
	}

	p3 := startProcess(t, root)
	before := last.Version + 2
	if v := p3.version(t, "t"); v != before {
		t.Fatalf("version %d after a kill mid-epoch, want %d", v, before)
	}
	p3.wantIDs(t, "t", idRange(0, 600), idRange(10_000, 20))
	wantAck(t, p3.putEpoch(t, "t", "q", 6, epochIDs(6)), "committed", before+1)
	wantAck(t, p3.putEpoch(t, "t", "q", 6, epochIDs(6)), "duplicate", before+1)
	p3.wantIDs(t, "t", idRange(0, 700), idRange(10_000, 20))
	p3.wantDenseHistory(t, "t")
}

func TestTwoProcessesOneTable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs server processes")
	}
	t.Parallel()
	t.Run("local", func(t *testing.T) { twoProcessesOneTable(t, t.TempDir()) })
	t.Run("s3", func(t *testing.T) {
		uri, opts := storetest.S3(t)
		twoProcessesOneTable(t, uri, storetest.S3Env(opts)...)
	})
}

// twoProcessesOneTable runs two server processes on one root and has them commit epochs of
// different queries, and the same epoch at once, to one table.
func twoProcessesOneTable(t *testing.T, root string, env ...string) {
	procs := []*procServer{startProcess(t, root, env...), startProcess(t, root, env...)}
	procs[0].mustAction(t, "create_table", cmd{"table": "shared", "schema": []cmd{
		{"name": "id", "type": "int64", "nullable": false}, {"name": "payload", "type": "utf8"}}}, nil)

	// Two queries per process, each its own epochs, all at once.
	const queriesPerProc, epochs, rows = 2, 8, 20
	type result struct {
		query string
		acks  []ack
		err   error
	}
	results := make(chan result, len(procs)*queriesPerProc)
	var wg sync.WaitGroup
	var want []int64
	for pi, p := range procs {
		for qi := 0; qi < queriesPerProc; qi++ {
			n := pi*queriesPerProc + qi
			q := fmt.Sprintf("query-%d", n)
			for e := int64(0); e < epochs; e++ {
				want = append(want, idRange(int64(n)*10_000+e*rows, rows)...)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := result{query: q}
				for e := int64(0); e < epochs && r.err == nil; e++ {
					var a ack
					c := cmd{"table": "shared", "query_id": q, "epoch_id": e}
					a, r.err = p.putCmd(testCtx(t), t, c, idRange(int64(n)*10_000+e*rows, rows))
					r.acks = append(r.acks, a)
				}
				results <- r
			}()
		}
	}
	wg.Wait()
	close(results)
	seen := map[uint64]string{}
	for r := range results {
		if r.err != nil {
			t.Fatalf("%s: %v", r.query, r.err)
		}
		var prev uint64
		for e, a := range r.acks {
			wantAck(t, a, "committed", 0)
			if a.Version <= prev {
				t.Fatalf("%s epoch %d at version %d, not above %d", r.query, e, a.Version, prev)
			}
			if other, dup := seen[a.Version]; dup {
				t.Fatalf("version %d acknowledged to %s and %s", a.Version, other, r.query)
			}
			seen[a.Version] = r.query
			prev = a.Version
		}
	}
	total := uint64(len(procs) * queriesPerProc * epochs)
	h := procs[1].wantDenseHistory(t, "shared")
	if uint64(len(h)) != total+1 {
		t.Fatalf("%d versions, want %d (Create + one per epoch)", len(h), total+1)
	}
	for _, p := range procs {
		p.wantIDs(t, "shared", want)
		st := p.stats(t, "shared")
		if st.Version != total+1 || len(st.Streams) != len(procs)*queriesPerProc {
			t.Fatalf("table_stats %+v", st)
		}
		for q, wm := range st.Streams {
			if wm.Epoch != epochs-1 {
				t.Fatalf("watermark of %s: %+v", q, wm)
			}
		}
	}

	// Both processes receive the same epoch at once (a retried driver talking to two servers):
	// exactly one commits it, the other answers duplicate with the same version.
	for e := int64(0); e < 5; e++ {
		var acks [2]ack
		var errs [2]error
		var wg sync.WaitGroup
		for i, p := range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				acks[i], errs[i] = p.putCmd(testCtx(t), t, cmd{"table": "shared", "query_id": "raced", "epoch_id": e}, idRange(900_000+e*10, 10))
			}()
		}
		wg.Wait()
		for i := range errs {
			if errs[i] != nil {
				t.Fatalf("raced epoch %d on process %d: %v", e, i, errs[i])
			}
		}
		st := map[string]int{acks[0].Status: 1}
		st[acks[1].Status]++
		if st["committed"] != 1 || st["duplicate"] != 1 || acks[0].Version != acks[1].Version {
			t.Fatalf("raced epoch %d: acks %+v and %+v, want one committed and one duplicate of the same version", e, acks[0], acks[1])
		}
		want = append(want, idRange(900_000+e*10, 10)...)
	}
	procs[0].wantIDs(t, "shared", want)
	procs[0].wantDenseHistory(t, "shared")
}

// TestServeCPUProfile: `serve --cpuprofile` (here through its environment variable) leaves a
// complete pprof file once the server has shut down on SIGTERM.
func TestServeCPUProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a server process")
	}
	t.Parallel()
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	p := startProcess(t, t.TempDir(), "FLIGHT_SINK_CPUPROFILE="+prof)
	for e := int64(0); e < 20; e++ {
		wantAck(t, p.putEpoch(t, "t", "q", e, idRange(e*1000, 1000)), "committed", uint64(e+2))
	}
	p.stop()
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatalf("no profile after shutdown: %v\n%s", err, p.proc.Output())
	}
	// A pprof profile is a gzip-compressed protocol buffer, complete only when its gzip stream is.
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("profile is not gzip (%d bytes): %v", len(b), err)
	}
	body, err := io.ReadAll(zr)
	if err != nil || len(body) == 0 {
		t.Fatalf("profile is truncated or empty: %d bytes, %v", len(body), err)
	}
}
