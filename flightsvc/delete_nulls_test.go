package flightsvc_test

// Deletions over nulls, for every stored type: a table of one column of the type (nulls at every
// level its sample has) beside string columns with nulls, rows deleted by a predicate on nulls,
// read back through every read path. Selecting the surviving rows of such batches once panicked
// in arrow-go's string Take kernel, in a goroutine of its own: the whole process died.

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/typetest"
	"github.com/flight-sink/flight-sink/flightsvc"
)

// deleteNullsRows is the number of rows of each table: enough that the string columns' buffers
// are pooled ones (4 KiB and up).
const deleteNullsRows = 3000

// deleteNullsBatch builds the table's one epoch: id, c (row id holds the sample's row id%3),
// s (utf8, null when id%5 == 0) and name (utf8, null when id%7 == 3).
func deleteNullsBatch(t *testing.T, smp typetest.Sample) arrow.RecordBatch {
	t.Helper()
	one, err := smp.Rows(smp.Type)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Release()
	copies := make([]arrow.Array, deleteNullsRows/typetest.Len)
	for i := range copies {
		copies[i] = one
	}
	c, err := array.Concatenate(copies, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "c", Type: smp.Type, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	ib := array.NewInt64Builder(memory.DefaultAllocator)
	sb := array.NewStringBuilder(memory.DefaultAllocator)
	nb := array.NewStringBuilder(memory.DefaultAllocator)
	for i := range deleteNullsRows {
		ib.Append(int64(i))
		if i%5 == 0 {
			sb.AppendNull()
		} else {
			sb.Append(fmt.Sprintf("country-%d", i%37))
		}
		if i%7 == 3 {
			nb.AppendNull()
		} else {
			nb.Append(fmt.Sprintf("name-%d", i*i))
		}
	}
	cols := []arrow.Array{ib.NewArray(), c, sb.NewArray(), nb.NewArray()}
	for _, b := range []array.Builder{ib, sb, nb} {
		b.Release()
	}
	defer func() {
		for i, a := range cols {
			if i != 1 {
				a.Release()
			}
		}
	}()
	return array.NewRecordBatch(sc, cols, deleteNullsRows)
}

// TestDeleteNullsEveryType: for every stored type, one epoch, a delete of the rows where s is null
// or (c is null and id < half), then every read path - DoGet of the table, GetFlightInfo's
// endpoints, a filtered read (a predicate on nulls), projected reads - returns exactly the rows
// that survive, each column equal to what was written (c as its stored type), and the server
// keeps serving.
func TestDeleteNullsEveryType(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	const half = deleteNullsRows / 2
	for _, smp := range typeSamples(t) {
		inSchema := arrow.NewSchema([]arrow.Field{{Name: "c", Type: smp.Type, Nullable: true}}, nil)
		stored, err := arrowschema.StoredSchema(inSchema)
		if err != nil {
			continue // refused on the way in (TestArrowTypes)
		}
		t.Run(smp.Name, func(t *testing.T) {
			table := "dn-" + smp.Name
			want, err := smp.Rows(stored.Field(0).Type)
			if err != nil {
				t.Fatal(err)
			}
			defer want.Release()
			rec := deleteNullsBatch(t, smp)
			defer rec.Release()
			if _, err := s.put(testCtx(t), cmdDesc(t, epochCmd(table, "q", 0)), rec.Schema(), rec); err != nil {
				t.Fatalf("put: %v", err)
			}
			s.mustAction(t, "delete", cmd{"table": table, "where": cmd{"op": "or", "args": []cmd{
				{"op": "is_null", "column": "s"},
				{"op": "and", "args": []cmd{{"op": "is_null", "column": "c"}, {"op": "<", "column": "id", "value": half}}},
			}}}, nil)
			var live []int64
			for id := range int64(deleteNullsRows) {
				if id%5 != 0 && (want.IsValid(int(id%typetest.Len)) || id >= half) {
					live = append(live, id)
				}
			}
			check := func(when string, tk any, wantIDs []int64) {
				t.Helper()
				got := readDeleteNulls(t, &s.flightConn, tk, want)
				if !slices.Equal(got, wantIDs) {
					t.Fatalf("%s: %d rows %s, want %d: %s", when, len(got), abbrev(got), len(wantIDs), abbrev(wantIDs))
				}
			}
			check("DoGet", cmd{"table": table}, live)
			check("DoGet of c and id", cmd{"table": table, "columns": []string{"c", "id"}}, live)
			var named []int64
			for _, id := range live {
				if id >= half && id%7 != 3 {
					named = append(named, id)
				}
			}
			check("filtered DoGet", cmd{"table": table, "filter": cmd{"op": "and", "args": []cmd{
				{"op": ">=", "column": "id", "value": half}, {"op": "is_not_null", "column": "name"}}}}, named)
			info, err := s.Client.GetFlightInfo(testCtx(t), cmdDesc(t, cmd{"table": table}))
			if err != nil {
				t.Fatalf("GetFlightInfo: %v", err)
			}
			var all []int64
			for _, ep := range info.Endpoint {
				all = append(all, readDeleteNulls(t, &s.flightConn, ep.Ticket.Ticket, want)...)
			}
			slices.Sort(all)
			if !slices.Equal(all, live) {
				t.Fatalf("endpoints: %d rows, want %d", len(all), len(live))
			}
			if r, err := s.get(testCtx(t), cmd{"table": table, "columns": []string{"name"}}); err != nil || r.Rows != int64(len(live)) {
				t.Fatalf("DoGet of name: %d rows, %v; want %d", r.Rows, err, len(live))
			}
		})
	}
	s.putEpoch(t, "alive", "q", 0, []int64{1, 2}) // the server still serves
	s.wantIDs(t, "alive", []int64{1, 2})
}

// readDeleteNulls reads a ticket (JSON-encoded unless []byte) to the end and returns its ids,
// sorted, checking every row's columns: c equal to want's row id%3 (relabelled with the read
// type's field ids), s and name as deleteNullsBatch wrote them.
func readDeleteNulls(t *testing.T, c *flightConn, tk any, want arrow.Array) []int64 {
	t.Helper()
	b, ok := tk.([]byte)
	if !ok {
		b = cmdDesc(t, tk).Cmd
	}
	stream, err := c.Client.DoGet(testCtx(t), &flight.Ticket{Ticket: b})
	if err != nil {
		t.Fatalf("DoGet %s: %v", b, err)
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		t.Fatalf("DoGet %s: %v", b, err)
	}
	defer rdr.Release()
	sc := rdr.Schema()
	col := func(name string) int {
		if js := sc.FieldIndices(name); len(js) == 1 {
			return js[0]
		}
		return -1
	}
	idCol, cCol, sCol, nameCol := col("id"), col("c"), col("s"), col("name")
	if idCol < 0 {
		t.Fatalf("DoGet %s: no id column in %s", b, sc)
	}
	var wantRel arrow.Array
	if cCol >= 0 {
		rel, err := arrowschema.ConformColumns(arrow.NewSchema([]arrow.Field{sc.Field(cCol)}, nil), []arrow.Array{want}, int64(want.Len()))
		if err != nil {
			t.Fatal(err)
		}
		defer rel.Release()
		wantRel = rel.Column(0)
	}
	var ids []int64
	for rdr.Next() {
		rec := rdr.RecordBatch()
		idc := rec.Column(idCol).(*array.Int64)
		for i := range int(rec.NumRows()) {
			id := idc.Value(i)
			ids = append(ids, id)
			if cCol >= 0 && !array.SliceEqual(rec.Column(cCol), int64(i), int64(i+1), wantRel, id%typetest.Len, id%typetest.Len+1) {
				got := array.NewSlice(rec.Column(cCol), int64(i), int64(i+1))
				t.Fatalf("DoGet %s: row %d: c = %v, want row %d of %v", b, id, got, id%typetest.Len, wantRel)
			}
			if sCol >= 0 {
				if v := rec.Column(sCol).(*array.String); v.IsNull(i) || v.Value(i) != fmt.Sprintf("country-%d", id%37) {
					t.Fatalf("DoGet %s: row %d: s = %q (null %v)", b, id, v.Value(i), v.IsNull(i))
				}
			}
			if nameCol >= 0 {
				v := rec.Column(nameCol).(*array.String)
				if null := id%7 == 3; v.IsNull(i) != null || (!null && v.Value(i) != fmt.Sprintf("name-%d", id*id)) {
					t.Fatalf("DoGet %s: row %d: name = %q (null %v)", b, id, v.Value(i), v.IsNull(i))
				}
			}
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("DoGet %s: %v", b, err)
	}
	slices.Sort(ids)
	return ids
}
