package main

import (
	"strings"
	"testing"
)

func TestParseTableURI(t *testing.T) {
	tests := []struct {
		uri, root, name string
		err             string // substring of the error; empty means success
	}{
		{uri: "./flight-sink-data/events", root: "./flight-sink-data", name: "events"},
		{uri: "flight-sink-data/events/", root: "flight-sink-data", name: "events"},
		{uri: "events", root: ".", name: "events"},
		{uri: "/data/events", root: "/data", name: "events"},
		{uri: "/events", root: "/", name: "events"},
		{uri: "file:///data/events", root: "file:///data", name: "events"},
		{uri: "file:///data/events//", root: "file:///data", name: "events"},
		{uri: "file:///events", root: "file:///", name: "events"},
		{uri: "s3://bucket/prefix/events", root: "s3://bucket/prefix", name: "events"},
		{uri: "s3://bucket/a/b/events.v2", root: "s3://bucket/a/b", name: "events.v2"},
		{uri: "s3://bucket/events", root: "s3://bucket", name: "events"},

		{uri: "", err: "empty table URI"},
		{uri: "s3://bucket", err: "names a bucket but no table"},
		{uri: "s3://bucket/", err: "names a bucket but no table"},
		{uri: "s3://", err: "names no table"},
		{uri: "/", err: "names no table"},
		{uri: "file://data/events", err: "absolute path"},
		{uri: "gs://bucket/events", err: `unsupported scheme "gs"`},
		{uri: "./data/..", err: "invalid table name"},
		{uri: "./data/_versions", err: "invalid table name"},
		{uri: "./data/bad name", err: "invalid table name"},
	}
	for _, tc := range tests {
		root, name, err := parseTableURI(tc.uri)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseTableURI(%q) = %q, %q, %v; want error containing %q", tc.uri, root, name, err, tc.err)
			}
			continue
		}
		if err != nil || root != tc.root || name != tc.name {
			t.Errorf("parseTableURI(%q) = %q, %q, %v; want %q, %q", tc.uri, root, name, err, tc.root, tc.name)
		}
	}
}
