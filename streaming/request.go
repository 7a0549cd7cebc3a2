package streaming

import (
	"errors"
	"fmt"
	"strings"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/partition"
	"github.com/flight-sink/flight-sink/memwal"
)

// Errors callers branch on (flightsvc maps them to gRPC codes).
var (
	// ErrInvalidRequest: the request is malformed; nothing was written.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrQueryReused: an epoch below the query's watermark that was never committed, which means
	// the query id is being reused by a query with a new checkpoint.
	ErrQueryReused = errors.New("query_id reused with a new checkpoint?")
	// ErrUnsupported: a valid request this build or this table cannot serve.
	ErrUnsupported = errors.New("not supported")
	// ErrStageNotFound: a commit_epoch named a stage that does not exist (the engine's sentinel:
	// staging lives in engine/write_stage.go).
	ErrStageNotFound = engine.ErrStageNotFound
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}

// Mode is a Spark output mode.
type Mode string

// Output modes.
const (
	ModeAppend   Mode = "append"
	ModeComplete Mode = "complete"
	ModeUpdate   Mode = "update"
)

// Route chooses where an epoch lands.
type Route string

// Routes.
const (
	RouteAuto   Route = "auto"
	RouteDirect Route = "direct"
	RouteMemWAL Route = "memwal"
)

// MaxQueryIDBytes bounds a query id: every manifest carries each query's watermark.
const MaxQueryIDBytes = 512

// Look-back bounds for the dedupe history scan.
const (
	DefaultLookback = 100
	MaxLookback     = 10000
)

// Partition identifies one task attempt's share of a multi-writer epoch.
type Partition struct {
	ID      int64
	Attempt int64
}

// CreateSpec asks for the table to be created from the stream's schema if it does not exist.
type CreateSpec struct {
	PrimaryKey []string
	MemWAL     *struct {
		Shards int
	}
	// DataCodec names the table's data file codec (engine.ParseDataCodec); "" is the default.
	DataCodec string
	// PartitionBy is the table's partition spec (none: unpartitioned); checked against the
	// schema by the create (engine.CheckCreate).
	PartitionBy partition.Spec
	// MaxPartitionsPerWrite, when positive, is the table's engine.ConfigMaxPartitionsPerWrite.
	MaxPartitionsPerWrite int
}

// EpochRequest is one epoch write (or one partition of one).
type EpochRequest struct {
	Table     string
	QueryID   string
	EpochID   int64
	Mode      Mode
	Route     Route
	Lookback  int
	Partition *Partition
	Create    *CreateSpec
	// ExpectRows, when set, is the number of rows the client says the stream carries. A stream
	// that ends with a different count (a client that closed its side part-way) commits nothing.
	ExpectRows *int64
	// MergeSchema lets the epoch change the table schema (arrowschema.MergeSchema): the change and
	// the epoch's rows commit as one transaction, always on the direct route.
	MergeSchema bool
}

// Normalize validates r in place: it trims the query id once (that trimmed id is the one stamped),
// fills defaults, and returns an error wrapping ErrInvalidRequest for anything malformed.
func (r *EpochRequest) Normalize() error {
	if err := engine.ValidateTableName(r.Table); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	r.QueryID = strings.TrimSpace(r.QueryID)
	if r.QueryID == "" {
		return invalid("query_id is required for epoch writes (use Spark's StreamingQuery.id); it was missing or blank")
	}
	if len(r.QueryID) > MaxQueryIDBytes {
		return invalid("query_id is %d bytes long; the limit is %d (it is stored in every manifest)", len(r.QueryID), MaxQueryIDBytes)
	}
	if r.EpochID < 0 {
		return invalid("epoch_id must be >= 0, got %d", r.EpochID)
	}
	switch r.Mode {
	case "":
		r.Mode = ModeAppend
	case ModeAppend, ModeComplete, ModeUpdate:
	default:
		return invalid("mode must be append, complete or update, got %q", r.Mode)
	}
	switch r.Route {
	case "":
		r.Route = RouteAuto
	case RouteAuto, RouteDirect, RouteMemWAL:
	default:
		return invalid("route must be auto, direct or memwal, got %q", r.Route)
	}
	if err := normalizeLookback(&r.Lookback); err != nil {
		return err
	}
	if r.ExpectRows != nil && *r.ExpectRows < 0 {
		return invalid("rows must be >= 0, got %d", *r.ExpectRows)
	}
	if p := r.Partition; p != nil && (p.ID < 0 || p.Attempt < 0) {
		return invalid("partition id and attempt must be >= 0, got id %d attempt %d", p.ID, p.Attempt)
	}
	if r.Create != nil {
		return r.Create.Validate()
	}
	return nil
}

// Validate checks a create spec. DoPut's "create" and the create_table action both go through
// it, so the two accept exactly the same tables.
func (c *CreateSpec) Validate() error {
	if c.MemWAL != nil && (c.MemWAL.Shards < 1 || c.MemWAL.Shards > memwal.MaxShards) {
		return invalid("memwal.shards must be 1..%d, got %d", memwal.MaxShards, c.MemWAL.Shards)
	}
	if _, err := engine.ParseDataCodec(c.DataCodec); err != nil {
		return invalid("%v", err)
	}
	if c.MaxPartitionsPerWrite < 0 {
		return invalid("max_partitions_per_write must be positive, got %d", c.MaxPartitionsPerWrite)
	}
	seen := make(map[string]bool, len(c.PrimaryKey))
	for _, k := range c.PrimaryKey {
		if strings.TrimSpace(k) == "" {
			return invalid("primary_key names an empty column")
		}
		if seen[k] {
			return invalid("primary_key names column %q twice", k)
		}
		seen[k] = true
	}
	return nil
}

func normalizeLookback(l *int) error {
	if *l == 0 {
		*l = DefaultLookback
		return nil
	}
	if *l < 1 || *l > MaxLookback {
		return invalid("dedupe_lookback_versions must be 1..%d, got %d", MaxLookback, *l)
	}
	return nil
}

// Status of an acknowledged write.
type Status string

// Ack statuses.
const (
	StatusCommitted Status = "committed"
	StatusDuplicate Status = "duplicate"
	StatusEmpty     Status = "empty"
	StatusStaged    Status = "staged"
)

// Ack is the answer to an epoch write. It is returned only once what it reports is durable.
type Ack struct {
	Status  Status
	Table   string
	QueryID string
	EpochID *int64
	Version uint64
	Rows    int64
	Stage   string
	// Route is "memwal" when the epoch landed in MemWAL shards (no base version is created then).
	Route Route
	// Warning is set on a duplicate whose replay differs from what the committed epoch recorded
	// (replay.go): the epoch identity may be shared by two queries.
	Warning string
}

func newAck(status Status, r *EpochRequest) Ack {
	e := r.EpochID
	return Ack{Status: status, Table: r.Table, QueryID: r.QueryID, EpochID: &e}
}
