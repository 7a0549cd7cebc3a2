package flightsvc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/flight-sink/flight-sink/streaming"
)

// decodeStrict decodes body, one JSON object, into v, a pointer to the wire type of what (a name
// for messages: "DoPut command", "cleanup body"). It refuses, wrapping streaming.ErrInvalidRequest
// (InvalidArgument) with a message that names the field:
//   - a field the type does not have, at any depth (`unknown field "merge_shema" in DoPut command`);
//   - a value of the wrong JSON type, or a number that does not fit (integers stay exact: fields
//     are Go integers, never float64);
//   - anything but one object: null, an array, trailing data after the object.
//
// It says nothing about values: the handler checks ranges, and tells an absent field (a nil
// pointer) from one given as 0.
func decodeStrict(what string, body []byte, v any) error {
	if err := decodeObject(body, v); err != nil {
		return invalidf("%s", err.describe(what))
	}
	return nil
}

// decodeNested is UnmarshalJSON for a wire object nested in a request under field name: it decodes
// as strictly as decodeStrict, and its errors name the field.
func decodeNested(name string, body []byte, v any) error {
	if err := decodeObject(body, v); err != nil {
		return err.in(name)
	}
	return nil
}

// invalidf is an InvalidArgument error of the wire layer.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", streaming.ErrInvalidRequest, fmt.Sprintf(format, args...))
}

// decodeError is what is wrong with a JSON object, relative to the request it is part of.
type decodeError struct {
	object  string   // the path of the nested object at fault ("create.memwal"); "" for the request itself
	field   string   // the field at fault, inside object; "" for object itself
	unknown bool     // field is not a field of object
	known   []string // with unknown: object's fields
	msg     string   // otherwise: what is wrong with field (or object)
}

// in places e inside the object field name of its parent.
func (e *decodeError) in(name string) *decodeError {
	if e.object == "" {
		e.object = name
	} else {
		e.object = name + "." + e.object
	}
	return e
}

func (e *decodeError) Error() string { return e.describe("JSON object") }

// describe words e for a request called what.
func (e *decodeError) describe(what string) string {
	where := what
	if e.object != "" {
		where = fmt.Sprintf("%s field %q", what, e.object)
	}
	switch {
	case e.unknown:
		return fmt.Sprintf("unknown field %q in %s (its fields: %s; docs/protocol.md)", e.field, where, strings.Join(e.known, ", "))
	case e.field == "":
		return where + " " + e.msg
	}
	path := e.field
	if e.object != "" {
		path = e.object + "." + e.field
	}
	return fmt.Sprintf("%s field %q %s", what, path, e.msg)
}

// decodeObject decodes body strictly into v (see decodeStrict).
func decodeObject(body []byte, v any) *decodeError {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return asDecodeError(err, v)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &decodeError{msg: "has trailing data after the JSON object"}
	}
	if t := bytes.TrimSpace(body); t[0] != '{' { // null: every other non-object is a type error above
		return &decodeError{msg: "must be a JSON object, got " + valueKind(t)}
	}
	return nil
}

// asDecodeError words an error of json.Decoder.Decode(v).
func asDecodeError(err error, v any) *decodeError {
	var de *decodeError
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &de): // from a nested object's UnmarshalJSON
		return de
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return &decodeError{field: strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`), unknown: true, known: jsonFields(reflect.TypeOf(v))}
	case errors.As(err, &te):
		if te.Field == "" {
			return &decodeError{msg: fmt.Sprintf("must be a JSON object, got %s", te.Value)}
		}
		return &decodeError{field: te.Field, msg: fmt.Sprintf("must be %s, got %s", jsonKind(te.Type), te.Value)}
	case errors.Is(err, io.EOF):
		return &decodeError{msg: "is empty: send a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &decodeError{msg: "is not valid JSON: it ends inside a value"}
	case errors.As(err, &se):
		return &decodeError{msg: fmt.Sprintf("is not valid JSON: %v (at byte %d)", se, se.Offset)}
	}
	return &decodeError{msg: fmt.Sprintf("is not valid: %v", err)}
}

// valueKind names the kind of the JSON value b, as json's type errors do ("string", "number").
func valueKind(b []byte) string {
	switch b[0] {
	case '"':
		return "string"
	case '[':
		return "array"
	case '{':
		return "object"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// jsonKind names what JSON a Go type decodes from, for messages.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(jsonKind(t.Elem()), "a "), "an ") + "s"
	}
	return "an object"
}

// jsonFields lists the JSON field names of the struct t (or *t), in order.
func jsonFields(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case name == "" && f.Anonymous:
			out = append(out, jsonFields(f.Type)...)
		case name == "":
			out = append(out, f.Name)
		default:
			out = append(out, name)
		}
	}
	return out
}
