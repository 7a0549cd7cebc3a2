package flightsvc

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/flight-sink/flight-sink/objstore"
)

const (
	// readyProbeEvery is how often a serving server asks its store whether it answers.
	readyProbeEvery = 5 * time.Second
	// readyProbeTimeout bounds one probe: a store slower than this is not ready.
	readyProbeTimeout = 10 * time.Second
	// readyProbePrefix is the key prefix the probe lists. No table can be named with a leading
	// '_', so the listing is empty; it still needs the bucket, the endpoint and the credentials,
	// which a HEAD cannot check (S3 answers a HEAD in a missing bucket with a bare 404).
	readyProbePrefix = "_flight_sink_readyz/"
)

// readiness is whether the server should get new calls: its store answers and it is not
// shutting down. /readyz and the gRPC health service report it.
type readiness struct {
	store    objstore.Store
	draining atomic.Bool

	mu       sync.Mutex
	storeErr error // the last probe's failure; nil when it answered
	probed   bool
}

// check lists readyProbePrefix and records whether the store answered.
func (r *readiness) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyProbeTimeout)
	defer cancel()
	_, err := r.store.List(ctx, readyProbePrefix, "") // its error names the prefix, the callers the root
	r.mu.Lock()
	r.storeErr, r.probed = err, true
	r.mu.Unlock()
	return err
}

// probe checks the store every readyProbeEvery until ctx ends, sets the gRPC health service's
// status to match, and logs each change.
func (r *readiness) probe(ctx context.Context, hs *health.Server, logger *slog.Logger) {
	t := time.NewTicker(readyProbeEvery)
	defer t.Stop()
	var was error
	setHealth := func(err error) {
		st := healthpb.HealthCheckResponse_SERVING
		if err != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		hs.SetServingStatus("", st) // ignored once the server shut the health service down
	}
	r.mu.Lock()
	was = r.storeErr
	r.mu.Unlock()
	setHealth(was)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.check(ctx)
		switch {
		case err != nil && was == nil:
			logger.Warn("root store does not answer: not ready", "root", r.store.String(), "err", err)
		case err == nil && was != nil:
			logger.Info("root store answers again: ready", "root", r.store.String())
		}
		was = err
		setHealth(err)
	}
}

// notReady returns why the server is not ready, or "" when it is.
func (r *readiness) notReady() string {
	if r.draining.Load() {
		return "draining: the server is shutting down"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.storeErr != nil {
		return "store unavailable: " + r.store.String() + ": " + r.storeErr.Error()
	}
	return ""
}

// RootUnavailableError is NewServer's error when the root's store does not answer at start
// (unless Config.StartUnready). Its message is the failure; Hint says what to check, once.
type RootUnavailableError struct {
	Root string // the store's URI
	Err  error
}

func (e *RootUnavailableError) Error() string {
	return "root " + e.Root + " does not answer: " + e.Err.Error()
}

// Unwrap returns the store's error.
func (e *RootUnavailableError) Unwrap() error { return e.Err }

// Hint says what to check: for S3 the bucket, the credentials and the endpoint flags; for a
// directory its existence and permissions.
func (e *RootUnavailableError) Hint() string {
	if strings.HasPrefix(e.Root, "s3://") {
		return "check the bucket exists, the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE " +
			"or an instance role) may list it, and --s3-endpoint, --s3-region and --s3-path-style; " +
			"--store-unreachable=not-ready serves anyway, not ready until the store answers"
	}
	return "check the directory exists and this user may read and write it"
}
