package flightsvc_test

// What a batch's schema declares is checked against its data before anything is acknowledged, on
// every route: a null where a field is declared not null (at any nesting level), a decimal past
// its precision, a string that is not UTF-8 are refused with SCHEMA_DATA_MISMATCH naming the
// column, and nothing is committed or staged. Data declared nullable that holds no null fits a
// NOT NULL column, and the table keeps its NOT NULL.

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// requiredSchema has a required field at every nesting level: a top-level column, a struct's
// field, a list's item, a map's value.
func requiredSchema(nullable bool) *arrow.Schema {
	i64 := arrow.PrimitiveTypes.Int64
	return arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: i64, Nullable: nullable},
		{Name: "s", Type: arrow.StructOf(arrow.Field{Name: "child", Type: i64, Nullable: nullable}), Nullable: true},
		{Name: "l", Type: arrow.ListOfField(arrow.Field{Name: "item", Type: i64, Nullable: nullable}), Nullable: true},
		{Name: "m", Type: arrow.MapOfFields(arrow.Field{Name: "key", Type: arrow.BinaryTypes.String},
			arrow.Field{Name: "value", Type: i64, Nullable: nullable}), Nullable: true},
		{Name: "d", Type: &arrow.Decimal128Type{Precision: 5, Scale: 2}, Nullable: true},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
}

// goodRows fit requiredSchema(false): the nulls are where a field is nullable, or under a null
// parent (a null struct whose required child is null too, as Spark writes it).
const goodRows = `[
	{"id": 1, "s": {"child": 10}, "l": [1, 2], "m": [{"key": "a", "value": 1}], "d": "123.45", "name": "één"},
	{"id": 2, "s": null, "l": null, "m": null, "d": null, "name": null},
	{"id": 3, "s": {"child": 30}, "l": [], "m": [], "d": "-999.99", "name": ""}
]`

func recordFromJSON(t testing.TB, sc *arrow.Schema, rows string) arrow.RecordBatch {
	t.Helper()
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, strings.NewReader(rows))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// invalidUTF8Batch is one row of sc whose string column "name" holds the bytes "ok\xff".
func invalidUTF8Batch(t testing.TB, sc *arrow.Schema) arrow.RecordBatch {
	t.Helper()
	rec := recordFromJSON(t, sc, `[{"id": 7, "s": {"child": 1}, "l": [1], "m": [], "d": "1.00", "name": "ok?"}]`)
	defer rec.Release()
	col := sc.FieldIndices("name")[0]
	str := rec.Column(col).Data()
	bufs := str.Buffers()
	data := append([]byte(nil), bufs[2].Bytes()...)
	data[len(data)-1] = 0xff // "ok\xff"
	nd := array.NewData(arrow.BinaryTypes.String, str.Len(), []*memory.Buffer{bufs[0], bufs[1], memory.NewBufferBytes(data)}, nil, str.NullN(), str.Offset())
	defer nd.Release()
	bad := array.MakeFromData(nd)
	defer bad.Release()
	cols := append([]arrow.Array(nil), rec.Columns()...)
	cols[col] = bad
	return array.NewRecordBatch(sc, cols, rec.NumRows())
}

// rowsJSON reads table whole and returns its rows as JSON, and its schema.
func (c *flightConn) rowsJSON(t testing.TB, table string) (string, *arrow.Schema) {
	t.Helper()
	tk, _ := json.Marshal(cmd{"table": table})
	stream, err := c.Client.DoGet(testCtx(t), &flight.Ticket{Ticket: tk})
	if err != nil {
		t.Fatal(err)
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		t.Fatalf("DoGet %s: %v", table, err)
	}
	defer rdr.Release()
	var rows []json.RawMessage
	for rdr.Next() {
		b, err := rdr.RecordBatch().MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var part []json.RawMessage
		if err := json.Unmarshal(b, &part); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, part...)
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("DoGet %s: %v", table, err)
	}
	out, _ := json.Marshal(rows)
	return string(out), rdr.Schema()
}

// sentJSON is the JSON of batches as the table reads them back.
func sentJSON(t testing.TB, recs ...arrow.RecordBatch) string {
	t.Helper()
	var rows []json.RawMessage
	for _, rec := range recs {
		b, err := rec.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var part []json.RawMessage
		if err := json.Unmarshal(b, &part); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, part...)
	}
	out, _ := json.Marshal(rows)
	return string(out)
}

// wantRequiredEverywhere checks that sc, a table's schema read back, still declares id, s.child,
// l's item and m's value not null.
func wantRequiredEverywhere(t testing.TB, sc *arrow.Schema) {
	t.Helper()
	f := func(name string) arrow.Field { return sc.Field(sc.FieldIndices(name)[0]) }
	if f("id").Nullable {
		t.Errorf("id is nullable in the table: %s", sc)
	}
	if f("s").Type.(*arrow.StructType).Field(0).Nullable {
		t.Errorf("s.child is nullable in the table: %s", sc)
	}
	if f("l").Type.(arrow.ListLikeType).ElemField().Nullable {
		t.Errorf("l's item is nullable in the table: %s", sc)
	}
	if f("m").Type.(*arrow.MapType).ItemField().Nullable {
		t.Errorf("m's value is nullable in the table: %s", sc)
	}
}

// dataRoutes are the routes an epoch takes, each with the create spec that gives it.
var dataRoutes = []struct {
	name   string
	create any
}{
	{"direct", true},
	{"memwal", cmd{"memwal": cmd{"shards": 1}}},
}

// foldAll flushes and folds a MemWAL table's shards into its base table.
func (c *flightConn) foldAll(t testing.TB, table string) {
	t.Helper()
	c.mustAction(t, "flush_memwal", cmd{"table": table}, nil)
	c.mustAction(t, "fold_memwal_shard", cmd{"table": table}, nil)
}

// mismatchCases are batches whose data breaks what requiredSchema(false) declares, each with the
// column path the refusal must name.
func mismatchCases(t testing.TB, sc *arrow.Schema) []struct {
	name, path string
	rec        arrow.RecordBatch
} {
	// arrow-go's builders refuse some of these nulls: build with every field nullable, then
	// declare sc.
	row := func(r string) arrow.RecordBatch {
		rec := recordFromJSON(t, requiredSchema(true), "["+r+"]")
		defer rec.Release()
		return declareAs(rec, sc)
	}
	return []struct {
		name, path string
		rec        arrow.RecordBatch
	}{
		{"null in a required column", "id", row(`{"id": null, "s": null, "l": null, "m": null, "d": null, "name": "x"}`)},
		{"null in a struct's required field", "s.child", row(`{"id": 8, "s": {"child": null}, "l": null, "m": null, "d": null, "name": "x"}`)},
		{"null in a list's required item", "l.item", row(`{"id": 8, "s": null, "l": [1, null], "m": null, "d": null, "name": "x"}`)},
		{"null in a map's required value", "m.entries.value", row(`{"id": 8, "s": null, "l": null, "m": [{"key": "k", "value": null}], "d": null, "name": "x"}`)},
		{"decimal past its precision", "d", decimalPastPrecision(t, sc)},
		{"invalid UTF-8", "name", invalidUTF8Batch(t, sc)},
	}
}

// declareAs returns rec's data declared as sc, a schema of the same types up to nullability.
func declareAs(rec arrow.RecordBatch, sc *arrow.Schema) arrow.RecordBatch {
	var relabel func(d arrow.ArrayData, to arrow.DataType) arrow.ArrayData
	relabel = func(d arrow.ArrayData, to arrow.DataType) arrow.ArrayData {
		var children []arrow.ArrayData
		if n, ok := to.(arrow.NestedType); ok {
			for i, c := range d.Children() {
				children = append(children, relabel(c, n.Fields()[i].Type))
			}
		}
		return array.NewData(to, d.Len(), d.Buffers(), children, d.NullN(), d.Offset())
	}
	cols := make([]arrow.Array, rec.NumCols())
	for i, c := range rec.Columns() {
		cols[i] = array.MakeFromData(relabel(c.Data(), sc.Field(i).Type))
		defer cols[i].Release()
	}
	return array.NewRecordBatch(sc, cols, rec.NumRows())
}

// decimalPastPrecision is a batch whose decimal(5, 2) column holds 1234567.89 (9 digits).
func decimalPastPrecision(t testing.TB, sc *arrow.Schema) arrow.RecordBatch {
	t.Helper()
	// RecordFromJSON refuses the value itself; build the column from a wider one's buffers.
	wide := &arrow.Decimal128Type{Precision: 9, Scale: 2}
	b := array.NewDecimal128Builder(memory.DefaultAllocator, wide)
	defer b.Release()
	if err := b.AppendValueFromString("1234567.89"); err != nil {
		t.Fatal(err)
	}
	w := b.NewDecimal128Array()
	defer w.Release()
	nd := array.NewData(sc.Field(sc.FieldIndices("d")[0]).Type, w.Len(), w.Data().Buffers(), nil, 0, 0)
	defer nd.Release()
	d := array.MakeFromData(nd)
	defer d.Release()
	rec := recordFromJSON(t, sc, `[{"id": 9, "s": null, "l": null, "m": null, "d": null, "name": "x"}]`)
	defer rec.Release()
	cols := append([]arrow.Array(nil), rec.Columns()...)
	cols[sc.FieldIndices("d")[0]] = d
	return array.NewRecordBatch(sc, cols, 1)
}

// TestSchemaDataMismatchRefused: on the direct and the MemWAL route, as an epoch, a staged
// partition, a create-on-put and an append, a batch whose data breaks its declared schema is
// refused with SCHEMA_DATA_MISMATCH naming the column; nothing lands, the table reads back
// exactly what was acknowledged (before and after a fold), and the next epoch lands.
func TestSchemaDataMismatchRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	sc := requiredSchema(false)
	for _, route := range dataRoutes {
		t.Run(route.name, func(t *testing.T) {
			table := "req_" + route.name
			good := recordFromJSON(t, sc, goodRows)
			defer good.Release()
			wantAck(t, mustAck(t)(s.put(testCtx(t), cmdDesc(t, cmd{"table": table, "query_id": "q", "epoch_id": 0, "create": route.create}), sc, good)), "committed", 0)
			want := sentJSON(t, good)

			for _, tc := range mismatchCases(t, sc) {
				defer tc.rec.Release()
				for _, how := range []struct {
					name string
					desc cmd
				}{
					{"epoch", cmd{"table": table, "query_id": "q", "epoch_id": 1}},
					{"staged partition", cmd{"table": table, "query_id": "p", "epoch_id": 0, "partition": cmd{"id": 0}}},
					{"create-on-put", cmd{"table": table + "_new", "query_id": "q", "epoch_id": 0, "create": route.create}},
				} {
					t.Run(tc.name+"/"+how.name, func(t *testing.T) {
						_, err := s.put(testCtx(t), cmdDesc(t, how.desc), sc, tc.rec)
						wantReason(t, err, codes.InvalidArgument, "SCHEMA_DATA_MISMATCH")
						if msg := status.Convert(err).Message(); !strings.Contains(msg, `"`+tc.path+`"`) {
							t.Fatalf("the message does not name %q: %s", tc.path, msg)
						}
					})
				}
				t.Run(tc.name+"/append", func(t *testing.T) {
					_, err := s.put(testCtx(t), pathDesc(table), sc, tc.rec)
					wantReason(t, err, codes.InvalidArgument, "SCHEMA_DATA_MISMATCH")
				})
			}
			if _, err := s.get(testCtx(t), cmd{"table": table + "_new"}); codeOf(err) != codes.NotFound {
				t.Fatalf("a refused create-on-put left a table: %v", err)
			}
			got, gotSchema := s.rowsJSON(t, table)
			if got != want {
				t.Fatalf("table reads\n %s\nwant\n %s", got, want)
			}
			wantRequiredEverywhere(t, gotSchema)
			if route.name == "memwal" {
				s.foldAll(t, table)
				if got, _ := s.rowsJSON(t, table); got != want {
					t.Fatalf("after the fold the table reads\n %s\nwant\n %s", got, want)
				}
			}
			more := recordFromJSON(t, sc, `[{"id": 4, "s": {"child": 40}, "l": [4], "m": [], "d": "4.00", "name": "d"}]`)
			defer more.Release()
			wantAck(t, mustAck(t)(s.put(testCtx(t), cmdDesc(t, cmd{"table": table, "query_id": "q", "epoch_id": 1}), sc, more)), "committed", 0)
		})
	}
}

// TestNullableDeclaredDataFitsRequiredColumns: a writer that declares every field nullable (as
// Spark does) lands data holding no null in a table whose fields are NOT NULL, on both routes and
// as a keyed update (an upsert); the table keeps its NOT NULL at every level and reads back what
// was sent. The same declaration holding a null is refused, naming the column.
func TestNullableDeclaredDataFitsRequiredColumns(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	required, loose := requiredSchema(false), requiredSchema(true)
	for _, route := range dataRoutes {
		for _, keyed := range []bool{false, true} {
			name := route.name
			create := route.create
			mode := "append"
			if keyed {
				name += "_keyed"
				mode = "update"
				c := cmd{"primary_key": []string{"id"}}
				if m, ok := create.(cmd); ok {
					c["memwal"] = m["memwal"]
				}
				create = c
			}
			t.Run(name, func(t *testing.T) {
				table := "loose_" + name
				first := recordFromJSON(t, required, goodRows)
				defer first.Release()
				wantAck(t, mustAck(t)(s.put(testCtx(t), cmdDesc(t, cmd{"table": table, "query_id": "q", "epoch_id": 0, "create": create, "mode": mode}), required, first)), "committed", 0)

				// The same values, declared nullable at every level.
				sent := recordFromJSON(t, loose, strings.ReplaceAll(strings.ReplaceAll(goodRows, `"id": 1,`, `"id": 11,`), `"id": 3,`, `"id": 13,`))
				defer sent.Release()
				sent2 := recordFromJSON(t, loose, `[{"id": 2, "s": {"child": 20}, "l": [2], "m": [], "d": "2.00", "name": "two"}]`)
				defer sent2.Release()
				a := mustAck(t)(s.put(testCtx(t), cmdDesc(t, cmd{"table": table, "query_id": "q", "epoch_id": 1, "mode": mode}), loose, sent, sent2))
				wantAck(t, a, "committed", 0)

				for _, bad := range []struct{ path, row string }{
					{"id", `{"id": null, "s": null, "l": null, "m": null, "d": null, "name": "x"}`},
					{"s.child", `{"id": 5, "s": {"child": null}, "l": null, "m": null, "d": null, "name": "x"}`},
					{"l.item", `{"id": 5, "s": null, "l": [null], "m": null, "d": null, "name": "x"}`},
				} {
					rec := recordFromJSON(t, loose, "["+bad.row+"]")
					_, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": table, "query_id": "q", "epoch_id": 2, "mode": mode}), loose, rec)
					rec.Release()
					wantReason(t, err, codes.InvalidArgument, "SCHEMA_DATA_MISMATCH")
					if msg := status.Convert(err).Message(); !strings.Contains(msg, `"`+bad.path+`"`) {
						t.Fatalf("the message does not name %q: %s", bad.path, msg)
					}
				}

				if route.name == "memwal" {
					s.foldAll(t, table)
				}
				got, sc := s.rowsJSON(t, table)
				wantRequiredEverywhere(t, sc)
				var rows []map[string]any
				if err := json.Unmarshal([]byte(got), &rows); err != nil {
					t.Fatal(err)
				}
				// A keyed update replaces row 2 of the first epoch with sent2's.
				if want := map[bool]int{false: 7, true: 5}[keyed]; len(rows) != want {
					t.Fatalf("%d rows, want %d: %s", len(rows), want, got)
				}
				for _, id := range []string{`"id":1,`, `"id":3,`, `"id":11,`, `"id":13,`, `"child":20`} {
					if !strings.Contains(got, id) {
						t.Fatalf("row %s is missing: %s", id, got)
					}
				}
			})
		}
	}
}

// mustAck returns a function that passes an ack through and fails t on a DoPut's error.
func mustAck(t testing.TB) func(ack, error) ack {
	return func(a ack, err error) ack {
		t.Helper()
		if err != nil {
			t.Fatalf("DoPut: %v", err)
		}
		return a
	}
}
