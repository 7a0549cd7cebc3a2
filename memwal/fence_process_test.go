package memwal

import (
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// Two processes, one shard: a child writes epoch after epoch (TestHelperProcessWriter) while this
// process claims the shard and writes its own. After the claim the child never acknowledges a put
// (it stops, fenced); every epoch it acknowledged is in the new writer's shard, whole; and a third
// writer's replay holds exactly what the second writer held plus its puts: nothing the child
// wrote after the claim comes back.
func TestFencingAcrossProcesses(t *testing.T) {
	if os.Getenv(helperProcessEnv) == "1" {
		t.Skip("in the helper process")
	}
	for _, st := range storetest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			store, uri, env := processStore(t, st)
			tbl := createTable(t, store, nil)
			child := startHelper(t, "TestHelperProcessWriter", uri, env, 90*time.Second)
			acked := child.awaitAcks(t, crashAcks)

			// Claim while the child writes, then write our own epochs at the positions the child
			// would take next.
			s := openShard(t, tbl, testShardID, nil)
			const mine = 5
			for e := int64(1); e <= mine; e++ {
				put(t, s, "p", e, 10_000_000+e*1000, crashEpochRows, "p")
			}
			child.drainAcks(acked) // acks the child printed before it learned it was fenced
			werr := child.cmd.Wait()
			if werr == nil || !strings.Contains(child.stderr.String(), "fenced") {
				t.Fatalf("child exit %v, stderr %q: want it stopped, fenced", werr, child.stderr.String())
			}

			held := func(s *Shard) map[int64]int {
				perEpoch := map[int64]int{}
				for _, r := range readMerged(t, tbl, s) {
					perEpoch[r.ID/1000]++
				}
				for e, n := range perEpoch {
					if n != crashEpochRows {
						t.Fatalf("epoch %d has %d rows, want all %d or none", e, n, crashEpochRows)
					}
				}
				return perEpoch
			}
			second := held(s)
			for e := range acked {
				if second[e] != crashEpochRows {
					t.Fatalf("epoch %d, acknowledged by the fenced writer, is not in the new writer's shard", e)
				}
			}
			for e := int64(1); e <= mine; e++ {
				if second[10_000+e] != crashEpochRows {
					t.Fatalf("the new writer's epoch %d is missing", e)
				}
			}
			s.Close()
			third := held(openShard(t, tbl, testShardID, nil))
			if !maps.Equal(second, third) {
				t.Fatalf("a third writer's replay holds epochs %v, the second writer held %v", third, second)
			}
			t.Logf("child acknowledged %d epochs; the new writer holds %d of its epochs", len(acked), len(second)-mine)
		})
	}
}
