package flightsvc_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// extSchema is rowSchema with a column a producer added mid-stream.
var extSchema = arrow.NewSchema(append(rowSchema.Fields(), arrow.Field{Name: "extra", Type: arrow.PrimitiveTypes.Int32, Nullable: true}), nil)

func extBatch(ids ...int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, extSchema)
	defer b.Release()
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("row-%d", id))
		b.Field(2).(*array.Int32Builder).Append(int32(id * 3))
	}
	return b.NewRecordBatch()
}

// putExt sends one extSchema epoch under command c.
func (c *flightConn) putExt(t *testing.T, command cmd, ids ...int64) (ack, error) {
	t.Helper()
	rec := extBatch(ids...)
	defer rec.Release()
	return c.put(testCtx(t), cmdDesc(t, command), extSchema, rec)
}

// readExtra reads table (version 0: the latest) and returns extra by id (-1 for null), and the
// schema DoGet sent.
func (c *flightConn) readExtra(t *testing.T, table string, version uint64) (map[int64]int32, *arrow.Schema) {
	t.Helper()
	tk := cmd{"table": table}
	if version > 0 {
		tk["version"] = version
	}
	b, _ := json.Marshal(tk)
	stream, err := c.Client.DoGet(testCtx(t), &flight.Ticket{Ticket: b})
	if err != nil {
		t.Fatal(err)
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Release()
	out := map[int64]int32{}
	ec := rdr.Schema().FieldIndices("extra")
	for rdr.Next() {
		rec := rdr.RecordBatch()
		ids := rec.Column(0).(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			v := int32(-1)
			if len(ec) == 1 {
				if e := rec.Column(ec[0]).(*array.Int32); e.IsValid(i) {
					v = e.Value(i)
				}
			}
			out[ids.Value(i)] = v
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return out, rdr.Schema()
}

// wantExtra checks that the ids of nulls read null and the ids of values read id*3.
func wantExtra(t *testing.T, when string, got map[int64]int32, nulls, values []int64) {
	t.Helper()
	if len(got) != len(nulls)+len(values) {
		t.Fatalf("%s: %d rows %v, want %d", when, len(got), got, len(nulls)+len(values))
	}
	for _, id := range nulls {
		if v, ok := got[id]; !ok || v != -1 {
			t.Fatalf("%s: row %d: extra %d, want null", when, id, v)
		}
	}
	for _, id := range values {
		if got[id] != int32(id*3) {
			t.Fatalf("%s: row %d: extra %d, want %d", when, id, got[id], id*3)
		}
	}
}

func schemaStats(t *testing.T, c *flightConn, table string) flightsvc.TableStats {
	t.Helper()
	var st flightsvc.TableStats
	c.mustAction(t, "table_stats", cmd{"table": table}, &st)
	return st
}

// TestMergeSchemaDirect: a stream that gains a column is refused without merge_schema (nothing
// committed) and lands with it, the new column in the same version as its rows; old rows read
// null, an old-schema epoch lands after the change, a refused change commits nothing, DoGet of
// the old version has the old schema, and a compaction keeps it all.
func TestMergeSchemaDirect(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	s.putEpoch(t, "ev", "q", 1, idRange(0, 3))
	v1 := s.version(t, "ev")

	_, err := s.putExt(t, cmd{"table": "ev", "query_id": "q", "epoch_id": 2})
	wantReason(t, err, codes.InvalidArgument, "SCHEMA_MISMATCH")
	if s.version(t, "ev") != v1 {
		t.Fatal("a refused epoch committed")
	}
	a, err := s.putExt(t, cmd{"table": "ev", "query_id": "q", "epoch_id": 2, "merge_schema": true}, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, a, "committed", v1+1)
	st := schemaStats(t, &s.flightConn, "ev")
	if st.SchemaID != 1 || st.LastFieldID != 3 || len(st.Schema) != 3 || st.Schema[2].Name != "extra" || st.Schema[2].ID != 3 {
		t.Fatalf("table_stats schema after the merge: %+v", st.TableSchema)
	}
	s.mustPut(t, cmd{"table": "ev", "query_id": "q", "epoch_id": 3}, idRange(5, 2)) // the old schema still lands
	got, _ := s.readExtra(t, "ev", 0)
	wantExtra(t, "after the merge", got, []int64{0, 1, 2, 5, 6}, []int64{3, 4})
	if _, sc := s.readExtra(t, "ev", v1); sc.NumFields() != 2 {
		t.Fatalf("DoGet of version %d: schema %v, want the old two columns", v1, sc)
	}

	// A refused change (payload utf8 -> int64) commits nothing, with or without merge_schema.
	bad := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "payload", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, nil)
	bb := array.NewRecordBuilder(memory.DefaultAllocator, bad)
	bb.Field(0).(*array.Int64Builder).Append(9)
	bb.Field(1).(*array.Int64Builder).Append(9)
	badRec := bb.NewRecordBatch()
	bb.Release()
	defer badRec.Release()
	before := s.version(t, "ev")
	_, err = s.put(testCtx(t), cmdDesc(t, cmd{"table": "ev", "query_id": "q", "epoch_id": 4, "merge_schema": true}), bad, badRec)
	wantReason(t, err, codes.InvalidArgument, "SCHEMA_CHANGE_REFUSED")
	if s.version(t, "ev") != before {
		t.Fatal("a refused change committed")
	}

	s.mustAction(t, "compact", cmd{"table": "ev"}, nil)
	got, _ = s.readExtra(t, "ev", 0)
	wantExtra(t, "after compaction", got, []int64{0, 1, 2, 5, 6}, []int64{3, 4})
}

// TestMergeSchemaMemWAL: a MemWAL table holding rows of the old schema in a flushed generation
// and in a memtable takes a column (the epoch that adds it commits directly); the shard's rows
// read null for it before and after the fold, and epochs in either schema keep landing in the
// shard afterwards.
func TestMergeSchemaMemWAL(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	create := cmd{"table": "mw", "query_id": "q", "epoch_id": 1, "create": cmd{"memwal": cmd{"shards": 1}}}
	wantAck(t, s.mustPut(t, create, idRange(0, 3)), "committed", 0)
	s.mustAction(t, "flush_memwal", cmd{"table": "mw"}, nil)                        // a generation of the old schema
	s.mustPut(t, cmd{"table": "mw", "query_id": "q", "epoch_id": 2}, idRange(3, 2)) // a memtable of the old schema
	a, err := s.putExt(t, cmd{"table": "mw", "query_id": "q", "epoch_id": 3, "merge_schema": true}, 5, 6)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != "committed" || a.Route != "direct" {
		t.Fatalf("schema-changing epoch: %+v, want committed on the direct route", a)
	}
	got, _ := s.readExtra(t, "mw", 0)
	wantExtra(t, "after the merge", got, idRange(0, 5), []int64{5, 6})
	// Both schemas keep landing in the shard (reopened in the new schema).
	if a := s.mustPut(t, cmd{"table": "mw", "query_id": "q", "epoch_id": 4}, idRange(7, 1)); a.Route != "memwal" {
		t.Fatalf("old-schema epoch after the merge: %+v", a)
	}
	if a, err := s.putExt(t, cmd{"table": "mw", "query_id": "q", "epoch_id": 5}, 8); err != nil || a.Route != "memwal" {
		t.Fatalf("new-schema epoch after the merge: %+v, %v", a, err)
	}
	nulls := append(idRange(0, 5), 7)
	got, _ = s.readExtra(t, "mw", 0)
	wantExtra(t, "memtables of both schemas", got, nulls, []int64{5, 6, 8})
	s.mustAction(t, "flush_memwal", cmd{"table": "mw"}, nil)
	s.mustAction(t, "fold_memwal_shard", cmd{"table": "mw"}, nil) // the fold writes the new schema
	got, _ = s.readExtra(t, "mw", 0)
	wantExtra(t, "after the fold", got, nulls, []int64{5, 6, 8})
	s2 := startServer(t, flightsvc.Config{Root: s.Root}) // a server that never saw the old schema
	got, _ = s2.readExtra(t, "mw", 0)
	wantExtra(t, "another server", got, nulls, []int64{5, 6, 8})
}

// TestMergeSchemaStages: the stages of one epoch may carry different schemas; commit_epoch
// merges them with merge_schema and refuses (nothing committed) without it.
func TestMergeSchemaStages(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	s.putEpoch(t, "st", "q", 1, idRange(0, 2))
	part := func(id int64) cmd {
		return cmd{"table": "st", "query_id": "q", "epoch_id": 2, "partition": cmd{"id": id, "attempt": 0}, "merge_schema": true}
	}
	a0 := s.mustPut(t, part(0), idRange(2, 2))
	a1, err := s.putExt(t, part(1), 4, 5)
	if err != nil {
		t.Fatal(err)
	}
	before := s.version(t, "st")
	commit := cmd{"table": "st", "query_id": "q", "epoch_id": 2, "stages": []string{a0.Stage, a1.Stage}}
	_, err = s.action(testCtx(t), "commit_epoch", commit)
	wantReason(t, err, codes.InvalidArgument, "SCHEMA_MISMATCH")
	if s.version(t, "st") != before {
		t.Fatal("a refused commit_epoch committed")
	}
	commit["merge_schema"] = true
	var res ack
	s.mustAction(t, "commit_epoch", commit, &res)
	wantAck(t, res, "committed", before+1)
	got, _ := s.readExtra(t, "st", 0)
	wantExtra(t, "after commit_epoch", got, idRange(0, 4), []int64{4, 5})
}

// TestMergeSchemaKeyed: on a keyed table with a primary-key index, an update epoch that adds a
// column upserts through the index in the transaction that adds it, and older-schema upserts
// afterwards still replace rows by key; a change of the key column is refused.
func TestMergeSchemaKeyed(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	create := cmd{"table": "kv", "query_id": "q", "epoch_id": 1, "mode": "update", "create": cmd{"primary_key": []string{"id"}}}
	s.mustPut(t, create, idRange(0, 4))
	s.mustAction(t, "create_index", cmd{"table": "kv"}, nil)
	if _, err := s.putExt(t, cmd{"table": "kv", "query_id": "q", "epoch_id": 2, "mode": "update", "merge_schema": true}, 1, 4); err != nil {
		t.Fatal(err)
	}
	s.mustPut(t, cmd{"table": "kv", "query_id": "q", "epoch_id": 3, "mode": "update"}, []int64{2, 5})
	got, _ := s.readExtra(t, "kv", 0)
	wantExtra(t, "after the upserts", got, []int64{0, 2, 3, 5}, []int64{1, 4})
	// An old-schema upsert of a row that has a value in the new column replaces the row: null.
	s.mustPut(t, cmd{"table": "kv", "query_id": "q", "epoch_id": 4, "mode": "update"}, []int64{1})
	got, _ = s.readExtra(t, "kv", 0)
	wantExtra(t, "after an old-schema upsert", got, []int64{0, 1, 2, 3, 5}, []int64{4})
	if ids := s.readIDs(t, "kv"); len(ids) != 6 {
		t.Fatalf("ids %v: an upsert duplicated a key", ids)
	}

	key := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int32}, {Name: "payload", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	kb := array.NewRecordBuilder(memory.DefaultAllocator, key)
	kb.Field(0).(*array.Int32Builder).Append(9)
	kb.Field(1).(*array.StringBuilder).Append("x")
	rec := kb.NewRecordBatch()
	kb.Release()
	defer rec.Release()
	_, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": "kv", "query_id": "q", "epoch_id": 5, "mode": "update", "merge_schema": true}), key, rec)
	wantReason(t, err, codes.InvalidArgument, "SCHEMA_CHANGE_REFUSED")
}

// TestMergeSchemaEmptyEpoch: an append epoch without rows whose schema adds a column commits the
// change alone (one version, no rows; how the Spark catalog runs ALTER TABLE ADD COLUMNS); its
// replay is a duplicate, and an empty epoch that changes nothing still commits nothing.
func TestMergeSchemaEmptyEpoch(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	s.putEpoch(t, "ev", "q", 1, idRange(0, 3))
	v1 := s.version(t, "ev")

	a, err := s.putExt(t, cmd{"table": "ev", "query_id": "alter", "epoch_id": 0, "merge_schema": true})
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, a, "committed", v1+1)
	st := schemaStats(t, &s.flightConn, "ev")
	if st.SchemaID != 1 || len(st.Schema) != 3 || st.Schema[2].Name != "extra" || st.Rows != 3 {
		t.Fatalf("table_stats after the empty schema change: rows %d, schema %+v", st.Rows, st.TableSchema)
	}
	got, _ := s.readExtra(t, "ev", 0)
	wantExtra(t, "after the empty schema change", got, []int64{0, 1, 2}, nil)

	a, err = s.putExt(t, cmd{"table": "ev", "query_id": "alter", "epoch_id": 0, "merge_schema": true})
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, a, "duplicate", v1+1)
	a, err = s.putExt(t, cmd{"table": "ev", "query_id": "alter", "epoch_id": 1, "merge_schema": true})
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != "empty" || s.version(t, "ev") != v1+1 {
		t.Fatalf("an empty epoch that changes nothing: %+v at version %d, want empty at %d", a, s.version(t, "ev"), v1+1)
	}
}
