package partition

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// Value is one partition value: a transform's result for a row, typed as Iceberg types it. The
// zero Value is null (Type ""). Which field holds the value depends on Type:
//
//	int, long              Int
//	date                   Int: days since 1970-01-01
//	time                   Int: microseconds since midnight
//	timestamp, timestamptz Int: microseconds since 1970-01-01 00:00 UTC
//	boolean                Bool
//	string                 Bytes: the UTF-8 bytes
//	binary, fixed[L], uuid Bytes (a uuid's 16 bytes in order)
//	decimal(P, S)          Decimal: the unscaled value
//
// year, month, day, hour and bucket values are int (years, months, days, hours since 1970, a
// bucket number); identity and truncate values have the source column's type.
//
// JSON: null, or {"type": T, "value": V} where V is a number (int, long, date, time, timestamps:
// the integer above), a boolean, a string (string), a hex string (binary, fixed, uuid) or the
// decimal's text ("14.20").
type Value struct {
	Type    string
	Int     int64
	Bool    bool
	Bytes   []byte
	Decimal decimal128.Num
}

// Tuple is a fragment's partition: one Value per field of the table's spec, in field order.
type Tuple []Value

// IsNull reports whether v is null.
func (v Value) IsNull() bool { return v.Type == "" }

// String returns v as text for messages and listings: null, the integer, the string, hex bytes or
// the decimal.
func (v Value) String() string {
	switch {
	case v.IsNull():
		return "null"
	case v.Type == "boolean":
		return fmt.Sprint(v.Bool)
	case v.Type == "string":
		return string(v.Bytes)
	case isBytesType(v.Type):
		return hex.EncodeToString(v.Bytes)
	case strings.HasPrefix(v.Type, "decimal("):
		return v.Decimal.ToString(decimalScale(v.Type))
	}
	return fmt.Sprint(v.Int)
}

// String returns the tuple as text: its values in brackets.
func (t Tuple) String() string {
	parts := make([]string, len(t))
	for i, v := range t {
		parts[i] = v.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Key returns a string that is equal for two tuples of one spec exactly when their values are.
func (t Tuple) Key() string {
	var b []byte
	for _, v := range t {
		b = v.appendKey(b)
	}
	return string(b)
}

// Equal reports whether t and o hold the same values.
func (t Tuple) Equal(o Tuple) bool {
	if len(t) != len(o) {
		return false
	}
	for i := range t {
		if Compare(t[i], o[i]) != 0 || t[i].Type != o[i].Type {
			return false
		}
	}
	return true
}

// Compare orders two values of one partition field: null first, then by value (integers
// numerically, strings by code point, bytes unsigned, false before true, decimals numerically).
func Compare(a, b Value) int {
	switch {
	case a.IsNull() || b.IsNull():
		return cmp.Compare(boolInt(!a.IsNull()), boolInt(!b.IsNull()))
	case a.Type == "boolean":
		return cmp.Compare(boolInt(a.Bool), boolInt(b.Bool))
	case a.Type == "string" || isBytesType(a.Type):
		return bytes.Compare(a.Bytes, b.Bytes)
	case strings.HasPrefix(a.Type, "decimal("):
		return a.Decimal.Cmp(b.Decimal)
	}
	return cmp.Compare(a.Int, b.Int)
}

// CompareTuples orders tuples field by field (Compare).
func CompareTuples(a, b Tuple) int {
	for i := range min(len(a), len(b)) {
		if c := Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func isBytesType(t string) bool {
	return t == "binary" || t == "uuid" || strings.HasPrefix(t, "fixed[")
}

// decimalScale reads S of "decimal(P, S)" (0 when t is not of that form).
func decimalScale(t string) int32 {
	var p, s int32
	if _, err := fmt.Sscanf(t, "decimal(%d, %d)", &p, &s); err != nil {
		return 0
	}
	return s
}

// appendKey appends an encoding of v to dst that is unique among the values of one field.
func (v Value) appendKey(dst []byte) []byte {
	if v.IsNull() {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	switch {
	case v.Type == "boolean":
		return append(dst, byte(boolInt(v.Bool)))
	case v.Type == "string" || isBytesType(v.Type):
		dst = binary.AppendUvarint(dst, uint64(len(v.Bytes)))
		return append(dst, v.Bytes...)
	case strings.HasPrefix(v.Type, "decimal("):
		dst = binary.LittleEndian.AppendUint64(dst, uint64(v.Decimal.HighBits()))
		return binary.LittleEndian.AppendUint64(dst, v.Decimal.LowBits())
	}
	return binary.LittleEndian.AppendUint64(dst, uint64(v.Int))
}

type valueJSON struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

// MarshalJSON writes null or {"type": T, "value": V} (Value).
func (v Value) MarshalJSON() ([]byte, error) {
	if v.IsNull() {
		return []byte("null"), nil
	}
	var raw any
	switch {
	case v.Type == "boolean":
		raw = v.Bool
	case v.Type == "string":
		raw = string(v.Bytes)
	case isBytesType(v.Type):
		raw = hex.EncodeToString(v.Bytes)
	case strings.HasPrefix(v.Type, "decimal("):
		raw = v.Decimal.ToString(decimalScale(v.Type))
	default:
		raw = v.Int
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(valueJSON{Type: v.Type, Value: b})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (v *Value) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		*v = Value{}
		return nil
	}
	var j valueJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("partition value: %v", err)
	}
	if j.Type == "" {
		return fmt.Errorf("partition value %s has no type", b)
	}
	out := Value{Type: j.Type}
	var err error
	switch {
	case j.Type == "boolean":
		err = json.Unmarshal(j.Value, &out.Bool)
	case j.Type == "string":
		var s string
		err = json.Unmarshal(j.Value, &s)
		out.Bytes = []byte(s)
	case isBytesType(j.Type):
		var s string
		if err = json.Unmarshal(j.Value, &s); err == nil {
			out.Bytes, err = hex.DecodeString(s)
		}
	case strings.HasPrefix(j.Type, "decimal("):
		var s string
		if err = json.Unmarshal(j.Value, &s); err == nil {
			out.Decimal, err = decimal128.FromString(s, 38, decimalScale(j.Type)) // 38: a truncated value may need a digit more than P
		}
	default:
		err = json.Unmarshal(j.Value, &out.Int)
	}
	if err != nil {
		return fmt.Errorf("partition value %s: %v", b, err)
	}
	*v = out
	return nil
}
