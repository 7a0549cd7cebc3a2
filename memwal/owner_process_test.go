package memwal

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// ownerProcessTTL is the lease TTL of both processes of TestTakeoverAfterKill: short, so the test
// waits little, and long enough that a loaded machine's live process keeps renewing in time.
const ownerProcessTTL = 2 * time.Second

// TestHelperProcessOwner is not a test: it is the server TestTakeoverAfterKill kills. It writes
// epoch after epoch of query "dead" through a shard set of its own (claiming a free shard) and
// prints "ACK <epoch>" once each put returned.
func TestHelperProcessOwner(t *testing.T) {
	if os.Getenv(helperProcessEnv) != "1" {
		t.Skip("helper process")
	}
	ctx := context.Background()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	store, err := objstore.Open(ctx, os.Getenv(helperStoreEnv), nil)
	if err != nil {
		fail(err)
	}
	tbl, err := engine.Open(ctx, store, "events", nil)
	if err != nil {
		fail(err)
	}
	o := testOptions()
	o.OwnerLeaseTTL = ownerProcessTTL
	ss := NewShardSet(tbl, ShardIDs(2), &ShardSetOptions{Shard: *o, FoldGenerations: -1})
	srv := &ownerServer{tbl: tbl, ss: ss}
	out := bufio.NewWriter(os.Stdout)
	for e := int64(1); ; e++ {
		if _, err := srv.put("dead", e, e*1000, crashEpochRows); err != nil {
			fail(err)
		}
		fmt.Fprintf(out, "ACK %d\n", e)
		out.Flush()
	}
}

// A server process owning a shard is killed (kill -9) in the middle of a stream of epochs. The
// other server sees its lease expire, takes the shard over, replays, flushes and folds it: every
// epoch the dead server acknowledged is in the base table exactly once, and none partly; its own
// claims are one start and one takeover, and the shard is released.
func TestTakeoverAfterKill(t *testing.T) {
	if os.Getenv(helperProcessEnv) == "1" {
		t.Skip("in the helper process")
	}
	for _, st := range storetest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store, uri, env := processStore(t, st)
			live := newOwnerServers(t, store, 2, ownerProcessTTL)[0]
			child := startHelper(t, "TestHelperProcessOwner", uri, env, 2*time.Minute)
			acked := child.awaitAcks(t, 10)
			// The live server writes too (it claims the other shard), then the child dies.
			for e := range int64(3) {
				if _, err := live.put("live", e, 10_000_000+e*1000, crashEpochRows); err != nil {
					t.Fatal(err)
				}
			}
			_ = child.cmd.Process.Kill()
			child.drainAcks(acked) // acks printed before the kill still count
			_ = child.cmd.Wait()

			mine, _ := live.ss.routedShard("live")
			id := ShardIDs(2)[1-mine]
			deadline := time.Now().Add(time.Minute)
			for {
				m, err := live.tbl.Latest(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if sm := latestShardManifest(t, live.tbl, id); m.MemWALMerged[id] > 0 && sm.Owner == "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no takeover within a minute: merged %v, claims %v", m.MemWALMerged, live.ss.Claims())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if got := live.ss.Claims(); !maps.Equal(got, map[string]int64{ClaimStart: 1, ClaimTakeover: 1}) {
				t.Fatalf("the live server's claims %v, want one start and one takeover", got)
			}
			perEpoch := map[int64]int{}
			for _, r := range baseRows(t, live.tbl) {
				if r.ID < 10_000_000 {
					perEpoch[r.ID/1000]++
				}
			}
			for e, n := range perEpoch {
				if n != crashEpochRows {
					t.Fatalf("epoch %d of the dead server has %d rows in the base table, want all %d once", e, n, crashEpochRows)
				}
			}
			for e := range acked {
				if perEpoch[e] != crashEpochRows {
					t.Fatalf("epoch %d, acknowledged by the dead server, is not in the base table", e)
				}
			}
			if got := storedRows(t, live.tbl, 2); len(got) != (len(perEpoch)+3)*crashEpochRows {
				t.Fatalf("the table holds %d rows, want %d", len(got), (len(perEpoch)+3)*crashEpochRows)
			}
			t.Logf("the dead server acknowledged %d epochs; the base table holds %d of its epochs", len(acked), len(perEpoch))
		})
	}
}
