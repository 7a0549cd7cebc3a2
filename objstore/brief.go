package objstore

import (
	"errors"
	"net"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
)

// briefError renders an S3 client's error on one short line: the operation, then what failed,
// without the SDK's layers around it (its retry count, an empty response's status, request id
// and host id, the request's URL). An S3 answer keeps its code and message ("S3 ListObjectsV2:
// api error NoSuchBucket: ..."); a request that reached no server keeps the network error
// ("S3 ListObjectsV2: dial tcp 127.0.0.1:9: connect: connection refused (3 attempts)"); any other
// failure (the credential chain's, say) keeps the SDK's whole message after the operation.
func briefError(err error) string {
	var op *smithy.OperationError
	if !errors.As(err, &op) {
		return err.Error()
	}
	what := op.Err.Error()
	var api smithy.APIError
	var netErr *net.OpError
	switch {
	case errors.As(op.Err, &api):
		what = "api error " + api.ErrorCode() + ": " + api.ErrorMessage()
	case errors.As(op.Err, &netErr):
		what = netErr.Error()
	}
	var attempts *retry.MaxAttemptsError
	if errors.As(op.Err, &attempts) {
		what += " (" + strconv.Itoa(attempts.Attempt) + " attempts)"
	}
	return op.Service() + " " + op.Operation() + ": " + what
}
