package streaming

import (
	"testing"

	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// TestMain starts the S3 server of the tests that run on every store (storetest.ForEach).
func TestMain(m *testing.M) { storetest.Main(m) }
