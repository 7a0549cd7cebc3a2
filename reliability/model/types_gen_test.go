package model

import (
	"math/rand/v2"
	"testing"
)

// TestGeneratedTypesBuild: the generator's values of every type build a column of the type a
// stream sends and of the type the model expects back.
func TestGeneratedTypesBuild(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		ct := randomType(r, 2)
		vals := make([]string, 5)
		for j := range vals {
			vals[j] = nullable(r, ct.value)
		}
		a, err := buildColumn(ct.send, vals)
		if err != nil {
			t.Fatalf("%s send: %v", ct.label, err)
		}
		a.Release()
		if _, err := canonicalValues(ct.stored, vals); err != nil {
			t.Fatalf("%s stored: %v", ct.label, err)
		}
	}
}
