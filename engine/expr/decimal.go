package expr

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// Decimal columns compare exactly: a literal is read from its digits at the column's scale. One
// with more fractional digits than the scale lies strictly between two adjacent column values
// (decimalLiteral.between): it equals no value, and orders after the lower one.

// decimalLiteral is a literal at a decimal column's scale: the unscaled value d, or, when between
// is set, a value strictly between d and the next value up (d + 1 unscaled).
type decimalLiteral struct {
	d       decimal128.Num
	between bool
}

// decimalDigits splits a number's text exactly: value = ±digits × 10^exp, digits without leading
// or trailing zeros ("" for zero). An exponent past 10^9 decides as 10^9 does.
func decimalDigits(s string) (neg bool, digits string, exp int, ok bool) {
	if strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	mant, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart == "" && frac == "" || !allDigits(intPart) || !allDigits(frac) {
		return false, "", 0, false
	}
	if hasExp {
		negExp := strings.HasPrefix(expText, "-")
		e := strings.TrimLeft(strings.TrimPrefix(strings.TrimPrefix(expText, "-"), "+"), "0")
		if expText == "" || !allDigits(e) || strings.Trim(expText, "+-") == "" {
			return false, "", 0, false
		}
		if len(e) > 9 {
			e = "1000000000"
		}
		exp, _ = strconv.Atoi(e)
		if negExp {
			exp = -exp
		}
	}
	digits = intPart + frac
	exp -= len(frac)
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	return neg, strings.TrimLeft(trimmed, "0"), exp, true
}

// decimalText is the exact decimal text of a Go or JSON literal, when it is a number.
func decimalText(v any) (string, bool) {
	switch x := v.(type) {
	case json.Number:
		return string(x), true
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), true // the float as written, not its binary expansion
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32), true
	}
	if w, st := wholeNumberOf(v); st == numberWhole {
		return w.String(), true
	}
	return "", false
}

// decimalLiteralOf converts v for a decimal128 column of type dt.
func decimalLiteralOf(dt *arrow.Decimal128Type, v any) (decimalLiteral, error) {
	text, ok := decimalText(v)
	if !ok {
		return decimalLiteral{}, fmt.Errorf("want a number")
	}
	neg, digits, exp, ok := decimalDigits(text)
	if !ok {
		return decimalLiteral{}, fmt.Errorf("want a number")
	}
	outOfRange := fmt.Errorf("out of the range of %s", dt)
	if digits == "" {
		return decimalLiteral{}, nil
	}
	shift := exp + int(dt.Scale) // value = digits × 10^shift unscaled
	intLen := len(digits) + shift
	if intLen > int(dt.Precision) {
		return decimalLiteral{}, outOfRange
	}
	var mag big.Int
	between := false
	switch {
	case shift >= 0:
		mag.SetString(digits+strings.Repeat("0", shift), 10)
	case intLen > 0:
		mag.SetString(digits[:intLen], 10)
		between = true // the digits cut off are not all zero: the last digit never is
	default:
		between = true // below one unit of the scale
	}
	if neg {
		mag.Neg(&mag)
		if between {
			mag.Sub(&mag, big.NewInt(1)) // the value lies above the next unit down
		}
	}
	d := decimal128.FromBigInt(&mag)
	lo, hi := decimal128.GetMaxValue(dt.Precision).Negate(), decimal128.GetMaxValue(dt.Precision)
	if d.Less(lo) || d.Greater(hi) || between && !d.Less(hi) {
		return decimalLiteral{}, outOfRange
	}
	return decimalLiteral{d: d, between: between}, nil
}

// compareDecimal compares column value x with literal l: -1, 0 or 1.
func compareDecimal(x decimal128.Num, l decimalLiteral) int {
	c := x.Cmp(l.d)
	if l.between && c == 0 {
		return -1 // x = d < l
	}
	return c
}
