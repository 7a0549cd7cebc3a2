package iceberg_test

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// s3Store returns an S3 store on the test's versitygw, the environment a reader needs for it
// and a function that opens another client of it; ok is false when no versitygw runs (and CI
// does not require one).
func s3Store(t *testing.T) (objstore.Store, []string, func(t *testing.T) objstore.Store, bool) {
	t.Helper()
	if _, err := exec.LookPath("versitygw"); err != nil && os.Getenv("FLIGHT_SINK_VERSITYGW") == "" && os.Getenv("CI") != "true" {
		return nil, nil, nil, false
	}
	_, opts := storetest.S3(t)
	open := func(t *testing.T) objstore.Store {
		s, err := objstore.NewS3(context.Background(), opts)
		if err != nil {
			t.Fatalf("s3 store: %v", err)
		}
		return s
	}
	return open(t), storetest.S3Env(opts), open, true
}
