package arrowschema

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// ErrDataMismatch: a batch's data does not agree with the schema it declares: a null in a column
// (or nested field) declared not null, a decimal value with more digits than its declared
// precision, a string that is not UTF-8, offsets or lengths that do not describe the buffers. It
// wraps ErrSchemaMismatch and reads "data does not fit its schema"; the error's identity tells
// the two apart.
var ErrDataMismatch error = dataMismatch{}

type dataMismatch struct{}

func (dataMismatch) Error() string { return "data does not fit its schema" }
func (dataMismatch) Unwrap() error { return ErrSchemaMismatch }

// CheckBatch verifies that the data of rec agrees with the schema rec declares, at every nesting
// level, before anything stores it: IPCStreamGuard checks the messages a batch is decoded from,
// CheckBatch the decoded batch. It requires
//   - every array's layout to hold (arrow-go's ValidateFull: buffer sizes, offsets in range and
//     non-decreasing, lengths and null counts that match, dictionary indices in range);
//   - every string (utf8, large_utf8, utf8_view) to be valid UTF-8;
//   - no null where a field is declared not null: a top-level column's rows, a struct's fields
//     in the rows where the struct is valid, a list's (or map's) items inside its valid rows. A
//     value under a null parent is no value: a null there is allowed (Spark writes one);
//   - every decimal value a field holds to fit the field's declared precision.
//
// An error wraps ErrDataMismatch and names the column, with the dotted path of a nested field
// ("s.child", "l.item", "m.entries.value"). A panic of arrow-go while validating is such an
// error too. Every batch a client sends passes CheckBatch (StoreBatch runs it) and so does every
// batch read back from a WAL entry, a generation or a stage (CheckedIPCReader), so nothing
// stores, and no fold meets, a batch whose data its schema does not describe.
func CheckBatch(rec arrow.RecordBatch) error {
	if err := checkLayout(rec); err != nil {
		return err
	}
	return checkValues(rec)
}

// checkLayout checks that every column of rec is an array of its declared type and the batch's
// length whose buffers describe it (ValidateFull, and checkEmptyOffsets for what that leaves out).
func checkLayout(rec arrow.RecordBatch) (err error) {
	sc := rec.Schema()
	column := ""
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: column %q could not be validated: %s", ErrDataMismatch, column, validUTF8(fmt.Sprint(r)))
		}
	}()
	if int(rec.NumCols()) != sc.NumFields() {
		return fmt.Errorf("%w: the batch has %d columns, its schema %d", ErrDataMismatch, rec.NumCols(), sc.NumFields())
	}
	for i, col := range rec.Columns() {
		f := sc.Field(i)
		column = f.Name
		if !arrow.TypeEqual(col.DataType(), f.Type) {
			return fmt.Errorf("%w: column %q holds %s data but is declared %s", ErrDataMismatch, f.Name, col.DataType(), f.Type)
		}
		if int64(col.Len()) != rec.NumRows() {
			return fmt.Errorf("%w: column %q has %d rows in a batch of %d", ErrDataMismatch, f.Name, col.Len(), rec.NumRows())
		}
		if err := validateFull(col); err != nil {
			path, msg := layoutErrorPath(f, err)
			return fmt.Errorf("%w: column %q: %s", ErrDataMismatch, path, msg)
		}
		if err := checkEmptyOffsets(f.Name, col.Data()); err != nil {
			return err
		}
	}
	return nil
}

// validateFull is arrow-go's ValidateFull for arr. arrow-go's builders make run-end-encoded
// arrays without the (always absent) validity buffer slot its validation and its IPC reader
// give them: such an array is validated with the slot.
func validateFull(arr arrow.Array) error {
	if !hasREE(arr.DataType()) {
		return array.ValidateFull(arr)
	}
	d := withREESlots(arr.Data())
	defer d.Release()
	a := array.MakeFromData(d)
	defer a.Release()
	return array.ValidateFull(a)
}

// hasREE reports whether dt is or nests a run-end-encoded type.
func hasREE(dt arrow.DataType) bool {
	if dt.ID() == arrow.RUN_END_ENCODED {
		return true
	}
	for _, f := range childFields(dt) {
		if hasREE(f.Type) {
			return true
		}
	}
	return false
}

// withREESlots returns d (a new reference) with a validity buffer slot on every run-end-encoded
// array in it that lacks one.
func withREESlots(d arrow.ArrayData) arrow.ArrayData {
	children := make([]arrow.ArrayData, len(d.Children()))
	for i, c := range d.Children() {
		children[i] = withREESlots(c)
	}
	defer func() {
		for _, c := range children {
			c.Release()
		}
	}()
	bufs := d.Buffers()
	if d.DataType().ID() == arrow.RUN_END_ENCODED && len(bufs) == 0 {
		bufs = []*memory.Buffer{nil}
	}
	nd := array.NewData(d.DataType(), d.Len(), bufs, children, d.NullN(), d.Offset())
	if dict := d.Dictionary(); dict != nil {
		nd.SetDictionary(dict)
	}
	return nd
}

// checkEmptyOffsets checks what ValidateFull leaves out: the offsets buffer of an empty array of
// offsets (a string, binary, list or map with no rows, at any nesting level) is empty or holds
// the one offset, and that offset lies inside its values, since the IPC writer slices them from
// it. d is the array of the field at path.
func checkEmptyOffsets(path string, d arrow.ArrayData) error {
	if d.Len() == 0 {
		var width, limit int
		bufs := d.Buffers()
		switch d.DataType().ID() {
		case arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY:
			width = 4
			if id := d.DataType().ID(); id == arrow.LARGE_STRING || id == arrow.LARGE_BINARY {
				width = 8
			}
			if len(bufs) > 2 && bufs[2] != nil {
				limit = bufs[2].Len()
			}
		case arrow.LIST, arrow.MAP, arrow.LARGE_LIST:
			width = 4
			if d.DataType().ID() == arrow.LARGE_LIST {
				width = 8
			}
			if len(d.Children()) == 1 {
				limit = d.Children()[0].Len()
			}
		}
		if width > 0 && len(bufs) > 1 && bufs[1] != nil && bufs[1].Len() > 0 && bufs[1].Len() < width*(d.Offset()+1) {
			// Neither no offsets nor the one: the writer reads one there.
			return fmt.Errorf("%w: column %q: an empty array's offsets buffer holds %d bytes, less than one offset", ErrDataMismatch, path, bufs[1].Len())
		}
		if width > 0 && len(bufs) > 1 && bufs[1] != nil && bufs[1].Len() >= width*(d.Offset()+1) {
			b := bufs[1].Bytes()[width*d.Offset():]
			first := int64(int32(binary.LittleEndian.Uint32(b)))
			if width == 8 {
				first = int64(binary.LittleEndian.Uint64(b))
			}
			if first < 0 || first > int64(limit) {
				return fmt.Errorf("%w: column %q: an empty array's offset %d is outside its %d values", ErrDataMismatch, path, first, limit)
			}
		}
	}
	for i, c := range d.Children() {
		child := path
		if name, _ := validationChild(d.DataType(), childSegment(d.DataType(), i)); name != "" {
			child += "." + name
		}
		if err := checkEmptyOffsets(child, c); err != nil {
			return err
		}
	}
	return nil
}

// childSegment is the ValidateFull path segment of child i of an array of type dt.
func childSegment(dt arrow.DataType, i int) string {
	if st, ok := dt.(*arrow.StructType); ok && i < st.NumFields() {
		return fmt.Sprintf("field %q", st.Field(i).Name)
	}
	switch dt.ID() {
	case arrow.LIST, arrow.LARGE_LIST, arrow.FIXED_SIZE_LIST:
		return "list values"
	case arrow.MAP:
		return "map entries"
	}
	return fmt.Sprintf("child %d", i)
}

// layoutErrorPath turns a ValidateFull error on column f into the dotted path of the field it
// names and its message, with no value in it: arrow-go quotes an invalid string whole, and a
// status message must be UTF-8 and short.
func layoutErrorPath(f arrow.Field, err error) (path, msg string) {
	full := err.Error()
	inner := full
	for e := err; e != nil; {
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		next := u.Unwrap()
		if next == nil {
			break
		}
		inner, e = next.Error(), next
	}
	path = f.Name
	if p := strings.TrimSuffix(full, ": "+inner); p != full {
		dt := f.Type
		for _, seg := range strings.Split(p, " -> ") {
			name, child := validationChild(dt, seg)
			if name != "" {
				path += "." + name
			}
			dt = child
		}
	}
	msg = strings.TrimPrefix(inner, "arrow/array: ")
	if i := strings.Index(msg, "is not valid utf8"); i >= 0 {
		msg = msg[:i] + "is not valid UTF-8"
	}
	return path, validUTF8(msg)
}

// validationChild reads one segment of a ValidateFull path below a field of type dt: the name of
// the child field it names ("" for a step that is no field: an extension's storage, a
// dictionary) and the child's type (nil when unknown).
func validationChild(dt arrow.DataType, seg string) (string, arrow.DataType) {
	if dt == nil {
		return "", nil
	}
	if ext, ok := dt.(arrow.ExtensionType); ok {
		dt = ext.StorageType()
	}
	switch {
	case strings.HasPrefix(seg, "field "):
		name, err := strconv.Unquote(strings.TrimPrefix(seg, "field "))
		if st, ok := dt.(*arrow.StructType); ok && err == nil {
			if i, ok := st.FieldIdx(name); ok {
				return name, st.Field(i).Type
			}
		}
		return name, nil
	case seg == "list values" || seg == "list view values" || seg == "map entries":
		if l, ok := dt.(arrow.ListLikeType); ok {
			return l.ElemField().Name, l.Elem()
		}
	case seg == "dictionary":
		if d, ok := dt.(*arrow.DictionaryType); ok {
			return "", d.ValueType
		}
	case seg == "storage":
		return "", dt
	case strings.HasPrefix(seg, "child "):
		if n, ok := dt.(arrow.NestedType); ok {
			if i, err := strconv.Atoi(strings.TrimPrefix(seg, "child ")); err == nil && i >= 0 && i < len(n.Fields()) {
				return n.Fields()[i].Name, n.Fields()[i].Type
			}
		}
	}
	return "", nil
}

// validUTF8 is s with every invalid byte sequence replaced.
func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// checkValues checks the nullability and decimal precision rec's schema declares against its
// values (CheckBatch). rec's layout must hold (checkLayout).
func checkValues(rec arrow.RecordBatch) (err error) {
	sc := rec.Schema()
	column := ""
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: column %q could not be validated: %s", ErrDataMismatch, column, validUTF8(fmt.Sprint(r)))
		}
	}()
	for i, col := range rec.Columns() {
		f := sc.Field(i)
		column = f.Name
		if err := checkArray(f.Name, f.Nullable, col, nil, true); err != nil {
			return err
		}
	}
	return nil
}

// checkArray checks the values of arr, the array of a field at path (nullable as declared):
// those at the indices vis marks (nil: every index) are values; the others lie under a null
// parent or outside every row of it. top says arr is a column, its indices rows.
func checkArray(path string, nullable bool, arr arrow.Array, vis []bool, top bool) error {
	if !nullable && arr.NullN() > 0 {
		for i := 0; i < arr.Len(); i++ {
			if arr.IsNull(i) && (vis == nil || vis[i]) {
				where := fmt.Sprintf("at index %d of its values", i)
				if top {
					where = fmt.Sprintf("in row %d", i)
				}
				return fmt.Errorf("%w: column %q is declared not null but holds a null %s", ErrDataMismatch, path, where)
			}
		}
	}
	switch a := arr.(type) {
	case *array.Struct:
		cvis := validIndices(a, vis)
		st := a.DataType().(*arrow.StructType)
		for j, f := range st.Fields() {
			if err := checkArray(path+"."+f.Name, f.Nullable, a.Field(j), cvis, false); err != nil {
				return err
			}
		}
	case array.ListLike: // list, large_list, fixed_size_list, map, list views
		elem := a.DataType().(arrow.ListLikeType).ElemField()
		values := a.ListValues()
		cvis := itemIndices(a, values.Len(), vis)
		return checkArray(path+"."+elem.Name, elem.Nullable, values, cvis, false)
	case array.ExtensionArray:
		return checkArray(path, nullable, a.Storage(), vis, top)
	case *array.Dictionary:
		dict := a.Dictionary()
		dvis := make([]bool, dict.Len())
		for i := 0; i < a.Len(); i++ {
			if (vis == nil || vis[i]) && a.IsValid(i) {
				dvis[a.GetValueIndex(i)] = true
			}
		}
		return checkArray(path, nullable, dict, dvis, false)
	case *array.RunEndEncoded:
		values := a.Values()
		rvis := make([]bool, values.Len())
		for i := 0; i < a.Len(); i++ {
			if vis == nil || vis[i] {
				rvis[a.GetPhysicalIndex(i)] = true
			}
		}
		return checkArray(path, nullable, values, rvis, false)
	case *array.Decimal128:
		p := a.DataType().(*arrow.Decimal128Type).Precision
		return checkDecimals(path, a, vis, p, func(i int) bool { return a.Value(i).FitsInPrecision(p) })
	case *array.Decimal256:
		p := a.DataType().(*arrow.Decimal256Type).Precision
		return checkDecimals(path, a, vis, p, func(i int) bool { return a.Value(i).FitsInPrecision(p) })
	case *array.Decimal64:
		p := a.DataType().(*arrow.Decimal64Type).Precision
		return checkDecimals(path, a, vis, p, func(i int) bool { return a.Value(i).FitsInPrecision(p) })
	case *array.Decimal32:
		p := a.DataType().(*arrow.Decimal32Type).Precision
		return checkDecimals(path, a, vis, p, func(i int) bool { return a.Value(i).FitsInPrecision(p) })
	}
	return nil
}

// checkDecimals refuses a value of arr (at an index vis marks) that does not fit precision p.
func checkDecimals(path string, arr arrow.Array, vis []bool, p int32, fits func(int) bool) error {
	for i := 0; i < arr.Len(); i++ {
		if (vis == nil || vis[i]) && arr.IsValid(i) && !fits(i) {
			return fmt.Errorf("%w: column %q is declared %s but holds a value with more than %d digits (index %d)",
				ErrDataMismatch, path, arr.DataType(), p, i)
		}
	}
	return nil
}

// validIndices marks the indices of arr that hold a value: those vis marks (nil: all) where arr
// itself is valid. nil when that is every index.
func validIndices(arr arrow.Array, vis []bool) []bool {
	if vis == nil && arr.NullN() == 0 {
		return nil
	}
	out := make([]bool, arr.Len())
	for i := range out {
		out[i] = (vis == nil || vis[i]) && arr.IsValid(i)
	}
	return out
}

// itemIndices marks the indices of a list's values (n of them) that are items of a row the list
// holds a value in (vis, as validIndices); nil when that is every index.
func itemIndices(a array.ListLike, n int, vis []bool) []bool {
	if vis == nil && a.NullN() == 0 && a.Len() > 0 && !isView(a) {
		first, _ := a.ValueOffsets(0)
		_, last := a.ValueOffsets(a.Len() - 1)
		if first == 0 && last == int64(n) {
			return nil
		}
	}
	out := make([]bool, n)
	for i := 0; i < a.Len(); i++ {
		if (vis == nil || vis[i]) && a.IsValid(i) {
			start, end := a.ValueOffsets(i)
			for j := start; j < end; j++ {
				out[j] = true
			}
		}
	}
	return out
}

// isView reports whether a is a list view, whose rows may skip items or share them, rather than
// a list (or map) whose rows lay their items out one after another.
func isView(a array.ListLike) bool {
	switch a.(type) {
	case *array.ListView, *array.LargeListView:
		return true
	}
	return false
}

// CheckedIPCReader reads an Arrow IPC stream held in memory whose messages passed
// CheckIPCStream, and stops at the first batch that fails CheckBatch: Err then returns that
// batch's error. OpenIPC makes one.
type CheckedIPCReader struct {
	*ipc.Reader
	err error
}

// OpenIPC opens b, an Arrow IPC stream held in memory (a WAL entry, a generation file, a stage's
// rows), for reading; the caller releases the reader. arrow-go sizes allocations by what the bytes
// claim, so every message's flatbuffer is checked first (CheckIPCStream, the guard DoPut applies
// to the wire), every message is bounded by the stream's own size, and every batch the reader
// yields has passed CheckBatch: stored bytes are read with the same distrust as the wire.
func OpenIPC(b []byte, alloc memory.Allocator) (*CheckedIPCReader, error) {
	if err := CheckIPCStream(b, IPCStreamGuard{}); err != nil {
		return nil, err
	}
	limit := int64(len(b))
	mr := ipc.NewMessageReader(bytes.NewReader(b), ipc.WithAllocator(alloc),
		ipc.WithMetadataSizeLimit(limit), ipc.WithBodySizeLimit(limit)) // ipc.NewReader ignores the limits
	r, err := ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(alloc))
	if err != nil {
		return nil, err
	}
	return &CheckedIPCReader{Reader: r}, nil
}

// Next reads the next batch and checks it (CheckBatch); false at the end or on an error (Err).
func (r *CheckedIPCReader) Next() bool {
	if r.err != nil || !r.Reader.Next() {
		return false
	}
	if err := CheckBatch(r.Reader.RecordBatch()); err != nil {
		r.err = err
		return false
	}
	return true
}

// Err returns the error that stopped the reader: a batch that failed CheckBatch, or arrow-go's.
func (r *CheckedIPCReader) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.Reader.Err()
}
