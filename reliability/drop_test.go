package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/flightsvc/servertest"
)

const envDropRounds = "FLIGHT_SINK_DROP_ROUNDS"

// dropPut is one DoPut of a writer racing a drop.
type dropPut struct {
	key          epochKey
	startedAfter bool // the put began after the drop command returned
	ack          ack
	err          error
}

// TestDropRacingWriters: writers on two servers stream epochs into one table while
// `flight-sink drop --yes` (a third process) drops it, 20 times over on the same table name.
// The drop fences them: every epoch acknowledged has a version at most the one the drop
// reports (it landed before the drop began), no put that began after the drop returned is
// acknowledged, every refusal is NotFound with reason TABLE_NOT_FOUND, both servers read the
// table as gone, and the name is created anew each round holding none of the earlier rows.
func TestDropRacingWriters(t *testing.T) {
	if testing.Short() {
		t.Skip("runs server processes and the CLI")
	}
	t.Parallel()
	rounds := envInt(t, envDropRounds, 20)
	root := t.TempDir()
	servers := []*server{mustStartServer(t, "s0", root), mustStartServer(t, "s1", root)}
	bin := servertest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const table = "race"
	createTable := map[string]any{"table": table, "schema": []map[string]any{
		{"name": "id", "type": "int64", "nullable": false}, {"name": "q", "type": "utf8", "nullable": false},
		{"name": "epoch", "type": "int64", "nullable": false}, {"name": "payload", "type": "utf8"}}}

	for round := range rounds {
		if _, err := servertest.Action(ctx, servers[round%2].Client, "create_table", createTable); err != nil {
			t.Fatalf("round %d: create_table: %v", round, err)
		}
		var dropped atomic.Bool // the drop command has returned
		var acked atomic.Int64
		var mu sync.Mutex
		var puts []dropPut
		var wg sync.WaitGroup
		for w := range 4 {
			c := servers[w%2].Client
			q := fmt.Sprintf("r%d-w%d", round, w)
			wg.Add(1)
			go func() {
				defer wg.Done()
				refusedAfter := 0
				for e := int64(0); refusedAfter < 3 && ctx.Err() == nil; e++ {
					after := dropped.Load()
					a, err := putEpoch(ctx, c, w, table, q, e)
					mu.Lock()
					puts = append(puts, dropPut{key: epochKey{q, e}, startedAfter: after, ack: a, err: err})
					mu.Unlock()
					if err == nil {
						acked.Add(1)
					} else if after {
						refusedAfter++
					}
				}
			}()
		}
		// Drop once the writers are under way (a few epochs acknowledged), not at a set time.
		for acked.Load() < 6 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		cmd := exec.CommandContext(ctx, bin, "drop", "--yes", "--json", filepath.Join(root, table))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("round %d: flight-sink drop: %v: %s", round, err, stderr.String())
		}
		dropped.Store(true)
		var res struct{ Version uint64 }
		if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || res.Version == 0 {
			t.Fatalf("round %d: drop printed %q: %v", round, stdout.String(), err)
		}
		wg.Wait()

		n := 0
		for _, p := range puts {
			switch {
			case p.err == nil && p.startedAfter:
				t.Errorf("round %d: epoch %s acknowledged at version %d by a put that began after the drop returned (version %d)", round, p.key, p.ack.Version, res.Version)
			case p.err == nil && p.ack.Version > res.Version:
				t.Errorf("round %d: epoch %s acknowledged at version %d, after the drop's version %d: lost without an error", round, p.key, p.ack.Version, res.Version)
			case p.err == nil:
				n++
			case !isTableNotFound(p.err):
				t.Errorf("round %d: epoch %s: %v, want NotFound TABLE_NOT_FOUND", round, p.key, p.err)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		for _, s := range servers {
			if _, err := readTable(ctx, s.Client, table); !isTableNotFound(err) {
				t.Fatalf("round %d: server %s read the dropped table: %v, want TABLE_NOT_FOUND", round, s.Name, err)
			}
		}
		t.Logf("round %d: %d epochs acknowledged before the drop at version %d, %d puts", round, n, res.Version, len(puts))
	}

	// The name is usable once more, and the table holds its own rows only.
	if _, err := servertest.Action(ctx, servers[0].Client, "create_table", createTable); err != nil {
		t.Fatalf("create_table after the last drop: %v", err)
	}
	for i, s := range servers {
		if _, err := putEpoch(ctx, s.Client, i, table, fmt.Sprintf("last-%d", i), 0); err != nil {
			t.Fatalf("put on %s after the last drop: %v", s.Name, err)
		}
	}
	for _, s := range servers {
		rows, err := readTable(ctx, s.Client, table)
		if err != nil {
			t.Fatalf("read on %s after the last drop: %v", s.Name, err)
		}
		want := epochRows("last-0", 0, 20) + epochRows("last-1", 0, 20)
		if len(rows) != want {
			t.Fatalf("server %s reads %d rows of the new table, want %d", s.Name, len(rows), want)
		}
		for _, r := range rows {
			if !r.Valid || (r.Key.Q != "last-0" && r.Key.Q != "last-1") {
				t.Fatalf("server %s reads row %+v in the new table", s.Name, r)
			}
		}
	}
}

// putEpoch sends epoch e of query q (writer w) to table, which must exist.
func putEpoch(ctx context.Context, c flight.Client, w int, table, q string, e int64) (ack, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rec := epochBatch(w, q, e, 20)
	defer rec.Release()
	return doPut(cctx, c, map[string]any{"table": table, "query_id": q, "epoch_id": e}, rec)
}

// isTableNotFound reports whether err is a NotFound status with reason TABLE_NOT_FOUND.
func isTableNotFound(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.NotFound {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Reason == "TABLE_NOT_FOUND"
		}
	}
	return false
}
