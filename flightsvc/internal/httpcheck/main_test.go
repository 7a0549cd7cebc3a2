package httpcheck

import (
	"testing"

	"github.com/flight-sink/flight-sink/objstore/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }
