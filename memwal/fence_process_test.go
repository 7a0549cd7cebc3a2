package memwal

import (
	"bufio"
	"maps"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/engine/objstore"
	"github.com/flight-sink/flight-sink/engine/objstore/storetest"
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
			env := append(os.Environ(), helperProcessEnv+"=1")
			var store objstore.Store
			var uri string
			if st.Name == "s3" {
				var opts objstore.S3Options
				uri, opts = storetest.S3(t)
				var err error
				if store, err = objstore.NewS3(t.Context(), opts); err != nil {
					t.Fatal(err)
				}
				env = append(env, storetest.S3Env(opts)...)
			} else {
				uri = t.TempDir()
				store, _ = objstore.NewLocal(uri)
			}
			tbl := createTable(t, store, nil)

			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessWriter$", "-test.count=1")
			cmd.Env = append(env, helperStoreEnv+"="+uri)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			timeout := time.AfterFunc(90*time.Second, func() { cmd.Process.Kill() })
			defer timeout.Stop()
			acks := make(chan int64, 1<<16)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					if e, ok := strings.CutPrefix(sc.Text(), "ACK "); ok {
						n, _ := strconv.ParseInt(e, 10, 64)
						acks <- n
					}
				}
				close(acks)
			}()
			acked := map[int64]bool{}
			for e := range acks {
				acked[e] = true
				if len(acked) == crashAcks {
					break
				}
			}
			if len(acked) < crashAcks {
				cmd.Wait()
				t.Fatalf("child stopped after %d acks: %s", len(acked), stderr.String())
			}

			// Claim while the child writes, then write our own epochs at the positions the child
			// would take next.
			s := openShard(t, tbl, testShardID, nil)
			const mine = 5
			for e := int64(1); e <= mine; e++ {
				put(t, s, "p", e, 10_000_000+e*1000, crashEpochRows, "p")
			}
			for e := range acks { // acks the child printed before it learned it was fenced
				acked[e] = true
			}
			werr := cmd.Wait()
			if werr == nil || !strings.Contains(stderr.String(), "fenced") {
				t.Fatalf("child exit %v, stderr %q: want it stopped, fenced", werr, stderr.String())
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
