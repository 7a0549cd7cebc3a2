package arrowschema

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// byteSource hands out the fuzzer's bytes one at a time; 0 once they run out.
type byteSource struct {
	b []byte
	i int
}

func (s *byteSource) next() byte {
	if s.i >= len(s.b) {
		return 0
	}
	s.i++
	return s.b[s.i-1]
}

// batchGen builds a random schema and batch from a byteSource, recording the path of every value
// it made that breaks what the schema declares (a null in a required field, a decimal past its
// precision, a string that is not UTF-8). Every value it writes lies where the batch shows it: a
// null parent's children are the builders' own nulls, and are not values.
type batchGen struct {
	src     *byteSource
	defects map[string]bool
}

func (g *batchGen) field(name string, depth int) arrow.Field {
	k := g.src.next()
	f := arrow.Field{Name: name, Nullable: k&0x80 != 0}
	kind := int(k & 0x7f % 7)
	if depth >= 3 {
		kind %= 3 // leaves only
	}
	switch kind {
	case 0:
		f.Type = arrow.PrimitiveTypes.Int64
	case 1:
		f.Type = arrow.BinaryTypes.String
	case 2:
		p := int32(g.src.next()%10) + 1
		f.Type = &arrow.Decimal128Type{Precision: p, Scale: int32(g.src.next()) % (p + 1)}
	case 3:
		n := int(g.src.next()%2) + 1
		fs := make([]arrow.Field, n)
		for i := range fs {
			fs[i] = g.field(fmt.Sprintf("c%d", i), depth+1)
		}
		f.Type = arrow.StructOf(fs...)
	case 4:
		f.Type = arrow.ListOfField(g.field("item", depth+1))
	case 5:
		v := g.field("value", depth+1)
		f.Type = arrow.MapOfFields(arrow.Field{Name: "key", Type: arrow.BinaryTypes.String}, v)
	case 6:
		f.Type = arrow.FixedSizeListOfField(2, g.field("item", depth+1))
	}
	return f
}

// loose is dt with every nested field nullable: arrow-go's builders refuse a null in a required
// map value, so batches are built loose and declared strict after (declare).
func loose(dt arrow.DataType) arrow.DataType {
	fs, rebuild := NestedFields(dt)
	if fs == nil {
		return dt
	}
	out := make([]arrow.Field, len(fs))
	for i, f := range fs {
		f.Type, f.Nullable = loose(f.Type), true
		if _, isMap := dt.(*arrow.MapType); isMap && i == 0 {
			f.Nullable = false
		}
		out[i] = f
	}
	return rebuild(out)
}

// declare returns d (a new reference) as type to, the same layout up to nullability.
func declare(d arrow.ArrayData, to arrow.DataType) arrow.ArrayData {
	var children []arrow.ArrayData
	n, _ := to.(arrow.NestedType)
	for i, c := range d.Children() {
		children = append(children, declare(c, n.Fields()[i].Type))
	}
	out := array.NewData(to, d.Len(), d.Buffers(), children, d.NullN(), d.Offset())
	for _, c := range children {
		c.Release()
	}
	return out
}

// value appends one value of field f (at path) to b.
func (g *batchGen) value(b array.Builder, f arrow.Field, path string) {
	k := g.src.next()
	if k%5 == 0 {
		if !f.Nullable {
			g.defects[path] = true
		}
		b.AppendNull()
		return
	}
	switch t := f.Type.(type) {
	case *arrow.Int64Type:
		b.(*array.Int64Builder).Append(int64(k))
	case *arrow.StringType:
		if k%11 == 0 {
			g.defects[path] = true
			b.(*array.StringBuilder).Append(string([]byte{'a', 0xff}))
		} else {
			b.(*array.StringBuilder).Append(strings.Repeat("é", int(k%3)))
		}
	case *arrow.Decimal128Type:
		limit := int64(math.Pow10(int(t.Precision)))
		v := int64(k) % limit
		if k%7 == 0 {
			g.defects[path] = true
			v = limit // one digit too many
		}
		if k%2 == 0 {
			v = -v
		}
		b.(*array.Decimal128Builder).Append(decimal128.FromI64(v))
	case *arrow.StructType:
		sb := b.(*array.StructBuilder)
		sb.Append(true)
		for i, c := range t.Fields() {
			g.value(sb.FieldBuilder(i), c, path+"."+c.Name)
		}
	case *arrow.MapType:
		mb := b.(*array.MapBuilder)
		mb.Append(true)
		for i := 0; i < int(g.src.next()%3); i++ {
			mb.KeyBuilder().(*array.StringBuilder).Append(fmt.Sprint(i))
			g.value(mb.ItemBuilder(), t.ItemField(), path+".entries."+t.ItemField().Name)
		}
	case *arrow.ListType:
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		for i := 0; i < int(g.src.next()%3); i++ {
			g.value(lb.ValueBuilder(), t.ElemField(), path+"."+t.ElemField().Name)
		}
	case *arrow.FixedSizeListType:
		lb := b.(*array.FixedSizeListBuilder)
		lb.Append(true)
		for i := 0; i < int(t.Len()); i++ {
			g.value(lb.ValueBuilder(), t.ElemField(), path+"."+t.ElemField().Name)
		}
	}
}

// batch builds a batch of 1 to 3 columns and 0 to 5 rows.
func (g *batchGen) batch() arrow.RecordBatch {
	fields := make([]arrow.Field, int(g.src.next()%3)+1)
	for i := range fields {
		fields[i] = g.field(fmt.Sprintf("f%d", i), 1)
	}
	looseFields := make([]arrow.Field, len(fields))
	for i, f := range fields {
		looseFields[i] = arrow.Field{Name: f.Name, Type: loose(f.Type), Nullable: true}
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(looseFields, nil))
	defer b.Release()
	rows := int(g.src.next() % 6)
	for r := 0; r < rows; r++ {
		for i, f := range fields {
			g.value(b.Field(i), f, f.Name)
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	cols := make([]arrow.Array, len(fields))
	for i, f := range fields {
		d := declare(rec.Column(i).Data(), f.Type)
		cols[i] = array.MakeFromData(d)
		d.Release()
		defer cols[i].Release()
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, int64(rows))
}

// refDefect is a plain reference for CheckBatch's value rules, read value by value: the path of
// a value of rec that breaks its declaration, or "". rec's layout must hold.
func refDefect(rec arrow.RecordBatch) string {
	var at func(f arrow.Field, arr arrow.Array, i int, path string) string
	at = func(f arrow.Field, arr arrow.Array, i int, path string) string {
		if arr.IsNull(i) {
			if !f.Nullable {
				return path
			}
			return "" // a null parent's children are no values
		}
		switch a := arr.(type) {
		case *array.String:
			if !utf8.ValidString(a.Value(i)) {
				return path
			}
		case *array.Decimal128:
			if !a.Value(i).FitsInPrecision(a.DataType().(*arrow.Decimal128Type).Precision) {
				return path
			}
		case *array.Struct:
			for j, c := range a.DataType().(*arrow.StructType).Fields() {
				if d := at(c, a.Field(j), i, path+"."+c.Name); d != "" {
					return d
				}
			}
		case array.ListLike:
			elem := a.DataType().(arrow.ListLikeType).ElemField()
			start, end := a.ValueOffsets(i)
			for j := start; j < end; j++ {
				if d := at(elem, a.ListValues(), int(j), path+"."+elem.Name); d != "" {
					return d
				}
			}
		}
		return ""
	}
	for c, col := range rec.Columns() {
		f := rec.Schema().Field(c)
		for i := 0; i < col.Len(); i++ {
			if d := at(f, col, i, f.Name); d != "" {
				return d
			}
		}
	}
	return ""
}

func encodeIPC(t *testing.T, rec arrow.RecordBatch) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(rec.Schema()))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readIPC reads every batch of b through OpenIPC (the guard, the decoder, CheckBatch).
func readIPC(b []byte) ([]arrow.RecordBatch, error) {
	r, err := OpenIPC(b, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	defer r.Release()
	var out []arrow.RecordBatch
	for r.Next() {
		rec := r.RecordBatch()
		rec.Retain()
		out = append(out, rec)
	}
	if err := r.Err(); err != nil {
		ReleaseBatches(out)
		return nil, err
	}
	return out, nil
}

// FuzzSchemaDataAgreement: a generated batch (random nesting of structs, lists, maps and
// fixed-size lists over int64, utf8 and decimal, random nullability, values that may break it)
// is refused by CheckBatch with ErrDataMismatch naming a field that holds a defect, exactly when
// it holds one; an accepted batch round-trips through IPC and OpenIPC unchanged. The same batch's
// IPC bytes, mutated by the fuzzer, are read through OpenIPC: never a panic, and a batch it
// yields has passed CheckBatch, holds no defect (refDefect) and round-trips again unchanged.
func FuzzSchemaDataAgreement(f *testing.F) {
	for _, seed := range [][]byte{
		{0x00, 0x03, 0x07},             // one required int64, 3 rows
		{0x80, 0x05, 0x01, 0x02},       // one nullable int64
		{0x01, 0x83, 0x00, 0x00, 0x04}, // a struct of a required int64: nulls at the top and below
		{0x00, 0x84, 0x00, 0x04, 0x05, 0x01, 0x02, 0x03, 0x02, 0x05, 0x06},
		{0x02, 0x85, 0x00, 0x01, 0x04, 0x03, 0x01, 0x02, 0x05, 0x02, 0x07, 0x0b},
		{0x00, 0x02, 0x05, 0x02, 0x05, 0x07, 0x0e, 0x15, 0x03},       // decimal(6, 2) with values past it
		{0x00, 0x01, 0x04, 0x0b, 0x16, 0x21, 0x01},                   // strings, some not UTF-8
		{0x00, 0x86, 0x00, 0x05, 0x01, 0x05, 0x02, 0x01, 0x03, 0x04}, // a fixed-size list of required items
		{0x01, 0x85, 0x82, 0x03, 0x01, 0x04, 0x01, 0x02, 0x07, 0x09, 0x0a, 0x0b, 0xff, 0x10, 0x20},
	} {
		f.Add(seed, []byte{})
		f.Add(seed, []byte{0x30, 0xff, 0x61, 0x00, 0x90, 0x7f})
	}
	f.Fuzz(func(t *testing.T, gen, mutate []byte) {
		g := &batchGen{src: &byteSource{b: gen}, defects: map[string]bool{}}
		rec := g.batch()
		defer rec.Release()
		err := CheckBatch(rec)
		if len(g.defects) > 0 {
			if !errors.Is(err, ErrDataMismatch) {
				t.Fatalf("a batch holding defects at %v: CheckBatch = %v, want ErrDataMismatch", g.defects, err)
			}
			named := false
			for p := range g.defects {
				named = named || strings.Contains(err.Error(), fmt.Sprintf("%q", p))
			}
			if !named || !utf8.ValidString(err.Error()) {
				t.Fatalf("the refusal %q names none of the defects %v", err, g.defects)
			}
			if d := refDefect(rec); d == "" {
				t.Fatalf("the reference finds no defect in a batch holding %v", g.defects)
			}
		} else {
			if err != nil {
				t.Fatalf("a batch without defects (%s) refused: %v", rec.Schema(), err)
			}
			if d := refDefect(rec); d != "" {
				t.Fatalf("the reference finds a defect at %q the generator did not make", d)
			}
			back, err := readIPC(encodeIPC(t, rec))
			if err != nil {
				t.Fatalf("an accepted batch read back through OpenIPC: %v", err)
			}
			if len(back) != 1 || !array.RecordEqual(back[0], rec) {
				t.Fatalf("an accepted batch did not round-trip: sent %v, read %v", rec, back)
			}
			ReleaseBatches(back)
		}

		if len(mutate) == 0 {
			return
		}
		b := encodeIPC(t, rec)
		for i := 0; i+1 < len(mutate); i += 2 {
			b[int(mutate[i])*len(b)/256] ^= mutate[i+1]
		}
		got, err := readIPC(b)
		if err != nil {
			return // refused: by the guard, the decoder or CheckBatch
		}
		defer ReleaseBatches(got)
		for _, r := range got {
			if d := refDefect(r); d != "" {
				t.Fatalf("OpenIPC yielded a batch holding a defect at %q", d)
			}
			again, err := readIPC(encodeIPC(t, r))
			if err != nil {
				t.Fatalf("a batch OpenIPC accepted, written again, is refused: %v", err)
			}
			if len(again) != 1 || !array.RecordEqual(again[0], r) {
				t.Fatalf("a batch OpenIPC accepted did not round-trip")
			}
			ReleaseBatches(again)
		}
	})
}
