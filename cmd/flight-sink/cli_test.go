package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// buildCLI builds the flight-sink binary into a temporary directory and returns its path.
func buildCLI(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the binary: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "flight-sink")
	cmd := exec.Command(goBin, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// result is what one run of the binary produced.
type result struct {
	stdout, stderr string
	code           int
}

// runCLI runs the binary with args and an environment cleaned of FLIGHT_SINK_* and AWS_*
// variables (so the caller's shell cannot change what is tested) plus env.
func runCLI(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLIGHT_SINK_") && !strings.HasPrefix(kv, "AWS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	default:
		t.Fatalf("run %v: %v", args, err)
	}
	return res
}

// mustSucceed fails the test unless r exited 0 with nothing on stderr.
func (r result) mustSucceed(t *testing.T) result {
	t.Helper()
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return r
}

// mustFail fails the test unless r exited 1 with one line on stderr containing want.
func (r result) mustFail(t *testing.T, want string) {
	t.Helper()
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q does not mention %q", r.stderr, want)
	}
	if n := strings.Count(strings.TrimSuffix(r.stderr, "\n"), "\n"); n != 0 {
		t.Errorf("stderr has %d lines, want one:\n%s", n+1, r.stderr)
	}
}

// hasRow reports whether a line of out starts with the given whitespace-separated fields.
func hasRow(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(fields) && strings.Join(f[:len(fields)], " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}

var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

func makeBatch(t *testing.T, ids ...int64) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, testSchema)
	defer b.Release()
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append("row")
	}
	return b.NewRecordBatch()
}

// makeTable creates table "events" in store with three versions:
//
//	1 Create (primary key id, one config entry)
//	2 Append of 3 rows, streaming epoch (q-1, 7)
//	3 Append of 2 rows, property note=second
func makeTable(t *testing.T, store objstore.Store) {
	t.Helper()
	ctx := context.Background()
	tbl, err := engine.Create(ctx, store, "events", testSchema, engine.CreateOptions{
		PrimaryKey: []string{"id"},
		Config:     map[string]string{"retention": "7d"},
		Properties: map[string]string{"created_by": "cli_test"},
	}, nil)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	for _, step := range []struct {
		ids   []int64
		props map[string]string
	}{
		{[]int64{1, 2, 3}, engine.EpochProperties(engine.EpochIdentity{QueryID: "q-1", EpochID: 7}, nil)},
		{[]int64{4, 5}, map[string]string{"note": "second"}},
	} {
		rec := makeBatch(t, step.ids...)
		_, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, step.props)
		rec.Release()
		if err != nil {
			t.Fatalf("append: %v", err)
		}
	}
}

func TestCLI(t *testing.T) {
	bin := buildCLI(t)
	root := t.TempDir()
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	makeTable(t, store)
	uri := filepath.Join(root, "events")

	t.Run("history", func(t *testing.T) {
		out := runCLI(t, bin, nil, "history", uri).mustSucceed(t).stdout
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 {
			t.Fatalf("want a header and 3 versions, got:\n%s", out)
		}
		for i, want := range []struct{ version, op, prop string }{
			{"3", "Append", "note=second"},
			{"2", "Append", "flight_sink.streaming.query_id=q-1"},
			{"1", "Create", "created_by=cli_test"},
		} {
			f := strings.Fields(lines[i+1])
			if f[0] != want.version || f[2] != want.op || !strings.Contains(lines[i+1], want.prop) {
				t.Errorf("line %d = %q, want version %s, %s, %s", i+1, lines[i+1], want.version, want.op, want.prop)
			}
		}
	})

	t.Run("history-json", func(t *testing.T) {
		var h flightsvc.HistoryResult
		out := runCLI(t, bin, nil, "history", "--json", "file://"+uri).mustSucceed(t).stdout
		if err := json.Unmarshal([]byte(out), &h); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		if h.Table != "events" || h.LatestVersion != 3 || len(h.Versions) != 3 {
			t.Fatalf("got %+v", h)
		}
		for i, op := range []engine.Operation{engine.OpAppend, engine.OpAppend, engine.OpCreate} {
			v := h.Versions[i]
			if v.Version != uint64(3-i) || v.Operation != string(op) || v.Timestamp.IsZero() || v.TransactionFile == "" {
				t.Errorf("versions[%d] = %+v, want version %d %s", i, v, 3-i, op)
			}
		}
		if p := h.Versions[1].Properties; p[engine.PropQueryID] != "q-1" || p[engine.PropEpochID] != "7" {
			t.Errorf("version 2 properties = %v, want the streaming epoch", p)
		}
	})

	t.Run("history-limit", func(t *testing.T) {
		var h flightsvc.HistoryResult
		// Flags from the environment: FLIGHT_SINK_JSON and FLIGHT_SINK_HISTORY_LIMIT.
		out := runCLI(t, bin, []string{"FLIGHT_SINK_JSON=1", "FLIGHT_SINK_HISTORY_LIMIT=1"}, "history", uri).mustSucceed(t).stdout
		if err := json.Unmarshal([]byte(out), &h); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		if len(h.Versions) != 1 || h.Versions[0].Version != 3 {
			t.Errorf("got %+v, want only version 3", h.Versions)
		}
		runCLI(t, bin, nil, "history", "--limit=-1", uri).mustFail(t, "--limit")
	})

	t.Run("history-progress", func(t *testing.T) {
		r := runCLI(t, bin, nil, "history", "--progress=always", "--json", "--limit=0", uri)
		if r.code != 0 || !strings.Contains(r.stderr, "reading history") {
			t.Fatalf("exit %d, stderr %q: want a progress bar on stderr", r.code, r.stderr)
		}
		var h flightsvc.HistoryResult
		if err := json.Unmarshal([]byte(r.stdout), &h); err != nil || len(h.Versions) != 3 {
			t.Fatalf("stdout must stay clean JSON with 3 versions: %v\n%s", err, r.stdout)
		}
	})

	t.Run("inspect", func(t *testing.T) {
		out := runCLI(t, bin, nil, "inspect", uri).mustSucceed(t).stdout
		for _, want := range []string{
			"table:", "events", "version:", "3 (latest)", "rows:", "5", "fragments:",
			"primary key:", "id", "config:", "retention=7d",
			"id", "int64", "not null", "name", "utf8", "nullable",
			"data/", ".parquet", "streaming watermarks:", "q-1",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("inspect output lacks %q:\n%s", want, out)
			}
		}
		if !hasRow(out, "q-1", "7", "2") {
			t.Errorf("inspect output lacks the watermark row (q-1 at epoch 7):\n%s", out)
		}
	})

	t.Run("inspect-json", func(t *testing.T) {
		var d inspectJSON
		out := runCLI(t, bin, nil, "inspect", "--json", uri).mustSucceed(t).stdout
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		if d.Version != 3 || d.LatestVersion != 3 || d.Rows != 5 || d.Operation != engine.OpAppend {
			t.Errorf("got version %d/%d rows %d op %s, want 3/3, 5 rows, Append", d.Version, d.LatestVersion, d.Rows, d.Operation)
		}
		if len(d.Schema) != 2 || d.Schema[0] != (fieldJSON{Name: "id", Type: "int64"}) || d.Schema[1] != (fieldJSON{Name: "name", Type: "utf8", Nullable: true}) {
			t.Errorf("schema = %+v", d.Schema)
		}
		if len(d.PrimaryKey) != 1 || d.PrimaryKey[0] != "id" || d.Config["retention"] != "7d" {
			t.Errorf("primary key %v, config %v", d.PrimaryKey, d.Config)
		}
		if len(d.Fragments) != 2 {
			t.Fatalf("fragments = %+v, want 2", d.Fragments)
		}
		var total int64
		for i, wantRows := range []int64{3, 2} {
			f := d.Fragments[i]
			if f.Rows != wantRows || len(f.Files) != 1 || f.Files[0].SizeBytes <= 0 || !strings.HasPrefix(f.Files[0].Path, "data/") {
				t.Errorf("fragment %d = %+v, want %d rows in one data file", i, f, wantRows)
			}
			info, err := store.Stat(context.Background(), "events/"+f.Files[0].Path)
			if err != nil || info.Size != f.Files[0].SizeBytes {
				t.Errorf("file %s: stat %v, %v; inspect says %d bytes", f.Files[0].Path, info.Size, err, f.Files[0].SizeBytes)
			}
			total += f.Bytes
		}
		if d.DataBytes != total || total == 0 {
			t.Errorf("data_bytes = %d, fragments add up to %d", d.DataBytes, total)
		}
		if wm, ok := d.Streams["q-1"]; len(d.Streams) != 1 || !ok || wm.Epoch != 7 || wm.Version != 2 || wm.Timestamp.IsZero() {
			t.Errorf("streams = %+v, want q-1 at epoch 7 (version 2)", d.Streams)
		}
	})

	t.Run("inspect-memwal", func(t *testing.T) { testInspectCountsMemWALRows(t, bin) })
	t.Run("inspect-partitions", func(t *testing.T) { testInspectShowsPartitions(t, bin) })

	t.Run("inspect-old-version", func(t *testing.T) {
		var d inspectJSON
		out := runCLI(t, bin, nil, "inspect", "--json", "--version", "2", uri).mustSucceed(t).stdout
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		if d.Version != 2 || d.LatestVersion != 3 || d.Rows != 3 || len(d.Fragments) != 1 {
			t.Errorf("got version %d (latest %d), %d rows, %d fragments; want version 2 (latest 3), 3 rows, 1 fragment",
				d.Version, d.LatestVersion, d.Rows, len(d.Fragments))
		}
		txt := runCLI(t, bin, nil, "inspect", "--version", "1", uri).mustSucceed(t).stdout
		if !strings.Contains(txt, "latest is 3") || !strings.Contains(txt, "Create") {
			t.Errorf("inspect --version 1:\n%s", txt)
		}
		runCLI(t, bin, nil, "inspect", "--version", "9", uri).mustFail(t, "version not found")
	})

	t.Run("missing-table", func(t *testing.T) {
		runCLI(t, bin, nil, "history", filepath.Join(root, "nope")).mustFail(t, "table not found")
		runCLI(t, bin, nil, "inspect", filepath.Join(root, "nope")).mustFail(t, "table not found")
		missingRoot := filepath.Join(t.TempDir(), "no-such-root")
		runCLI(t, bin, nil, "inspect", filepath.Join(missingRoot, "events")).mustFail(t, "table not found")
		if _, err := os.Stat(missingRoot); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("inspecting a missing table created its root %s (stat: %v)", missingRoot, err)
		}
	})

	t.Run("bad-arguments", func(t *testing.T) {
		runCLI(t, bin, nil, "history", "s3://bucket").mustFail(t, "no table")
		runCLI(t, bin, nil, "history", "gs://bucket/events").mustFail(t, "unsupported scheme")
		runCLI(t, bin, nil, "history").mustFail(t, "TABLE_URI")
		runCLI(t, bin, nil, "no-such-command").mustFail(t, "no-such-command")
	})

	t.Run("version", func(t *testing.T) {
		out := runCLI(t, bin, nil, "version").mustSucceed(t).stdout
		if !strings.HasPrefix(out, "flight-sink ") || !strings.Contains(out, fmt.Sprintf("manifest format %d", engine.FormatVersion)) {
			t.Errorf("version printed %q", out)
		}
	})

	t.Run("s3", func(t *testing.T) {
		s3URI, opts := storetest.S3(t)
		s3store, err := objstore.NewS3(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		makeTable(t, s3store)
		creds := []string{"AWS_ACCESS_KEY_ID=" + opts.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + opts.SecretAccessKey}
		tableURI := s3URI + "/events"

		// Endpoint, region and path style from flags; credentials from the AWS environment.
		flags := []string{"--s3-endpoint", opts.Endpoint, "--s3-region", opts.Region, "--s3-path-style"}
		var h flightsvc.HistoryResult
		out := runCLI(t, bin, creds, append([]string{"history", "--json", tableURI}, flags...)...).mustSucceed(t).stdout
		if err := json.Unmarshal([]byte(out), &h); err != nil || len(h.Versions) != 3 || h.Versions[2].Operation != string(engine.OpCreate) {
			t.Fatalf("history on S3: %v\n%s", err, out)
		}

		// The same from FLIGHT_SINK_* variables.
		env := append(creds, "FLIGHT_SINK_S3_ENDPOINT="+opts.Endpoint, "FLIGHT_SINK_S3_REGION="+opts.Region, "FLIGHT_SINK_S3_PATH_STYLE=true")
		var d inspectJSON
		out = runCLI(t, bin, env, "inspect", "--json", tableURI).mustSucceed(t).stdout
		if err := json.Unmarshal([]byte(out), &d); err != nil || d.Rows != 5 || len(d.Fragments) != 2 || len(d.Streams) != 1 {
			t.Fatalf("inspect on S3: %v\n%s", err, out)
		}

		runCLI(t, bin, env, "inspect", s3URI+"/nope").mustFail(t, "table not found")
	})
}
