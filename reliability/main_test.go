package reliability

import (
	"os"
	"testing"

	"github.com/flight-sink/flight-sink/flightsvc/servertest"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

func TestMain(m *testing.M) {
	code := storetest.Run(m) // a real S3 server for the S3 cases
	servertest.RemoveBinary()
	os.Exit(code)
}
