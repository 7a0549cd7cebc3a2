package model

// The slow checks: a direct read (GetFlightInfo with "direct": true, each data file read by
// pyarrow with its deleted rows left out, the DoGet-only endpoints by DoGet) and the table's
// Iceberg metadata read by PyIceberg, each compared with the model.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// directEndpoint is the app_metadata of a direct endpoint (docs/protocol.md, Direct reads).
type directEndpoint struct {
	Format   string     `json:"format"`
	Fragment uint64     `json:"fragment"`
	Rows     int64      `json:"rows"`
	FileRows int64      `json:"file_rows"`
	Deleted  [][2]int64 `json:"deleted"`
}

// checkPython folds every table's MemWAL rows, then reads each table directly and through its
// Iceberg metadata, and compares both with the model.
func (rn *runner) checkPython() {
	rn.pyChecks++
	// pyRead is one table's share of the Python reader's work, and what Go reads beside it.
	type pyRead struct {
		m        *tableModel
		s        *server
		dir      string
		parts    []map[string]any
		viaDoGet readResult
		iceberg  bool
	}
	var reads []pyRead
	var jobs []map[string]any
	for _, m := range rn.tables {
		if !m.exists {
			continue
		}
		folded := true
		if m.shards > 0 {
			folded = rn.foldEverything(m)
		}
		s := rn.servers[(rn.pyChecks+len(reads))%len(rn.servers)] // not rn.server(): a check draws nothing from the seed
		dir := rn.t.TempDir()
		job := map[string]any{}

		// Direct: every endpoint with a location is pyarrow's; the others are DoGet's.
		cmd, _ := json.Marshal(map[string]any{"table": m.name, "direct": true})
		ctx, cancel := rn.callCtx()
		info, err := s.client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: cmd})
		if err != nil {
			cancel()
			rn.failf("GetFlightInfo direct %s on %s: %v", m.name, s.name, err)
		}
		schema, err := flight.DeserializeSchema(info.Schema, nil)
		if err != nil {
			cancel()
			rn.failf("GetFlightInfo direct %s: schema: %v", m.name, err)
		}
		parts := []map[string]any{}
		viaDoGet := readResult{schema: schema}
		for i, ep := range info.Endpoint {
			if len(ep.Location) == 0 {
				got, err := doGet(ctx, s.client, ep.Ticket.Ticket)
				if err != nil {
					cancel()
					rn.failf("direct read %s: DoGet of endpoint %d: %v", m.name, i, err)
				}
				viaDoGet.rows = append(viaDoGet.rows, got.rows...)
				continue
			}
			var md directEndpoint
			if err := json.Unmarshal(ep.AppMetadata, &md); err != nil {
				cancel()
				rn.failf("direct read %s: endpoint %d app_metadata %q: %v", m.name, i, ep.AppMetadata, err)
			}
			path, ok := strings.CutPrefix(ep.Location[0].Uri, "file://")
			if !ok {
				cancel()
				rn.failf("direct read %s: endpoint %d location %q on a local root", m.name, i, ep.Location[0].Uri)
			}
			deleted := md.Deleted
			if deleted == nil {
				deleted = [][2]int64{}
			}
			parts = append(parts, map[string]any{"path": path, "deleted": deleted})
		}
		schemaFile := filepath.Join(dir, "schema.arrow")
		writeSchemaFile(rn, schemaFile, schema)
		job["direct"] = map[string]any{"schema": schemaFile, "parts": parts, "out": filepath.Join(dir, "direct.arrow")}

		// Iceberg: published up to the newest version; it holds what the base table holds.
		iceberg := false
		if folded && rn.skip.icebergFixedSizeList && m.holds(arrow.FIXED_SIZE_LIST) {
			rn.logf("python check %s: no Iceberg read (known issue icebergFixedSizeList)", m.name)
			folded = false
		}
		if folded && rn.skip.icebergNullListOfStruct && m.holdsNestedOfStruct() {
			rn.logf("python check %s: no Iceberg read (known issue icebergNullListOfStruct)", m.name)
			folded = false
		}
		var pub struct {
			MetadataFile string `json:"metadata_file"`
		}
		if folded {
			err := action(ctx, s.client, "publish_iceberg", map[string]any{"table": m.name}, &pub)
			if err != nil {
				cancel()
				rn.failf("publish_iceberg %s on %s: %v", m.name, s.name, err)
			}
		}
		if folded {
			meta, ok := strings.CutPrefix(pub.MetadataFile, "file://")
			if !ok {
				cancel()
				rn.failf("publish_iceberg %s: metadata_file %q on a local root", m.name, pub.MetadataFile)
			}
			job["iceberg"] = map[string]any{"metadata": meta, "out": filepath.Join(dir, "iceberg.arrow")}
			iceberg = true
		}
		cancel()
		jobs = append(jobs, job)
		reads = append(reads, pyRead{m: m, s: s, dir: dir, parts: parts, viaDoGet: viaDoGet, iceberg: iceberg})
		rn.logf("python check %s on %s: %d direct files, %d DoGet rows, iceberg: %v", m.name, s.name, len(parts), len(viaDoGet.rows), iceberg)
	}
	if len(jobs) == 0 {
		return
	}
	// One interpreter for every table: starting Python and importing PyIceberg is most of the
	// cost.
	jobFile := filepath.Join(rn.t.TempDir(), "jobs.json")
	b, _ := json.Marshal(jobs)
	if err := os.WriteFile(jobFile, b, 0o644); err != nil {
		rn.failf("write %s: %v", jobFile, err)
	}
	if out, err := exec.CommandContext(rn.ctx, rn.python, filepath.Join("testdata", "read.py"), jobFile).CombinedOutput(); err != nil {
		rn.failf("python reader: %v\n%s", err, out)
	}
	for _, r := range reads {
		m, s, dir, parts, viaDoGet, iceberg := r.m, r.s, r.dir, r.parts, r.viaDoGet, r.iceberg
		direct, err := readIPCFile(filepath.Join(dir, "direct.arrow"))
		if err != nil {
			rn.failf("direct read %s: %v", m.name, err)
		}
		direct.rows = append(direct.rows, viaDoGet.rows...)
		rn.directFiles += len(parts)
		rn.compare(m, fmt.Sprintf("direct read of %s via %s (%d files by pyarrow)", m.name, s.name, len(parts)), direct)
		if iceberg {
			ice, err := readIPCFile(filepath.Join(dir, "iceberg.arrow"))
			if err != nil {
				rn.failf("iceberg read %s: %v", m.name, err)
			}
			ice.schema = nil // Iceberg types are not Arrow's (int8 reads as int32): rows only
			what := fmt.Sprintf("PyIceberg scan of %s", m.name)
			rn.compare(m, what, ice)
			rn.icebergReads++
		}
	}
}

// writeSchemaFile writes an Arrow IPC file of schema with no rows.
func writeSchemaFile(rn *runner, path string, schema *arrow.Schema) {
	f, err := os.Create(path)
	if err != nil {
		rn.failf("%v", err)
	}
	defer f.Close()
	w, err := ipc.NewFileWriter(f, ipc.WithSchema(schema))
	if err != nil {
		rn.failf("%v", err)
	}
	if err := w.Close(); err != nil {
		rn.failf("%v", err)
	}
}
