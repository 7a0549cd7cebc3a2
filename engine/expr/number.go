package expr

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
)

// Integer literals are exact: a literal given as JSON (or text) is read from its digits, never
// through a float64, and must be a whole number within the range of its column's type.

// wholeNumber is the exact value of an integral literal: -mag when neg, else mag.
type wholeNumber struct {
	neg bool
	mag uint64
}

// numberStatus says what a literal's digits hold.
type numberStatus uint8

const (
	numberWhole      numberStatus = iota // integral and within ±(2^64-1)
	numberFractional                     // not a whole number
	numberHuge                           // integral, beyond ±(2^64-1)
	numberMalformed                      // not a number
)

// parseWholeNumber reads a JSON number's text exactly. Its cost is linear in len(s): an exponent
// never expands into digits, so "1e999999999" is numberHuge at once.
func parseWholeNumber(s string) (wholeNumber, numberStatus) {
	neg, digits, exp, ok := decimalDigits(s)
	switch {
	case !ok:
		return wholeNumber{}, numberMalformed
	case digits == "":
		return wholeNumber{}, numberWhole // zero, whatever its sign
	case exp < 0:
		return wholeNumber{}, numberFractional // the last digit is not zero, so 10^-exp does not divide
	case len(digits)+exp > 20:
		return wholeNumber{}, numberHuge // at least 10^20 > 2^64
	}
	w := wholeNumber{neg: neg}
	for i := 0; i < len(digits)+exp; i++ {
		d := uint64(0)
		if i < len(digits) {
			d = uint64(digits[i] - '0')
		}
		if w.mag > (math.MaxUint64-d)/10 {
			return wholeNumber{}, numberHuge
		}
		w.mag = w.mag*10 + d
	}
	return w, numberWhole
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// wholeNumberOf returns the exact value of a Go or JSON literal when it is a number.
func wholeNumberOf(v any) (wholeNumber, numberStatus) {
	switch x := v.(type) {
	case json.Number:
		return parseWholeNumber(string(x))
	case int:
		return signed(int64(x)), numberWhole
	case int8:
		return signed(int64(x)), numberWhole
	case int16:
		return signed(int64(x)), numberWhole
	case int32:
		return signed(int64(x)), numberWhole
	case int64:
		return signed(x), numberWhole
	case uint:
		return wholeNumber{mag: uint64(x)}, numberWhole
	case uint8:
		return wholeNumber{mag: uint64(x)}, numberWhole
	case uint16:
		return wholeNumber{mag: uint64(x)}, numberWhole
	case uint32:
		return wholeNumber{mag: uint64(x)}, numberWhole
	case uint64:
		return wholeNumber{mag: x}, numberWhole
	case float32:
		return wholeFloat(float64(x))
	case float64:
		return wholeFloat(x)
	}
	return wholeNumber{}, numberMalformed
}

func signed(i int64) wholeNumber {
	if i < 0 {
		return wholeNumber{neg: true, mag: uint64(-(i + 1)) + 1} // -MinInt64 overflows int64
	}
	return wholeNumber{mag: uint64(i)}
}

// wholeFloat is the exact value of a float64 (a Go literal; JSON numbers never pass through one).
func wholeFloat(f float64) (wholeNumber, numberStatus) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return wholeNumber{}, numberMalformed
	case f != math.Trunc(f):
		return wholeNumber{}, numberFractional
	case math.Abs(f) >= 1<<64:
		return wholeNumber{}, numberHuge
	}
	return wholeNumber{neg: f < 0, mag: uint64(math.Abs(f))}, numberWhole // exact: f is whole and below 2^64
}

// integerRange returns the least and greatest value of an integer-valued column type as
// whole numbers.
func integerRange(dt arrow.DataType) (lo, hi wholeNumber) {
	switch dt.ID() {
	case arrow.INT8:
		return signed(math.MinInt8), signed(math.MaxInt8)
	case arrow.INT16:
		return signed(math.MinInt16), signed(math.MaxInt16)
	case arrow.INT32, arrow.DATE32, arrow.TIME32:
		return signed(math.MinInt32), signed(math.MaxInt32)
	case arrow.UINT8:
		return wholeNumber{}, wholeNumber{mag: math.MaxUint8}
	case arrow.UINT16:
		return wholeNumber{}, wholeNumber{mag: math.MaxUint16}
	case arrow.UINT32:
		return wholeNumber{}, wholeNumber{mag: math.MaxUint32}
	case arrow.UINT64:
		return wholeNumber{}, wholeNumber{mag: math.MaxUint64}
	}
	return signed(math.MinInt64), signed(math.MaxInt64) // int64, date64, timestamps, time64, durations
}

// cmpWhole compares two whole numbers.
func cmpWhole(a, b wholeNumber) int {
	switch {
	case a.neg && a.mag != 0 && !(b.neg && b.mag != 0):
		return -1
	case b.neg && b.mag != 0 && !(a.neg && a.mag != 0):
		return 1
	case a.neg && a.mag != 0: // both negative
		return -cmpUint(a.mag, b.mag)
	}
	return cmpUint(a.mag, b.mag)
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// inRange reports whether w lies within [lo, hi].
func (w wholeNumber) inRange(lo, hi wholeNumber) bool {
	return cmpWhole(lo, w) <= 0 && cmpWhole(w, hi) <= 0
}

// int64Value is w as an int64; w must lie within the int64 range.
func (w wholeNumber) int64Value() int64 {
	if w.neg {
		return -int64(w.mag-1) - 1
	}
	return int64(w.mag)
}

// String renders w in decimal.
func (w wholeNumber) String() string {
	if w.neg && w.mag != 0 {
		return "-" + strconv.FormatUint(w.mag, 10)
	}
	return strconv.FormatUint(w.mag, 10)
}
