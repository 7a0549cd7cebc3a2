package iceberg

import "testing"

func TestMetadataNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		ok   bool
	}{
		{"v1.metadata.json", 1, true},
		{"v42.metadata.json", 42, true},
		{"v0.metadata.json", 0, false},
		{"v01.metadata.json", 0, false},
		{"v-1.metadata.json", 0, false},
		{"v1.metadata.json.tmp", 0, false},
		{"version-hint.text", 0, false},
		{"snap-1-1-abc.avro", 0, false},
	} {
		n, ok := parseMetadataName(tc.name)
		if n != tc.n || ok != tc.ok {
			t.Errorf("parseMetadataName(%q) = %d, %v; want %d, %v", tc.name, n, ok, tc.n, tc.ok)
		}
		if ok && makeMetadataName(n) != tc.name {
			t.Errorf("makeMetadataName(%d) = %q, want %q", n, makeMetadataName(n), tc.name)
		}
	}
}
