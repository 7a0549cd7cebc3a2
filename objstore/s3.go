package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/flight-sink/flight-sink/internal/backoff"
)

// PathStyleEnv names the environment variable that turns on path-style addressing
// (http://host/bucket/key) when S3Options.PathStyle is false. Any value strconv.ParseBool accepts
// is allowed ("1", "true"). S3-compatible servers (versitygw, MinIO) usually need it; together
// with the standard AWS_ENDPOINT_URL_S3 it lets a process reach such a server with nothing but
// an s3:// URI and its environment.
const PathStyleEnv = "FLIGHT_SINK_S3_PATH_STYLE"

// defaultRegion is used when neither S3Options.Region nor the AWS environment names a region.
const defaultRegion = "us-east-1"

const (
	// s3PartSize is the multipart part size of Put. Bodies shorter than one part go up in a single
	// PutObject; a Put holds at most s3UploadConcurrency parts in memory (64 MiB).
	s3PartSize          = 16 << 20
	s3UploadConcurrency = 4
	// s3DeleteBatch is the most keys one DeleteObjects request may name.
	s3DeleteBatch = 1000
	// s3ConflictRetries bounds how often PutIfAbsent retries a 409 ConditionalRequestConflict.
	s3ConflictRetries = 5
)

// s3ConflictBackoff spaces PutIfAbsent's retries of a 409 ConditionalRequestConflict: a window
// of 20ms doubling per retry (its mean wait is the fixed 10ms << retry of a jitter-free backoff).
var s3ConflictBackoff = backoff.Policy{Base: 20 * time.Millisecond, Max: 20 * time.Millisecond << s3ConflictRetries}

// S3Options configures an S3 store. Zero values fall back to the standard AWS environment.
type S3Options struct {
	Bucket string
	Prefix string // key prefix of the store's root inside the bucket, without leading/trailing '/'
	// Endpoint is a custom endpoint, e.g. http://127.0.0.1:7070. Empty uses the SDK's resolution,
	// which honours AWS_ENDPOINT_URL_S3 and AWS_ENDPOINT_URL.
	Endpoint string
	// Region defaults to the AWS environment (AWS_REGION, shared config) and then to us-east-1.
	Region          string
	AccessKeyID     string // static credentials; empty = default credential chain
	SecretAccessKey string
	SessionToken    string
	// PathStyle addresses buckets as http://host/bucket instead of http://bucket.host. When false,
	// the FLIGHT_SINK_S3_PATH_STYLE environment variable (PathStyleEnv) may still turn it on.
	PathStyle bool
}

// S3 is a Store on a prefix of an S3 bucket.
//
// PutIfAbsent relies on conditional writes (PutObject with If-None-Match: *), which AWS S3 and
// current S3-compatible servers (versitygw, MinIO) enforce atomically.
type S3 struct {
	client   *s3.Client
	uploader *manager.Uploader //nolint:staticcheck // SA1019: feature/s3/transfermanager is its successor; the multipart upload this store needs is the same
	bucket   string
	root     string // Prefix plus a trailing '/', or "" for the whole bucket
}

// NewS3 returns a Store on an S3 bucket.
func NewS3(ctx context.Context, o S3Options) (Store, error) {
	s, err := newS3(ctx, o)
	if err != nil {
		return nil, err // not a typed nil *S3 inside a non-nil Store
	}
	return s, nil
}

// newS3 is NewS3 with extra client options, so tests can put a faulty transport under the client.
func newS3(ctx context.Context, o S3Options, extra ...func(*s3.Options)) (*S3, error) {
	if o.Bucket == "" {
		return nil, errors.New("s3 store: no bucket")
	}
	pathStyle := o.PathStyle
	if v := os.Getenv(PathStyleEnv); v != "" && !pathStyle {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("s3 store: %s=%q is not a boolean", PathStyleEnv, v)
		}
		pathStyle = b
	}

	var loadOpts []func(*config.LoadOptions) error
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	if o.AccessKeyID != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, o.SessionToken)))
	}
	// LoadDefaultConfig also records the environment as config sources, from which the S3 client
	// resolves AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL when Endpoint is empty.
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("s3 store: load AWS config: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = defaultRegion
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = pathStyle
		// Validate response checksums only where the API requires them: S3-compatible servers
		// that send none would otherwise make the SDK log a warning on every GET.
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		for _, fn := range extra {
			fn(so)
		}
	})
	s := &S3{
		client: client,
		// The manager package is marked deprecated in favour of feature/s3/transfermanager, which
		// is still v0; its Uploader is stable and does what Put needs.
		uploader: manager.NewUploader(client, func(u *manager.Uploader) { //nolint:staticcheck // SA1019, as above
			u.PartSize = s3PartSize
			u.Concurrency = s3UploadConcurrency
		}),
		bucket: o.Bucket,
	}
	if p := strings.Trim(o.Prefix, "/"); p != "" {
		s.root = p + "/"
	}
	return s, nil
}

func (s *S3) String() string {
	if s.root == "" {
		return "s3://" + s.bucket
	}
	return "s3://" + s.bucket + "/" + strings.TrimSuffix(s.root, "/")
}

// key maps a store key to its S3 object key. It refuses what the Local store refuses (and empty
// segments, which a file system would collapse), so a key that works here works there.
func (s *S3) key(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") || strings.Contains(key, "\\") {
		return "", fmt.Errorf("s3 store: invalid key %q", key)
	}
	for _, part := range strings.Split(key, "/") {
		if part == "" || part == "." || part == ".." {
			return "", fmt.Errorf("s3 store: invalid key %q", key)
		}
	}
	return s.root + key, nil
}

// Get implements Store.
func (s *S3) Get(ctx context.Context, key string) ([]byte, error) {
	k, err := s.key(key)
	if err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &k})
	if err != nil {
		return nil, s.wrap("get", key, err)
	}
	defer out.Body.Close()
	b, err := readBody(out.Body, aws.ToInt64(out.ContentLength))
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return b, nil
}

// GetRange implements Store with a Range request.
func (s *S3) GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error) {
	k, err := s.key(key)
	if err != nil {
		return nil, err
	}
	if offset < 0 || length < 0 {
		return nil, fmt.Errorf("get range %s: invalid range offset %d length %d", key, offset, length)
	}
	if length == 0 {
		// An empty range cannot be expressed as a Range header; still report a missing object.
		if _, err := s.Stat(ctx, key); err != nil {
			return nil, err
		}
		return []byte{}, nil
	}
	rng := fmt.Sprintf("bytes=%d-%d", offset, offset+length-1)
	if offset+length-1 < offset { // overflow: read to the end
		rng = fmt.Sprintf("bytes=%d-", offset)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &k, Range: &rng})
	if err != nil {
		// 416: the range starts at or past the end; the contract truncates it to nothing.
		if status, _ := s3Status(err); status == http.StatusRequestedRangeNotSatisfiable {
			return []byte{}, nil
		}
		return nil, s.wrap("get range", key, err)
	}
	defer out.Body.Close()
	b, err := readBody(out.Body, aws.ToInt64(out.ContentLength))
	if err != nil {
		return nil, fmt.Errorf("get range %s: %w", key, err)
	}
	return b, nil
}

// readBody reads a response body, sized by its Content-Length when the server sent one.
func readBody(r io.Reader, size int64) ([]byte, error) {
	if size <= 0 {
		return io.ReadAll(r)
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// Stat implements Store with HeadObject.
func (s *S3) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	k, err := s.key(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &k})
	if err != nil {
		return ObjectInfo{}, s.wrap("stat", key, err)
	}
	return ObjectInfo{Key: key, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified)}, nil
}

// Put implements Store. Bodies longer than one part (16 MiB) go up as a multipart upload, which S3
// makes visible only when it completes; a failed upload is aborted.
func (s *S3) Put(ctx context.Context, key string, body io.Reader) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	if _, err := s.uploader.Upload(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &k, Body: body}); err != nil { //nolint:staticcheck // SA1019, as above
		return s.wrap("put", key, err)
	}
	return nil
}

// PutIfAbsent implements Store with PutObject and If-None-Match: *. S3 answers 412
// PreconditionFailed when the key exists, which is reported as ErrExists.
//
// Two refinements keep "exactly one winner" true over an unreliable network:
//   - 409 ConditionalRequestConflict means another conditional write of the key was in flight;
//     AWS asks clients to retry, and the retry learns who won (412) or wins itself. After
//     s3ConflictRetries it is reported as ErrExists.
//   - When the SDK had to resend the request (a timeout or reset after the server may already
//     have stored the object), a 412 may be our own earlier attempt. If the key then holds
//     exactly data, PutIfAbsent reports success. Callers that must tell two writers apart write
//     unique data (a manifest names its own transaction file).
func (s *S3) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	resent := false
	for try := 0; ; try++ {
		var attempts int
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket:        &s.bucket,
			Key:           &k,
			Body:          bytes.NewReader(data),
			ContentLength: aws.Int64(int64(len(data))),
			IfNoneMatch:   aws.String("*"),
		}, countAttempts(&attempts))
		if err == nil {
			return nil
		}
		resent = resent || attempts > 1
		status, code := s3Status(err)
		switch {
		case status == http.StatusPreconditionFailed || code == "PreconditionFailed":
			if resent {
				if cur, gerr := s.Get(ctx, key); gerr == nil && bytes.Equal(cur, data) {
					return nil
				}
			}
			return fmt.Errorf("put-if-absent %s: %w", key, ErrExists)
		case code == "ConditionalRequestConflict":
			if try >= s3ConflictRetries {
				return fmt.Errorf("put-if-absent %s: concurrent conditional write: %w", key, ErrExists)
			}
			if err := s3ConflictBackoff.Sleep(ctx, try); err != nil {
				return fmt.Errorf("put-if-absent %s: %w", key, err)
			}
		default:
			return s.wrap("put-if-absent", key, err)
		}
	}
}

// countAttempts counts the HTTP attempts of one operation, retries included.
func countAttempts(n *int) func(*s3.Options) {
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			// "Retry" is the SDK's retry middleware; everything after it runs once per attempt.
			return st.Finalize.Insert(middleware.FinalizeMiddlewareFunc("flightSinkCountAttempts",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
					middleware.FinalizeOutput, middleware.Metadata, error,
				) {
					*n++ // attempts of one operation run one after another
					return next.HandleFinalize(ctx, in)
				}), "Retry", middleware.After)
		})
	}
}

// List implements Store with ListObjectsV2.
func (s *S3) List(ctx context.Context, prefix, startAfter string) ([]ObjectInfo, error) {
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.root + prefix)}
	if startAfter != "" {
		in.StartAfter = aws.String(s.root + startAfter)
	}
	var out []ObjectInfo
	pages := s3.NewListObjectsV2Paginator(s.client, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, unavailable(err))
		}
		for _, o := range page.Contents {
			key, ok := strings.CutPrefix(aws.ToString(o.Key), s.root)
			// Skip "directory" markers: no Store key ends in '/', and Local has none.
			if !ok || key == "" || strings.HasSuffix(key, "/") {
				continue
			}
			out = append(out, ObjectInfo{Key: key, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)})
		}
	}
	// S3 already lists in UTF-8 byte order; sort anyway so the contract does not rest on a server.
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// ListPrefixes implements PrefixLister with a delimited listing, so finding the shards or
// generations under a prefix does not list every object below them.
func (s *S3) ListPrefixes(ctx context.Context, prefix string) ([]string, error) {
	full := s.root + prefix
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &full, Delimiter: aws.String("/")}
	var out []string
	pages := s3.NewListObjectsV2Paginator(s.client, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list prefixes %s: %w", prefix, unavailable(err))
		}
		for _, cp := range page.CommonPrefixes {
			name := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), full), "/")
			if name != "" {
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &k}); err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("delete %s: %w", key, unavailable(err))
	}
	return nil
}

// DeletePrefix implements Store: it lists the prefix and deletes in batches of 1000 keys.
func (s *S3) DeletePrefix(ctx context.Context, prefix string) error {
	if prefix == "" {
		return errors.New("delete prefix: refusing to delete the whole store")
	}
	objs, err := s.List(ctx, prefix, "")
	if err != nil {
		return fmt.Errorf("delete prefix %s: %w", prefix, err)
	}
	for len(objs) > 0 {
		n := min(len(objs), s3DeleteBatch)
		ids := make([]types.ObjectIdentifier, n)
		for i, o := range objs[:n] {
			ids[i] = types.ObjectIdentifier{Key: aws.String(s.root + o.Key)}
		}
		objs = objs[n:]
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: &s.bucket,
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return fmt.Errorf("delete prefix %s: %w", prefix, unavailable(err))
		}
		for _, e := range out.Errors {
			if aws.ToString(e.Code) == "NoSuchKey" {
				continue // deleted meanwhile
			}
			return fmt.Errorf("delete prefix %s: delete %s: %s: %s", prefix,
				strings.TrimPrefix(aws.ToString(e.Key), s.root), aws.ToString(e.Code), aws.ToString(e.Message))
		}
	}
	return nil
}

// wrap adds the operation and key to err: ErrNotFound when S3 says the key does not exist,
// ErrUnavailable for any other failure.
func (s *S3) wrap(op, key string, err error) error {
	if isNotFound(err) {
		return fmt.Errorf("%s %s: %w", op, key, ErrNotFound)
	}
	return fmt.Errorf("%s %s: %w", op, key, unavailable(err))
}

func isNotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	status, code := s3Status(err)
	// HeadObject has no body, so a missing key shows only as 404; a missing bucket is not a
	// missing key.
	return code == "NoSuchKey" || (status == http.StatusNotFound && code != "NoSuchBucket")
}

// s3Status returns the HTTP status and the S3 error code of an operation error, when the error
// came from a response.
func s3Status(err error) (status int, code string) {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	return status, code
}

// S3Access is how a reader reaches an S3 store's objects: the endpoint (empty: the AWS default
// for the region), the region and whether buckets are addressed by path, as the store's client
// resolved them.
type S3Access struct {
	Endpoint  string
	Region    string
	PathStyle bool
}

// Access returns how the store's client reaches S3 (the Iceberg REST catalog hands it to
// readers).
func (s *S3) Access() S3Access {
	o := s.client.Options()
	return S3Access{Endpoint: aws.ToString(o.BaseEndpoint), Region: o.Region, PathStyle: o.UsePathStyle}
}
