package epochid

import (
	"errors"
	"fmt"
	"testing"
)

type testLocation string

func (l testLocation) String() string { return string(l) }

// A *CommittedError wraps ErrCommitted and says where the epoch was found, for the base
// table and for a MemWAL shard alike.
func TestCommittedError(t *testing.T) {
	for _, c := range []struct {
		err  *CommittedError
		want string
	}{
		{&CommittedError{QueryID: "q", EpochID: 4, WatermarkEpoch: 6, Version: 3},
			`query "q" epoch 4: table watermark is already at epoch 6 (version 3)`},
		{&CommittedError{QueryID: "q", EpochID: 4, Shard: "s-1", Location: testLocation("wal entry 7")},
			`memwal shard s-1: query "q" epoch 4 already committed (wal entry 7)`},
		{&CommittedError{QueryID: "q", EpochID: 4, Shard: "s-1"},
			`memwal shard s-1: query "q" epoch 4 already committed`},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
		wrapped := fmt.Errorf("put: %w", c.err)
		var ece *CommittedError
		if !errors.Is(wrapped, ErrCommitted) || !errors.As(wrapped, &ece) || ece != c.err {
			t.Errorf("%v: errors.Is ErrCommitted / errors.As *CommittedError fail", wrapped)
		}
	}
}
