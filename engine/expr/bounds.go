package expr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// The bounds of one predicate, checked before it is decoded further, bound or evaluated, so that
// what a request costs the server grows linearly with its size and stays bounded:
//   - MaxPredicateJSONBytes: the size of its JSON encoding;
//   - MaxPredicateDepth: its nesting ("and", "or" and "not" nodes count a level each; a leaf at
//     the top is depth 1);
//   - MaxPredicateNodes: its nodes, each "in" value counted as one.
//
// A wider filter is written flat: "and"/"or" take any number of arguments, so a chain of 500
// "or"s is one "or" of 500 comparisons, or one "in". Errors wrap ErrInvalidPredicate.
const (
	MaxPredicateJSONBytes = 1 << 20
	MaxPredicateDepth     = 100
	MaxPredicateNodes     = 10_000
)

// wireNode is a predicate node as JSON encodes it: Predicate without its UnmarshalJSON, so that
// one decoder reads the whole tree once.
type wireNode struct {
	Op     PredicateOp `json:"op"`
	Column string      `json:"column,omitempty"`
	Value  any         `json:"value,omitempty"`
	Values []any       `json:"values,omitempty"`
	Args   []*wireNode `json:"args,omitempty"`
}

// decodePredicate decodes the JSON of a predicate within the bounds: its size, then its nesting
// (scanned without decoding), then, decoded in one pass, its shape.
func decodePredicate(b []byte) (*Predicate, error) {
	if len(b) > MaxPredicateJSONBytes {
		return nil, fmt.Errorf("%w: the predicate's JSON is %d bytes, over the limit of %d", ErrInvalidPredicate, len(b), MaxPredicateJSONBytes)
	}
	// Each level of the tree is an object and its "args" array; a literal may add an array.
	if d := jsonDepth(b); d > 2*MaxPredicateDepth+1 {
		return nil, fmt.Errorf("%w: the predicate is nested deeper than %d levels (its JSON %d deep); write a chain of \"and\"/\"or\" as one node with many arguments",
			ErrInvalidPredicate, MaxPredicateDepth, d)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	var w wireNode
	if err := dec.Decode(&w); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the predicate's JSON", ErrInvalidPredicate)
	}
	p := w.predicate()
	if err := p.checkShape(); err != nil {
		return nil, err
	}
	return p, nil
}

func (w *wireNode) predicate() *Predicate {
	if w == nil {
		return nil
	}
	p := &Predicate{Op: w.Op, Column: w.Column, Value: w.Value, Values: w.Values}
	if w.Args != nil {
		p.Args = make([]*Predicate, len(w.Args))
		for i, a := range w.Args {
			p.Args[i] = a.predicate()
		}
	}
	return p
}

// jsonDepth returns the deepest nesting of objects and arrays in b (0 for a scalar), reading b
// once. Malformed JSON is left to the decoder.
func jsonDepth(b []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// checkShape checks p against MaxPredicateDepth and MaxPredicateNodes, visiting at most
// MaxPredicateNodes nodes and MaxPredicateDepth levels whatever p's size.
func (p *Predicate) checkShape() error {
	nodes := 0
	var walk func(q *Predicate, depth int) error
	walk = func(q *Predicate, depth int) error {
		if depth > MaxPredicateDepth {
			return fmt.Errorf("%w: the predicate is nested deeper than %d levels; write a chain of \"and\"/\"or\" as one node with many arguments",
				ErrInvalidPredicate, MaxPredicateDepth)
		}
		nodes++
		if q != nil {
			nodes += len(q.Values)
		}
		if nodes > MaxPredicateNodes {
			return fmt.Errorf("%w: the predicate has more than %d nodes (each \"in\" value counts as one)", ErrInvalidPredicate, MaxPredicateNodes)
		}
		if q == nil {
			return nil
		}
		for _, a := range q.Args {
			if err := walk(a, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(p, 1)
}
