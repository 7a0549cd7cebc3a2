package flightsvc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/partition"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/streaming"
)

// errorDomain is the ErrorInfo domain of every status the server returns.
const errorDomain = "flight-sink"

// reasonInternal is the reason of an error no row of errorReasons matches: a bug, or a local-disk
// failure.
const reasonInternal = "INTERNAL"

// errorReason is one row of errorReasons: an error wrapping err is answered with code, and its
// status carries a google.rpc.ErrorInfo with reason.
type errorReason struct {
	err    error
	code   codes.Code
	reason string
	// codeDefault marks the reason given to a status with this code that carries no ErrorInfo
	// yet (one gRPC itself made: a cancelled stream, a message over the receive limit). At most
	// one row per code.
	codeDefault bool
}

// errorReasons is the one table from domain errors to gRPC codes and ErrorInfo reasons. toStatus
// takes the first row whose err the error wraps, so a finer sentinel comes before one it wraps
// (ErrUnsupportedType wraps ErrSchemaMismatch) and before a generic one wrapped together with it
// (streaming wraps ErrInvalidTableName in ErrInvalidRequest). The reasons are a stable contract
// that clients branch on: docs/protocol.md lists them (TestProtocolDocListsEveryReason checks
// it), and a reason is never renamed or given another code. TestErrorReasonsTable checks that
// every row is reachable.
var errorReasons = []errorReason{
	{err: errPutIdleTimeout, code: codes.DeadlineExceeded, reason: "PUT_IDLE_TIMEOUT"},
	{err: context.Canceled, code: codes.Canceled, reason: "CANCELLED", codeDefault: true},
	{err: context.DeadlineExceeded, code: codes.DeadlineExceeded, reason: "DEADLINE_EXCEEDED", codeDefault: true},
	{err: errUnauthenticated, code: codes.Unauthenticated, reason: "UNAUTHENTICATED", codeDefault: true},
	{err: errPermissionDenied, code: codes.PermissionDenied, reason: "PERMISSION_DENIED", codeDefault: true},
	{err: errResourceExhausted, code: codes.ResourceExhausted, reason: "LIMIT_EXCEEDED", codeDefault: true},
	{err: arrowschema.ErrBatchTooLarge, code: codes.ResourceExhausted, reason: "LIMIT_EXCEEDED"},
	{err: memwal.ErrBackpressure, code: codes.ResourceExhausted, reason: "BACKPRESSURE"},
	{err: errMalformedIPC, code: codes.InvalidArgument, reason: "MALFORMED_IPC"},
	{err: errUnknownAction, code: codes.InvalidArgument, reason: "UNKNOWN_ACTION"},
	{err: arrowschema.ErrUnsupportedType, code: codes.InvalidArgument, reason: "UNSUPPORTED_TYPE"},
	{err: arrowschema.ErrSchemaChangeRefused, code: codes.InvalidArgument, reason: "SCHEMA_CHANGE_REFUSED"}, // wraps ErrSchemaMismatch
	{err: arrowschema.ErrDataMismatch, code: codes.InvalidArgument, reason: "SCHEMA_DATA_MISMATCH"},         // wraps ErrSchemaMismatch
	{err: arrowschema.ErrSchemaMismatch, code: codes.InvalidArgument, reason: "SCHEMA_MISMATCH"},
	{err: partition.ErrInvalidSpec, code: codes.InvalidArgument, reason: "INVALID_PARTITION_SPEC"},
	{err: engine.ErrTooManyPartitions, code: codes.InvalidArgument, reason: "TOO_MANY_PARTITIONS"},
	{err: engine.ErrInvalidTableName, code: codes.InvalidArgument, reason: "INVALID_TABLE_NAME"},
	{err: expr.ErrInvalidPredicate, code: codes.InvalidArgument, reason: "INVALID_PREDICATE"},
	{err: engine.ErrFragmentNotFound, code: codes.InvalidArgument, reason: "FRAGMENT_NOT_FOUND"},
	{err: engine.ErrInvalidChangeRange, code: codes.InvalidArgument, reason: "INVALID_REQUEST"},
	{err: streaming.ErrInvalidRequest, code: codes.InvalidArgument, reason: "INVALID_REQUEST", codeDefault: true},
	{err: engine.ErrTableNotFound, code: codes.NotFound, reason: "TABLE_NOT_FOUND"},
	{err: engine.ErrChangesUnavailable, code: codes.NotFound, reason: "CHANGES_UNAVAILABLE"},
	{err: engine.ErrVersionNotFound, code: codes.NotFound, reason: "VERSION_NOT_FOUND"},
	{err: streaming.ErrStageNotFound, code: codes.NotFound, reason: "STAGE_NOT_FOUND"},
	{err: streaming.ErrReadSnapshotNotFound, code: codes.NotFound, reason: "READ_SNAPSHOT_NOT_FOUND"},
	{err: engine.ErrTableExists, code: codes.AlreadyExists, reason: "TABLE_EXISTS"},
	{err: streaming.ErrQueryReused, code: codes.FailedPrecondition, reason: "QUERY_REUSED"},
	{err: streaming.ErrUnsupported, code: codes.FailedPrecondition, reason: "UNSUPPORTED"},
	{err: engine.ErrEpochCommitted, code: codes.FailedPrecondition, reason: "EPOCH_ALREADY_COMMITTED"},
	{err: engine.ErrCommitConflict, code: codes.FailedPrecondition, reason: "COMMIT_CONFLICT"},
	{err: iceberg.ErrDisabled, code: codes.FailedPrecondition, reason: "ICEBERG_DISABLED"},
	{err: iceberg.ErrUnpublishable, code: codes.FailedPrecondition, reason: "ICEBERG_UNPUBLISHABLE"},
	{err: memwal.ErrFenced, code: codes.FailedPrecondition, reason: "FENCED"},
	{err: engine.ErrTooManyRetries, code: codes.Aborted, reason: "TOO_MANY_RETRIES"},
	{err: objstore.ErrUnavailable, code: codes.Unavailable, reason: "STORAGE_UNAVAILABLE"},
	{err: engine.ErrCorruptManifest, code: codes.DataLoss, reason: "DATA_CORRUPT"},
	{err: errUnimplemented, code: codes.Unimplemented, reason: "UNIMPLEMENTED", codeDefault: true},
	{err: errInternal, code: codes.Internal, reason: reasonInternal, codeDefault: true},
}

// Sentinels of the Flight layer itself, matched by errorReasons like the domain's.
var (
	errResourceExhausted = errors.New("limit exceeded")
	errUnimplemented     = errors.New("not implemented")
	// errPutIdleTimeout: a DoPut stream sent nothing for --put-idle-timeout.
	errPutIdleTimeout = errors.New("put idle timeout")
	// errMalformedIPC: a DoPut message is not valid Arrow IPC, or its data could not be decoded.
	errMalformedIPC = errors.New("malformed Arrow IPC")
	// errUnknownAction: DoAction of a type this server does not run.
	errUnknownAction    = errors.New("unknown action")
	errUnauthenticated  = errors.New("unauthenticated")
	errPermissionDenied = errors.New("permission denied")
	// errInternal: a panic in a call, recovered by the interceptors.
	errInternal = errors.New("internal error")
)

// toStatus maps an error from streaming or engine to the gRPC status a client sees, with a
// google.rpc.ErrorInfo detail (domain flight-sink) naming its reason. This is the one place
// where errors meet codes: every status the server builds comes from here.
//
// A status error passes through with its code; one without an ErrorInfo (gRPC's own, such as a
// cancelled stream) gets the default reason of its code.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		short := shortStatus(st)
		for _, d := range st.Details() {
			if _, ok := d.(*errdetails.ErrorInfo); ok {
				if short != st {
					return short.Err()
				}
				return err
			}
		}
		return withReason(short, defaultReason(st.Code()), nil)
	}
	row := reasonOf(err)
	return withReason(status.New(row.code, shortMessage(err.Error())), row.reason, errorMetadata(err))
}

// maxStatusMessage bounds the message of a status the server sends, in bytes. The message
// travels three times in the trailers (grpc-message, x-arrow-status-message-bin, and inside
// grpc-status-details-bin, base64-encoded), and gRPC clients refuse trailers over their header
// list limit (8 KiB in gRPC C++, so pyarrow) by turning the status into INTERNAL: a message that
// echoes a long list the client sent would lose its code and reason. 1 KiB keeps the trailers
// under 4 KiB.
const maxStatusMessage = 1024

// shortMessage is msg made valid UTF-8 and cut to maxStatusMessage bytes (at a character
// boundary), saying how much was cut. A status whose message is not UTF-8 cannot be marshalled
// with its details: gRPC would send it without the ErrorInfo.
func shortMessage(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	if len(msg) <= maxStatusMessage {
		return msg
	}
	const tail = " ... (%d more bytes)"
	cut := maxStatusMessage - len(tail) - 8
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + fmt.Sprintf(tail, len(msg)-cut)
}

// shortStatus is st with its message cut by shortMessage, its details kept; st itself when the
// message is short.
func shortStatus(st *status.Status) *status.Status {
	if len(st.Message()) <= maxStatusMessage && utf8.ValidString(st.Message()) {
		return st
	}
	p := st.Proto()
	p.Message = shortMessage(p.Message)
	return status.FromProto(p)
}

// reasonOf returns the first row of errorReasons whose sentinel err wraps; an error no row
// matches is Internal.
func reasonOf(err error) errorReason {
	for _, r := range errorReasons {
		if errors.Is(err, r.err) {
			return r
		}
	}
	return errorReason{err: errInternal, code: codes.Internal, reason: reasonInternal}
}

// defaultReason is the reason of the codeDefault row for code (INTERNAL for a code without one).
func defaultReason(code codes.Code) string {
	for _, r := range errorReasons {
		if r.codeDefault && r.code == code {
			return r.reason
		}
	}
	return reasonInternal
}

// withReason returns st with an ErrorInfo detail carrying reason and metadata.
func withReason(st *status.Status, reason string, metadata map[string]string) error {
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: errorDomain, Metadata: metadata})
	if err != nil { // only when the detail cannot be marshalled, which an ErrorInfo always can
		return st.Err()
	}
	return withInfo.Err()
}

// errorMetadata returns the structured fields of the error types that carry them, for the
// ErrorInfo's metadata (nil when err has none).
func errorMetadata(err error) map[string]string {
	var (
		conflict *engine.ConflictError
		epoch    *engine.EpochCommittedError
		fenced   *memwal.FencedError
		key      *engine.ConfigKeyError
		changes  *engine.ChangesUnavailableError
		spec     *partition.SpecError
	)
	switch {
	case errors.As(err, &changes):
		return map[string]string{"table": changes.Table, "oldest_version": strconv.FormatUint(changes.Oldest, 10)}
	case errors.As(err, &conflict):
		return map[string]string{"table": conflict.Table, "their_version": strconv.FormatUint(conflict.TheirVersion, 10)}
	case errors.As(err, &epoch) && epoch.Shard != "":
		return map[string]string{"query_id": epoch.QueryID, "epoch_id": strconv.FormatInt(epoch.EpochID, 10), "shard": epoch.Shard}
	case errors.As(err, &epoch):
		return map[string]string{"query_id": epoch.QueryID, "epoch_id": strconv.FormatInt(epoch.EpochID, 10),
			"watermark_epoch": strconv.FormatInt(epoch.WatermarkEpoch, 10)}
	case errors.As(err, &fenced):
		return map[string]string{"shard": fenced.Shard}
	case errors.As(err, &key):
		return map[string]string{"key": key.Key}
	case errors.As(err, &spec) && spec.Column != "":
		return map[string]string{"column": spec.Column}
	}
	return nil
}

// arrowStatusTrailer returns the trailers an Arrow C++ Flight server sends with an error status:
// x-arrow-status (the Arrow C++ status code) and x-arrow-status-message-bin (the message). Arrow
// C++ clients, pyarrow's among them, read the grpc-status-details-bin trailer (the
// google.rpc.Status with its ErrorInfo) only when x-arrow-status is present, and then hand it
// to the caller as FlightStatusDetail's extra_info (pyarrow.flight.FlightError.extra_info).
func arrowStatusTrailer(err error) metadata.MD {
	st, _ := status.FromError(err)
	return metadata.Pairs("x-arrow-status", strconv.Itoa(arrowStatusCode(st.Code())),
		"x-arrow-status-message-bin", st.Message())
}

// arrowStatusCode is the Arrow C++ StatusCode an Arrow C++ client makes of a gRPC code without
// these trailers, so the status keeps its class (Invalid, KeyError, IOError, ...).
func arrowStatusCode(c codes.Code) int {
	const (
		keyError       = 2
		invalid        = 4
		ioError        = 5
		cancelled      = 8
		unknownError   = 9
		notImplemented = 10
		alreadyExists  = 45
	)
	switch c {
	case codes.InvalidArgument, codes.ResourceExhausted, codes.FailedPrecondition, codes.OutOfRange:
		return invalid
	case codes.NotFound:
		return keyError
	case codes.AlreadyExists:
		return alreadyExists
	case codes.Canceled:
		return cancelled
	case codes.Unimplemented:
		return notImplemented
	case codes.Unknown:
		return unknownError
	}
	return ioError
}
