package objstore

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Locator is a Store whose objects a client outside the server can read by URL.
type Locator interface {
	// Locate returns a URL from which the object can be read without the store's credentials,
	// and the time it stops working (zero: it does not expire). It does not check that the object
	// exists: a client that cannot read the URL must fall back to another way.
	Locate(ctx context.Context, key string, ttl time.Duration) (location string, expires time.Time, err error)
}

var (
	_ Locator = (*Local)(nil)
	_ Locator = (*S3)(nil)
)

// Locate implements Locator: the file:// URL of the object's absolute path, which never expires.
func (l *Local) Locate(_ context.Context, key string, _ time.Duration) (string, time.Time, error) {
	p, err := l.path(key)
	if err != nil {
		return "", time.Time{}, err
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p)}).String(), time.Time{}, nil
}

// Locate implements Locator: a presigned GET URL of the object, valid for ttl (S3 allows at most
// seven days).
func (s *S3) Locate(ctx context.Context, key string, ttl time.Duration) (string, time.Time, error) {
	k, err := s.key(key)
	if err != nil {
		return "", time.Time{}, err
	}
	expires := time.Now().Add(ttl)
	req, err := s3.NewPresignClient(s.client).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(k)},
		s3.WithPresignExpires(ttl))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("s3 store: presign %s: %w", key, err)
	}
	return req.URL, expires, nil
}
