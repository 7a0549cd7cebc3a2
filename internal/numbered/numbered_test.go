package numbered

import "testing"

func TestKeyParse(t *testing.T) {
	for _, n := range []uint64{0, 1, 42, 1<<64 - 1} {
		for _, prefix := range []string{"_versions/", "t/_mem_wal/s/wal/"} {
			dir := prefix
			if i := len(prefix) - 1; i > 0 {
				for j := i - 1; j >= 0; j-- {
					if prefix[j] == '/' {
						dir = prefix[j+1:]
						break
					}
				}
			}
			k := Key(prefix, n, ".log")
			if got, ok := Parse(k, dir, ".log"); !ok || got != n {
				t.Fatalf("Parse(%q, %q) = %d, %v; want %d", k, dir, got, ok, n)
			}
		}
	}
	for _, k := range []string{
		"_versions/1.log",                         // not 20 digits
		"_versions/0000000000000000000a.log",      // not a number
		"_versions/00000000000000000001.arrow",    // another extension
		"x_versions/00000000000000000001.log",     // dir not at a boundary
		"_versions/99999999999999999999.log",      // over uint64
		"_versions/00000000000000000001.log/more", // not the last element
	} {
		if n, ok := Parse(k, "_versions/", ".log"); ok {
			t.Errorf("Parse(%q) = %d, true; want false", k, n)
		}
	}
}
