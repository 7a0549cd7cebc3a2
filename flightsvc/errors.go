package flightsvc

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/streaming"
)

// toStatus maps an error from streaming or engine to the gRPC status a client sees. This is the
// one place where domain errors meet codes (docs/protocol.md lists them).
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, streaming.ErrInvalidRequest), errors.Is(err, engine.ErrSchemaMismatch),
		errors.Is(err, engine.ErrInvalidTableName), errors.Is(err, engine.ErrInvalidPredicate):
		code = codes.InvalidArgument
	case errors.Is(err, engine.ErrTableNotFound), errors.Is(err, engine.ErrVersionNotFound),
		errors.Is(err, streaming.ErrStageNotFound):
		code = codes.NotFound
	case errors.Is(err, engine.ErrTableExists):
		code = codes.AlreadyExists
	case errors.Is(err, streaming.ErrQueryReused), errors.Is(err, streaming.ErrUnsupported),
		errors.Is(err, engine.ErrCommitConflict), errors.Is(err, engine.ErrEpochAlreadyCommitted):
		code = codes.FailedPrecondition
	case errors.Is(err, engine.ErrTooManyRetries):
		code = codes.Aborted
	case errors.Is(err, memwal.ErrFenced):
		code = codes.FailedPrecondition
	case errors.Is(err, memwal.ErrBackpressure):
		code = codes.ResourceExhausted
	case errors.Is(err, errResourceExhausted), errors.Is(err, engine.ErrBatchTooLarge):
		code = codes.ResourceExhausted
	case errors.Is(err, errUnimplemented):
		code = codes.Unimplemented
	}
	return status.Error(code, err.Error())
}

var (
	errResourceExhausted = errors.New("limit exceeded")
	errUnimplemented     = errors.New("not implemented")
)
