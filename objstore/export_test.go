package objstore

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// NewS3WithHTTPClient is NewS3 with the client's HTTP transport replaced, for fault injection.
func NewS3WithHTTPClient(ctx context.Context, o S3Options, hc s3.HTTPClient) (Store, error) {
	s, err := newS3(ctx, o, func(so *s3.Options) { so.HTTPClient = hc })
	if err != nil {
		return nil, err
	}
	return s, nil
}

// SetWritebackChunk changes writebackChunk and returns a function that restores it.
func SetWritebackChunk(n int64) (restore func()) {
	old := writebackChunk
	writebackChunk = n
	return func() { writebackChunk = old }
}
