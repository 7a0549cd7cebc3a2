package model

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/flight-sink/flight-sink/flightsvc/servertest"
	"github.com/flight-sink/flight-sink/internal/pythontest"
)

// The knobs: a seed to replay, the steps of a seed, and (for `make torture`) how long to keep
// running new seeds.
const (
	envSeed   = "FLIGHT_SINK_MODEL_SEED"         // run this seed only
	envSteps  = "FLIGHT_SINK_MODEL_STEPS"        // steps per seed (default defaultSteps)
	envTime   = "FLIGHT_SINK_MODEL_TIME"         // run new seeds until this much time has passed (a Go duration)
	envEvery  = "FLIGHT_SINK_MODEL_PYTHON_EVERY" // steps between two Python checks (default pythonEvery)
	envUnskip = "FLIGHT_SINK_MODEL_UNSKIP"       // known issues not to steer around (knownIssues.unskip)
)

var (
	seedFlag  = flag.Uint64("model.seed", 0, "run this seed only (as "+envSeed+")")
	stepsFlag = flag.Int("model.steps", 0, "steps per seed (as "+envSteps+")")
)

// defaultSteps is the steps of a seed in a plain `go test`.
const defaultSteps = 300

// pythonEvery is how many steps apart the slow checks run (direct reads and the Iceberg
// metadata through Python); they also run after the last step.
const pythonEvery = 150

// knownIssues switches off the operation combinations that hit known bugs (of the server or of a
// reader the test drives). Each switch names the bug; turning it off runs the combination again.
type knownIssues struct {
	// icebergFixedSizeList: PyIceberg's scan of a table with a fixed_size_list column (at any
	// depth) fails ("'pyarrow.lib.FixedSizeListArray' object has no attribute 'offsets'"): the
	// data files carry the Arrow type, the Iceberg schema says list. On: such tables get no
	// Iceberg check.
	icebergFixedSizeList bool
	// icebergNullListOfStruct: PyIceberg's scan reads a null list of structs (or a null map with
	// struct values) as an empty one: its projection rebuilds such arrays from their offsets
	// and values (ArrowProjectionVisitor.list and .map) and drops the null mask. On: such tables
	// get no Iceberg check.
	icebergNullListOfStruct bool
}

// unskip turns off the switches named (comma-separated field names of knownIssues), as
// FLIGHT_SINK_MODEL_UNSKIP does: to check a fix, or to find a seed for the regression table.
func (k *knownIssues) unskip(names string) error {
	for _, n := range strings.Split(names, ",") {
		switch strings.TrimSpace(n) {
		case "":
		case "icebergFixedSizeList":
			k.icebergFixedSizeList = false
		case "icebergNullListOfStruct":
			k.icebergNullListOfStruct = false
		default:
			return fmt.Errorf("no known issue %q", n)
		}
	}
	return nil
}

// skip is the set of known issues the test steers around.
var skip = knownIssues{
	icebergFixedSizeList:    true,
	icebergNullListOfStruct: true,
}

// fixedSeeds run in every `go test`, for the default steps each: a few hundred operations drawn
// afresh from seeds that passed when they were added.
var fixedSeeds = []uint64{3, 4, 5}

// regressions are seeds that found a bug: each runs in every `go test`, for its steps (up to the
// step that failed). A seed found with a knownIssues switch off steers around the bug while the
// switch is on; once a fix turns it off, the seed runs into the combination again (the same
// operations as far as the other switches let them be).
var regressions = []struct {
	seed  uint64
	steps int
	found string
}{
	// Run on to step 194, with keyedDirectOverMemWAL off, seed 1 also finds a direct upsert
	// hidden by the older MemWAL row of its key (step 192); cut at 148 to keep `go test` short.
	{1, 148, "with deletedRowsRead off: step 33, kill of the server in arrow's Take (VarBinaryImpl, slice bounds out of range) " +
		"on DoGet of a keyed table with a large_list<utf8_view> column; with memwalDelete off: step 146, a delete missed " +
		"rows in MemWAL (56 rows read, the model holds 21)"},
	{1796536163330563575, 150, "publish_iceberg Internal \"invalid schema: mismatch in fields\" (step 150): a data file " +
		"written before a schema merge lacks an optional map column, whose required key iceberg-go looked for in it"},
	{2, 51, "with flushFenced off: step 11, flush_memwal FailedPrecondition \"writer epoch N is fenced by writer epoch M\"; " +
		"with dropWithWritersElsewhere off: step 51, DoGet of the re-created table Internal \"generations were folded " +
		"into a newer base version during the read\""},
	{1796538767968002646, 121, "step 121, DoGet of a keyed two-shard table: a direct upsert hidden by older MemWAL rows of its keys " +
		"(FoldAll trusted a writer with nothing to flush whose shard the other server had taken over and written to)"},
	{1796552253634371480, 151, "step 150, publish_iceberg never answered: the appends and deletes since the published version " +
		"could not be split into one snapshot per version because another server's cleanup had removed those versions, " +
		"and the split step recursed on the same target"},
	{1796538768574963027, 97, "step 97, a delete missed the MemWAL rows another server had put into a shard this server's " +
		"writer (nothing left to flush) no longer owned: 3 rows read, the model holds 1 (background maintenance)"},
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	servertest.RemoveBinary()
	os.Exit(code)
}

// TestModel runs random operation sequences against real servers and checks every read against
// the model: the regression seeds, then, with FLIGHT_SINK_MODEL_TIME, new seeds for that long
// (each printed; FLIGHT_SINK_MODEL_SEED replays one).
func TestModel(t *testing.T) {
	if testing.Short() {
		t.Skip("runs server processes")
	}
	steps := defaultSteps
	if *stepsFlag > 0 {
		steps = *stepsFlag
	} else if v := os.Getenv(envSteps); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", envSteps, v)
		}
		steps = n
	}
	if *seedFlag != 0 {
		runSeed(t, *seedFlag, steps)
		return
	}
	if v := os.Getenv(envSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSeed, v, err)
		}
		runSeed(t, s, steps)
		return
	}
	var budget time.Duration
	if v := os.Getenv(envTime); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive Go duration (10m)", envTime, v)
		}
		budget = d
	}
	start := time.Now()
	for _, seed := range fixedSeeds {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { runSeed(t, seed, steps) })
	}
	for _, reg := range regressions {
		t.Run(fmt.Sprintf("regression-%d", reg.seed), func(t *testing.T) { runSeed(t, reg.seed, reg.steps) })
	}
	// New seeds only when given time (make torture): a plain `go test` runs the same seeds every
	// time, so a red run is a change's doing, and a seed that finds a bug joins regressions.
	for budget > 0 && time.Since(start) < budget {
		seed := uint64(time.Now().UnixNano())
		if !t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { runSeed(t, seed, steps) }) {
			return
		}
	}
}

// runSeed runs steps operations drawn from seed on two servers sharing a fresh root.
func runSeed(t *testing.T, seed uint64, steps int) {
	t.Logf("seed %d, %d steps (replay: %s=%d)", seed, steps, envSeed, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	rn := &runner{t: t, ctx: ctx, seed: seed, r: rand.New(rand.NewPCG(seed, 0x6d6f64656c)), root: t.TempDir(), skip: skip}
	if err := rn.skip.unskip(os.Getenv(envUnskip)); err != nil {
		t.Fatalf("%s: %v", envUnskip, err)
	}
	rn.python = pythonFor(t)
	rn.maintenance = []string{"off", "off", "background", "inline"}[rn.r.IntN(4)]
	every := pythonEvery
	if v := os.Getenv(envEvery); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			every = n
		}
	}
	rn.logf("two servers on one root, --maintenance %s", rn.maintenance)
	rn.startServers(2)
	rn.tables = []*tableModel{{name: "t0"}, {name: "t1"}}
	started := time.Now()
	for rn.step = 1; rn.step <= steps; rn.step++ {
		rn.stepOnce()
		rn.check()
		if rn.python != "" && rn.step%every == 0 {
			rn.checkPython()
		}
	}
	if rn.python != "" && steps%every != 0 {
		rn.checkPython()
	}
	t.Logf("FIGURES model: seed %d, %d steps in %v: %d epochs, %d deletes, %d servers started, %d Python checks (%d data files read directly, %d PyIceberg scans), %d change feed rows replayed (%d restarts after cleanup)",
		seed, steps, time.Since(started).Round(time.Millisecond), rn.epochs, rn.deletes, rn.restart, rn.pyChecks,
		rn.directFiles, rn.icebergReads, rn.feedRows, rn.feedRestarts)
}

// check reads every table through a random server, by DoGet and by GetFlightInfo and the DoGet
// of each endpoint, and compares each read with the model; and replays each table's change feed
// since the last check (checkChanges).
func (rn *runner) check() {
	rn.checkAlive()
	for _, m := range rn.tables {
		s := rn.server()
		tk, _ := json.Marshal(map[string]any{"table": m.name})
		ctx, cancel := rn.callCtx()
		got, err := doGet(ctx, s.client, tk)
		cancel()
		if !m.exists {
			m.feed = nil // a table created again under the name is another feed
			if !isNotFound(err) {
				rn.failf("DoGet of dropped table %s on %s: %v, want NotFound (%d rows)", m.name, s.name, err, len(got.rows))
			}
			continue
		}
		if err != nil {
			rn.checkAlive()
			rn.failf("DoGet %s on %s: %v", m.name, s.name, err)
		}
		rn.compare(m, fmt.Sprintf("DoGet %s on %s", m.name, s.name), got)
		rn.checkFlightInfo(m, s)
		rn.checkChanges(m, s)
	}
	rn.checkAlive()
}

// checkFlightInfo compares GetFlightInfo's total and the union of its endpoints with the model.
func (rn *runner) checkFlightInfo(m *tableModel, s *server) {
	cmd, _ := json.Marshal(map[string]any{"table": m.name})
	ctx, cancel := rn.callCtx()
	defer cancel()
	info, err := s.client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: cmd})
	if err != nil {
		rn.failf("GetFlightInfo %s on %s: %v", m.name, s.name, err)
	}
	what := fmt.Sprintf("GetFlightInfo %s on %s (%d endpoints)", m.name, s.name, len(info.Endpoint))
	if info.TotalRecords != int64(len(m.rows)) {
		rn.failf("%s: total_records %d, the model holds %d rows", what, info.TotalRecords, len(m.rows))
	}
	all := readResult{}
	for i, ep := range info.Endpoint {
		got, err := doGet(ctx, s.client, ep.Ticket.Ticket)
		if err != nil {
			rn.failf("%s: DoGet of endpoint %d (%s): %v", what, i, ep.Ticket.Ticket, err)
		}
		if all.schema == nil {
			all.schema = got.schema
		}
		all.rows = append(all.rows, got.rows...)
	}
	if all.schema == nil {
		return // no endpoint: total_records 0 was checked
	}
	rn.compare(m, what+", its endpoints' DoGets", all)
}

// compare fails the run when a read's schema or rows differ from the model's.
func (rn *runner) compare(m *tableModel, what string, got readResult) {
	if got.schema != nil {
		var want, have []string
		for _, c := range m.cols {
			want = append(want, fmt.Sprintf("%s %s nullable=%v", c.name, typeSig(c.typ.stored), c.nullable))
		}
		for _, f := range got.schema.Fields() {
			have = append(have, fmt.Sprintf("%s %s nullable=%v", f.Name, typeSig(f.Type), f.Nullable))
		}
		if !slices.Equal(want, have) {
			rn.failf("%s: schema\n  %s\nwant\n  %s", what, strings.Join(have, "\n  "), strings.Join(want, "\n  "))
		}
	}
	if d := rn.difference(m, got); d != "" {
		rn.failf("%s: %s", what, d)
	}
}

// difference describes how got's rows differ from the model's; "" when they are the same.
func (rn *runner) difference(m *tableModel, got readResult) string {
	have := make([]string, len(got.rows))
	for i, r := range got.rows {
		have[i] = m.render(r)
	}
	slices.Sort(have)
	want := m.expected()
	if slices.Equal(have, want) {
		return ""
	}
	missing, extra := diff(want, have)
	return fmt.Sprintf("%d rows, the model holds %d\nmissing (%d):\n%s\nunexpected (%d):\n%s", len(have), len(want),
		len(missing), clip(missing), len(extra), clip(extra))
}

// diff returns the lines of sorted want not in sorted have, and of have not in want (as
// multisets).
func diff(want, have []string) (missing, extra []string) {
	i, j := 0, 0
	for i < len(want) || j < len(have) {
		switch {
		case j == len(have) || (i < len(want) && want[i] < have[j]):
			missing = append(missing, want[i])
			i++
		case i == len(want) || have[j] < want[i]:
			extra = append(extra, have[j])
			j++
		default:
			i++
			j++
		}
	}
	return missing, extra
}

func clip(lines []string) string {
	if len(lines) > 15 {
		lines = append(lines[:15:15], fmt.Sprintf("… and %d more", len(lines)-15))
	}
	return "  " + strings.Join(lines, "\n  ")
}

// pythonFor returns the interpreter of the Python checks, or "" (logged) when it lacks pyarrow
// or pyiceberg; under CI a missing interpreter fails (pythontest.Interpreter).
func pythonFor(t *testing.T) string {
	var py string
	t.Run("python", func(t *testing.T) { py = pythontest.Interpreter(t, "pyarrow", "pyiceberg") })
	if py == "" {
		t.Logf("the Python checks (direct reads, Iceberg metadata) are skipped: set %s to an interpreter with pyarrow and pyiceberg", pythontest.Env)
		return ""
	}
	return py
}
