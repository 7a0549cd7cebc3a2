package reliability

import (
	"os"
	"testing"

	"github.com/flight-sink/flight-sink/engine/objstore/storetest"
)

func TestMain(m *testing.M) {
	code := storetest.Run(m) // a real S3 server for the S3 cases
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
