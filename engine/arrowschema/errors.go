package arrowschema

import "errors"

// ErrSchemaMismatch: data or a schema does not fit the table's schema, or a type the table
// cannot store (ErrUnsupportedType wraps it). Every refusal of this package wraps it.
var ErrSchemaMismatch = errors.New("schema mismatch")
