// Package storetest gives tests real object stores: a local directory and a prefix of a bucket
// on a real S3 server (versitygw) that runs for the life of the test binary.
//
// A package whose tests use S3 calls Main from its TestMain:
//
//	func TestMain(m *testing.M) { storetest.Main(m) }
//
// Main starts versitygw on a loopback port when the binary can be found, and stops it when the
// tests are done. Without the binary the S3 cases skip, unless CI=true or
// FLIGHT_SINK_REQUIRE_S3=1, in which case Main fails the run: CI must never pass by skipping.
// Every S3 store a test gets lives under a fresh key prefix of one shared bucket, so tests are
// isolated from each other and may run in parallel.
package storetest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flight-sink/flight-sink/objstore"
)

// Bucket is the bucket every S3 store of a test run lives in.
const Bucket = "flight-sink-test"

// InstallCommand installs the S3 server the tests run against.
const InstallCommand = "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

var (
	mainCalled bool
	server     *gateway // nil when versitygw is not running
	prefixSeq  atomic.Int64
)

// Main runs the tests of a package with an S3 server: it starts versitygw if it can find the
// binary, runs m.Run, stops the server, removes its files and exits with the tests' code.
//
// The binary is looked up as $FLIGHT_SINK_VERSITYGW, on PATH, in $(go env GOPATH)/bin and in
// $HOME/go/bin. When it is missing, the tests run and S3 cases skip — unless CI=true or
// FLIGHT_SINK_REQUIRE_S3=1, where Main exits 1 and says how to install it. A binary that is found
// but does not start is always an error.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// MainUnlessHelper is Main, except in a child process a test started with env=1 in its
// environment: such a helper runs one test against the store its environment names and needs no
// S3 server of its own.
func MainUnlessHelper(m *testing.M, env string) {
	if os.Getenv(env) == "1" {
		os.Exit(m.Run())
	}
	Main(m)
}

// Run is Main without the exit: it returns m.Run's code (or 1 when the server cannot start), for
// a TestMain that has its own clean-up to do afterwards.
func Run(m *testing.M) int {
	mainCalled = true
	bin := findVersitygw()
	if bin == "" {
		if s3Required() {
			fmt.Fprintf(os.Stderr, "storetest: versitygw not found but S3 tests are required (CI=true or FLIGHT_SINK_REQUIRE_S3=1).\n"+
				"Install it with:\n\t%s\nor point FLIGHT_SINK_VERSITYGW at the binary.\n", InstallCommand)
			return 1
		}
		fmt.Fprintf(os.Stderr, "storetest: versitygw not found; S3 tests will skip (install: %s)\n", InstallCommand)
		return m.Run()
	}
	g, err := startGateway(bin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "storetest: %v\n", err)
		return 1
	}
	server = g
	defer g.stop()
	return m.Run()
}

func s3Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("FLIGHT_SINK_REQUIRE_S3") == "1"
}

// Named is a way to make a fresh, empty store, named for subtests ("local", "s3").
type Named struct {
	Name string
	New  func(t testing.TB) objstore.Store
}

// Stores returns every kind of store the engine runs on, for tests that must hold on all of them:
//
//	for _, st := range storetest.Stores(t) {
//		t.Run(st.Name, func(t *testing.T) { s := st.New(t); ... })
//	}
//
// "local" is a Local store on t.TempDir(); "s3" is a fresh prefix of the test bucket, and its New
// skips the test when no S3 server is running.
func Stores(t testing.TB) []Named {
	t.Helper()
	return []Named{
		{Name: "local", New: func(t testing.TB) objstore.Store {
			t.Helper()
			s, err := objstore.NewLocal(t.TempDir())
			if err != nil {
				t.Fatalf("local store: %v", err)
			}
			return s
		}},
		{Name: "s3", New: func(t testing.TB) objstore.Store {
			t.Helper()
			_, opts := S3(t)
			s, err := objstore.NewS3(context.Background(), opts)
			if err != nil {
				t.Fatalf("s3 store: %v", err)
			}
			return s
		}},
	}
}

// ForEach runs fn as a subtest on a fresh store of every kind Stores returns; parallel marks the
// subtests parallel.
func ForEach(t *testing.T, parallel bool, fn func(t *testing.T, store objstore.Store)) {
	t.Helper()
	for _, st := range Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			fn(t, st.New(t))
		})
	}
}

// S3 returns the URI of a fresh, empty prefix of the test bucket ("s3://flight-sink-test/...") and
// the options that reach it: endpoint, static credentials, region and path style, with Bucket and
// Prefix filled in, so both objstore.NewS3(ctx, opts) and objstore.Open(ctx, uri, &opts) work.
// It skips the test when no S3 server is running.
func S3(t testing.TB) (uri string, opts objstore.S3Options) {
	t.Helper()
	if !mainCalled {
		t.Fatal("storetest: the package's TestMain must call storetest.Main(m) to get an S3 server")
	}
	if server == nil {
		t.Skipf("no S3 server: versitygw not found (install: %s)", InstallCommand)
	}
	prefix := fmt.Sprintf("%s-%d", sanitize(t.Name()), prefixSeq.Add(1))
	opts = objstore.S3Options{
		Bucket:          Bucket,
		Prefix:          prefix,
		Endpoint:        server.endpoint,
		Region:          server.region,
		AccessKeyID:     server.accessKey,
		SecretAccessKey: server.secretKey,
		PathStyle:       true,
	}
	return "s3://" + Bucket + "/" + prefix, opts
}

// S3Env returns environment variables that let a child process reach the server of opts with
// nothing but an s3:// URI (objstore.Open(ctx, uri, nil)). Append them to os.Environ(): later
// entries win, and AWS_SESSION_TOKEN is set (empty unless opts has one) so a token inherited
// from the parent cannot pair with these keys.
func S3Env(opts objstore.S3Options) []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + opts.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY=" + opts.SecretAccessKey,
		"AWS_SESSION_TOKEN=" + opts.SessionToken,
		"AWS_REGION=" + opts.Region,
		"AWS_ENDPOINT_URL_S3=" + opts.Endpoint,
		objstore.PathStyleEnv + "=1",
	}
}

// sanitize turns a test name into a short, readable key segment.
func sanitize(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}
