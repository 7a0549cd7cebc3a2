package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
)

// ServeCmd runs the Arrow Flight server.
type ServeCmd struct {
	Listen            string        `default:"127.0.0.1:8815" env:"FLIGHT_SINK_LISTEN" help:"gRPC listen address."`
	HTTPListen        string        `name:"http-listen" default:"127.0.0.1:8816" env:"FLIGHT_SINK_HTTP_LISTEN" help:"Address of /metrics (Prometheus), /healthz, /readyz, /status and /status.json; \"off\" disables them."`
	Root              string        `default:"./flight-sink-data" env:"FLIGHT_SINK_ROOT" help:"Table root URI: a path, file:///path or s3://bucket/prefix."`
	MaxMessageBytes   int           `name:"max-message-bytes" default:"268435456" env:"FLIGHT_SINK_MAX_MESSAGE_BYTES" help:"Largest gRPC message accepted (one Arrow batch); larger ones get ResourceExhausted."`
	MaxConcurrent     int           `name:"max-concurrent-puts" default:"64" env:"FLIGHT_SINK_MAX_CONCURRENT_PUTS" help:"DoPut streams served at once; more get ResourceExhausted (-1: no limit)."`
	MaxConcurrentGets int           `name:"max-concurrent-gets" default:"64" env:"FLIGHT_SINK_MAX_CONCURRENT_GETS" help:"DoGet streams served at once; more get ResourceExhausted (-1: no limit)."`
	MaxPutBytes       int64         `name:"max-put-bytes" default:"0" env:"FLIGHT_SINK_MAX_PUT_BYTES" help:"Arrow bytes one DoPut stream may carry; a larger one gets ResourceExhausted and commits nothing (0: no limit)."`
	MaxDecodedMsg     int64         `name:"max-decoded-message-bytes" default:"1073741824" env:"FLIGHT_SINK_MAX_DECODED_MESSAGE_BYTES" help:"Decoded Arrow bytes one DoPut message may carry (a compressed buffer counts the size it declares); a larger one gets ResourceExhausted."`
	PutIdleTimeout    time.Duration `name:"put-idle-timeout" default:"60s" env:"FLIGHT_SINK_PUT_IDLE_TIMEOUT" help:"A DoPut stream that sends no message for this long (first message or between two) fails with DeadlineExceeded and frees its slot (0: no timeout)."`
	Maintenance       string        `name:"maintenance" enum:"background,inline,off" default:"background" env:"FLIGHT_SINK_MAINTENANCE" help:"Maintenance after commits (optimize indices, compact, clean up) for tables that configure none: background, inline or off."`
	DedupeLookback    int           `name:"dedupe-lookback" default:"100" env:"FLIGHT_SINK_DEDUPE_LOOKBACK" help:"Default dedupe look-back in versions (1..10000) when a command does not set one."`
	ShutdownGrace     time.Duration `name:"shutdown-grace" default:"30s" env:"FLIGHT_SINK_SHUTDOWN_GRACE" help:"On SIGTERM, how long in-flight calls may finish before they are cancelled."`
	ShutdownDelay     time.Duration `name:"shutdown-delay" default:"0s" env:"FLIGHT_SINK_SHUTDOWN_DELAY" help:"On SIGTERM, how long to keep serving after /readyz turned 503, before draining: the time a load balancer needs to stop sending new calls."`
	StoreUnreachable  string        `name:"store-unreachable" enum:"fail,not-ready" default:"fail" env:"FLIGHT_SINK_STORE_UNREACHABLE" help:"When the root's store does not answer at start: fail (exit with the error) or not-ready (serve, /readyz 503 with the reason until it answers)."`
	EndpointBytes     int64         `name:"endpoint-bytes" default:"134217728" env:"FLIGHT_SINK_ENDPOINT_BYTES" help:"GetFlightInfo describes a table as one endpoint per group of fragments of about this many data bytes (plus one for its MemWAL rows), for parallel readers."`
	ReadSnapshotTTL   time.Duration `name:"read-snapshot-ttl" default:"10m" env:"FLIGHT_SINK_READ_SNAPSHOT_TTL" help:"How long the MemWAL rows a GetFlightInfo captured stay readable through its endpoints' tickets."`
	StageTTL          time.Duration `name:"stage-ttl" default:"24h" env:"FLIGHT_SINK_STAGE_TTL" help:"How long an uncommitted multi-writer stage is kept before cleanup may remove it."`
	AuthToken         []string      `name:"auth-token" sep:"," env:"FLIGHT_SINK_AUTH_TOKEN" placeholder:"TOKEN" help:"Bearer token clients must send (authorization: Bearer <token>); repeat the flag or comma-separate for several. Without one, only loopback addresses are served."`
	TLSCert           string        `name:"tls-cert" env:"FLIGHT_SINK_TLS_CERT" type:"existingfile" help:"TLS certificate file (PEM); with --tls-key enables TLS."`
	TLSKey            string        `name:"tls-key" env:"FLIGHT_SINK_TLS_KEY" type:"existingfile" help:"TLS private key file (PEM)."`
	TLSClientCA       string        `name:"tls-client-ca" env:"FLIGHT_SINK_TLS_CLIENT_CA" type:"existingfile" help:"CA file (PEM) client certificates must be signed by: enables mTLS."`
	AllowRemote       bool          `name:"allow-unauthenticated-remote" env:"FLIGHT_SINK_ALLOW_UNAUTHENTICATED_REMOTE" help:"Serve a non-loopback address without --auth-token (not recommended)."`
	LogLevel          string        `name:"log-level" enum:"debug,info,warn,error" default:"info" env:"FLIGHT_SINK_LOG_LEVEL" help:"Log level: debug, info, warn or error."`
	LogFormat         string        `name:"log-format" enum:"text,json" default:"text" env:"FLIGHT_SINK_LOG_FORMAT" help:"Log format: text or json."`
	NoIceberg         bool          `name:"no-iceberg" env:"FLIGHT_SINK_NO_ICEBERG" help:"Do not publish tables as Iceberg tables (docs/iceberg.md); a table turns it off with the configuration iceberg.publish=false."`
	MaxPartitions     int           `name:"max-partitions-per-write" default:"1000" env:"FLIGHT_SINK_MAX_PARTITIONS_PER_WRITE" help:"Partitions one write (an epoch, an append, an upsert) into a partitioned table may hold rows of; more is refused with InvalidArgument and commits nothing. A table sets its own with max_partitions_per_write at create (the configuration partition.max_per_write)."`
	MemWALStreamPuts  int64         `name:"memwal-stream-put-bytes" default:"0" env:"FLIGHT_SINK_MEMWAL_STREAM_PUT_BYTES" help:"Stream a MemWAL epoch of a table without a primary key into a local-disk WAL as its batches arrive once it passes this many bytes (0: never; docs/storage.md, Streamed puts)."`
	MemWALLeaseTTL    time.Duration `name:"memwal-lease-ttl" default:"15s" env:"FLIGHT_SINK_MEMWAL_LEASE_TTL" help:"How long a server's claim of a MemWAL shard lasts without a commit; it renews every third of it, and another server that sees no commit of the owner for this long takes the shard over (fold, release). Every server of a table must use the same value."`
	IcebergInterval   time.Duration `name:"iceberg-publish-interval" default:"1s" env:"FLIGHT_SINK_ICEBERG_PUBLISH_INTERVAL" help:"Least time between two Iceberg publishes of a table after commits (0: after every commit); a table overrides it with the configuration iceberg.publish_interval_ms."`
	IcebergVend       string        `name:"iceberg-vend-credentials" type:"existingfile" env:"FLIGHT_SINK_ICEBERG_VEND_CREDENTIALS" help:"JSON file of read-only S3 credentials ({\"access-key-id\", \"secret-access-key\", \"session-token\"?}) the Iceberg REST catalog hands to readers of an s3:// root that ask for vended credentials."`
	IcebergScan       time.Duration `name:"iceberg-scan-interval" default:"2s" env:"FLIGHT_SINK_ICEBERG_SCAN_INTERVAL" help:"How often the server looks for versions of the root's tables it did not commit (another server, flight-sink compact, cleanup or config set) and publishes them to Iceberg (0: never)."`
	MemWALFreshness   time.Duration `name:"memwal-freshness" default:"5s" env:"FLIGHT_SINK_MEMWAL_FRESHNESS" help:"Longest an acknowledged MemWAL row waits before a fold makes it visible to engines (Iceberg readers); 0: folds by generation count only. A table overrides it with the configuration flight_sink.memwal.freshness_ms."`
	HealthLagging     time.Duration `name:"health-lagging-after" default:"2m" env:"FLIGHT_SINK_HEALTH_LAGGING_AFTER" help:"The status page calls a table streaming queries write lagging after this long without a committed epoch; a table sets its own with the configuration health.lagging_after."`
	HealthStalled     time.Duration `name:"health-stalled-after" default:"15m" env:"FLIGHT_SINK_HEALTH_STALLED_AFTER" help:"The status page calls such a table stalled after this long (longer than --health-lagging-after); a table sets its own with health.stalled_after. Both are exported per table for the alert rules."`
	CPUProfile        string        `name:"cpuprofile" type:"path" env:"FLIGHT_SINK_CPUPROFILE" help:"Write a CPU profile of the server's whole run to this file, complete once the server has shut down (for go tool pprof)."`
}

// Run serves until SIGINT/SIGTERM, then drains in-flight calls and exits.
func (c *ServeCmd) Run(ctx context.Context, g *Globals) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(strings.ToUpper(c.LogLevel))); err != nil {
		return err
	}
	hopts := &slog.HandlerOptions{Level: level}
	var logger *slog.Logger
	if c.LogFormat == "json" {
		logger = slog.New(slog.NewJSONHandler(os.Stderr, hopts))
	} else {
		logger = slog.New(slog.NewTextHandler(os.Stderr, hopts))
	}
	logger.Info("flight-sink starting", "version", buildVersion(), slog.Group("config", c.configAttrs(g)...))
	if c.DedupeLookback < 1 || c.DedupeLookback > 10000 {
		return fmt.Errorf("--dedupe-lookback must be 1..10000, got %d", c.DedupeLookback)
	}
	if c.PutIdleTimeout < 0 {
		return fmt.Errorf("--put-idle-timeout must be positive, or 0 for no timeout; got %v", c.PutIdleTimeout)
	}
	if c.EndpointBytes <= 0 {
		return fmt.Errorf("--endpoint-bytes must be positive, got %d", c.EndpointBytes)
	}
	if c.HealthLagging <= 0 || c.HealthStalled <= c.HealthLagging {
		return fmt.Errorf("--health-lagging-after (%v) must be positive and --health-stalled-after (%v) longer", c.HealthLagging, c.HealthStalled)
	}
	if c.MaxDecodedMsg <= 0 {
		return fmt.Errorf("--max-decoded-message-bytes must be positive, got %d", c.MaxDecodedMsg)
	}
	idle := c.PutIdleTimeout
	if idle == 0 {
		idle = -1 // Config's zero value is its default; a negative one disables the timeout
	}
	cfg := flightsvc.Config{
		Listen: c.Listen, HTTPListen: c.HTTPListen, Root: c.Root, S3: g.S3Options(), MaxMessageBytes: c.MaxMessageBytes,
		ShutdownGrace: c.ShutdownGrace, Logger: logger, MaxConcurrentPuts: c.MaxConcurrent, MaxConcurrentGets: c.MaxConcurrentGets, MaxPutBytes: c.MaxPutBytes,
		AuthTokens: c.AuthToken, TLSCert: c.TLSCert, TLSKey: c.TLSKey, TLSClientCA: c.TLSClientCA,
		AllowUnauthenticatedRemote: c.AllowRemote, MaxDecodedMessageBytes: c.MaxDecodedMsg, PutIdleTimeout: idle,
	}
	cfg.ShutdownDelay, cfg.StartUnready, cfg.Version = c.ShutdownDelay, c.StoreUnreachable == "not-ready", buildVersion()
	cfg.Sink.StageTTL = c.StageTTL
	cfg.EndpointBytes, cfg.Sink.ReadSnapshotTTL = c.EndpointBytes, c.ReadSnapshotTTL
	cfg.Sink.DefaultMaintenance = &engine.MaintenanceConfig{Mode: engine.MaintenanceMode(c.Maintenance)}
	cfg.Sink.DefaultLookback = c.DedupeLookback
	cfg.Sink.DisableIceberg = c.NoIceberg
	cfg.Sink.IcebergPublishInterval = c.IcebergInterval
	cfg.Sink.IcebergScanInterval = c.IcebergScan
	cfg.Sink.HealthLaggingAfter, cfg.Sink.HealthStalledAfter = c.HealthLagging, c.HealthStalled
	if c.IcebergVend != "" {
		vc, err := readVendedCredentials(c.IcebergVend)
		if err != nil {
			return err
		}
		cfg.IcebergVendCredentials = vc
	}
	if c.IcebergScan <= 0 {
		cfg.Sink.IcebergScanInterval = -1 // the Sink's zero value is its default; negative: no scan
	}
	cfg.Sink.MemWALFreshness = c.MemWALFreshness
	if c.MemWALFreshness == 0 {
		cfg.Sink.MemWALFreshness = -1 // the Sink's zero value is its default; negative: off
	}
	cfg.Sink.MemWAL.OwnerLeaseTTL = c.MemWALLeaseTTL
	if c.MaxPartitions < 1 {
		return fmt.Errorf("--max-partitions-per-write must be positive, got %d", c.MaxPartitions)
	}
	cfg.Sink.Engine.MaxPartitionsPerWrite = c.MaxPartitions
	if c.MemWALStreamPuts > 0 {
		cfg.Sink.MemWAL.StreamPutBytes = c.MemWALStreamPuts
	}
	if c.IcebergInterval == 0 {
		cfg.Sink.IcebergPublishInterval = -1 // the Sink's zero value is its default; negative: every commit
	}
	if cfg.HTTPListen == "off" {
		cfg.HTTPListen = ""
	}
	stop, err := startCPUProfile(c.CPUProfile)
	if err != nil {
		return err
	}
	defer stop()
	srv, err := flightsvc.NewServer(ctx, cfg)
	if err != nil {
		return err
	}
	return srv.Serve(ctx)
}

// readVendedCredentials reads the --iceberg-vend-credentials file: a JSON object with
// "access-key-id" and "secret-access-key", and "session-token" for temporary credentials.
func readVendedCredentials(path string) (*flightsvc.VendedS3Credentials, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--iceberg-vend-credentials: %w", err)
	}
	var vc flightsvc.VendedS3Credentials
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&vc); err != nil {
		return nil, fmt.Errorf("--iceberg-vend-credentials %s: not a JSON object of access-key-id, secret-access-key and session-token: %w", path, err)
	}
	if vc.AccessKeyID == "" || vc.SecretAccessKey == "" {
		return nil, fmt.Errorf("--iceberg-vend-credentials %s: needs access-key-id and secret-access-key", path)
	}
	return &vc, nil
}

// configAttrs returns the effective value of every serve flag and the S3 flags, as log
// attributes named like the flags; auth tokens are counted, never logged.
func (c *ServeCmd) configAttrs(g *Globals) []any {
	var attrs []any
	add := func(v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := f.Tag.Get("name")
			if name == "" {
				name = strings.ToLower(f.Name) // kong's name of a one-word field
			}
			val := v.Field(i).Interface()
			if name == "auth-token" {
				val = len(c.AuthToken)
				name = "auth-tokens"
			}
			attrs = append(attrs, slog.Any(name, val))
		}
	}
	add(reflect.ValueOf(c).Elem())
	add(reflect.ValueOf(g).Elem())
	return attrs
}
