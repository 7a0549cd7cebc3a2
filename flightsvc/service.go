package flightsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/internal/arrowpool"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/streaming"
)

// Sink is what the Flight service asks of the domain: epochs and appends, reads, the MemWAL and
// staging operations, and the tables themselves (for the actions that are one table call).
// *streaming.Sink implements it; the service decodes each request into its wire type, calls one
// of these, and encodes the answer.
type Sink interface {
	WriteEpoch(ctx context.Context, r streaming.EpochRequest, src streaming.BatchSource) (streaming.Ack, error)
	Append(ctx context.Context, table string, src streaming.BatchSource) (streaming.Ack, error)
	CommitStaged(ctx context.Context, c streaming.CommitStagedRequest) (streaming.Ack, error)
	EpochStatus(ctx context.Context, table, queryID string, epochID int64) (streaming.EpochState, error)
	Scan(ctx context.Context, table string, version uint64, columns []string) (array.RecordReader, error)
	PlanRead(ctx context.Context, table string, version uint64, targetBytes int64) (streaming.ReadPlan, error)
	Read(ctx context.Context, r streaming.ReadRequest) (array.RecordReader, error)
	CreateTable(ctx context.Context, name string, schema *arrow.Schema, spec streaming.CreateSpec) (*engine.Table, error)
	Table(ctx context.Context, name string) (*engine.Table, error)
	DropTable(ctx context.Context, name string) (streaming.DropResult, error)
	Delete(ctx context.Context, table string, where *expr.Predicate) (engine.WriteResult, error)
	Cleanup(ctx context.Context, req streaming.CleanupRequest) (streaming.CleanupReport, error)
	FlushMemWAL(ctx context.Context, req streaming.MemWALRequest) (int, error)
	FoldMemWAL(ctx context.Context, req streaming.MemWALRequest) (int, error)
	TableState(ctx context.Context, t *engine.Table) (memwal.TableState, error)
	HealthThresholds(m *engine.Manifest) (lagging, stalled time.Duration)
	Store() objstore.Store
	IcebergSink
}

var _ Sink = (*streaming.Sink)(nil)

// Service implements the Flight service on a Sink.
type Service struct {
	flight.BaseFlightServer
	sink  Sink
	alloc memory.Allocator
	// getAlloc holds the buffers of what DoGet reads and encodes: each batch is released once
	// its messages are encoded (doget_codec.go copies it into the message), so its buffers are
	// reused by the batches after it instead of allocated afresh.
	getAlloc memory.Allocator
	logger   *slog.Logger
	puts     putLimiter // nil: no limit
	gets     getLimiter // nil: no limit
	// maxPutBytes bounds the decoded Arrow bytes of one DoPut stream (0: no limit).
	maxPutBytes int64
	// maxDecodedMessageBytes bounds the decoded bytes of one DoPut message (0: the guard's default).
	maxDecodedMessageBytes int64
	// putIdleTimeout fails a DoPut stream that sends nothing for this long (<= 0: never).
	putIdleTimeout time.Duration
	// endpointBytes is the data size of the fragments of one GetFlightInfo endpoint (<= 0: the
	// sink's default).
	endpointBytes int64
	// rates are the rows and epochs acknowledged per table lately, for the status page.
	rates *tableRates
	// icebergVend are the credentials the REST catalog vends (Config.IcebergVendCredentials).
	icebergVend *VendedS3Credentials
}

// NewService returns the Flight service for sink.
func NewService(sink Sink, alloc memory.Allocator, logger *slog.Logger) *Service {
	if alloc == nil {
		alloc = memory.DefaultAllocator
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Service{sink: sink, alloc: alloc, getAlloc: arrowpool.New(), logger: logger, rates: newTableRates(nil)}
}

// putStream is the DoPut message stream as the IPC reader sees it. It remembers the descriptor of
// the first message and drops messages that carry no IPC header (app_metadata only, as pyarrow's
// write_metadata sends): the IPC reader cannot decode them and would stop the stream there.
//
// Every other message passes guard before the IPC reader sees it: arrow-go trusts the flatbuffer
// metadata of a message (a claimed length of 2^32 fields, a buffer declaring a 2^40-byte
// decompressed size) and a bad one is a fatal out-of-memory or stack overflow that no recover
// catches. guard also counts the decoded bytes of every record and dictionary batch against
// --max-put-bytes.
//
// With idle > 0, a client that sends no message with an IPC header for idle (before its first
// message or between two; app_metadata-only messages do not count) fails the stream, which frees
// its --max-concurrent-puts slot. gRPC's Recv takes no deadline, so
// one goroutine per stream (pump) receives and Recv waits for it or the timer.
type putStream struct {
	s       flight.FlightService_DoPutServer
	guard   arrowschema.IPCStreamGuard
	idle    time.Duration // <= 0: wait for the client forever
	desc    *flight.FlightDescriptor
	skipped int
	n       int   // messages received
	err     error // the guard's or the idle timeout's verdict: the stream's failure

	msgs    chan *flight.FlightData // from pump, unbuffered; nil until the first Recv when idle > 0
	pumped  chan struct{}           // closed when pump has ended, pumpErr set
	pumpErr error
	timer   *time.Timer
	// deadline is when the stream fails unless a message with an IPC header arrives first.
	deadline time.Time
}

func (p *putStream) Recv() (*flight.FlightData, error) {
	if p.err != nil {
		return nil, p.err
	}
	for {
		fd, err := p.recv()
		if err != nil {
			return nil, err
		}
		p.n++
		if p.desc == nil && fd.FlightDescriptor != nil {
			p.desc = fd.FlightDescriptor
		}
		if len(fd.DataHeader) == 0 {
			p.skipped++
			continue
		}
		if _, err := p.guard.Check(fd.DataHeader, fd.DataBody); err != nil {
			if errors.Is(err, arrowschema.ErrIPCTooLarge) {
				p.err = fmt.Errorf("%w: DoPut message %d: %v (limits: --max-put-bytes %d for the stream, 0 meaning none; --max-decoded-message-bytes %d for one message); split the epoch or raise the limit",
					errResourceExhausted, p.n, err, p.guard.MaxStreamBytes, p.guard.MaxMessageBytes)
			} else {
				p.err = fmt.Errorf("%w: DoPut message %d is not valid Arrow IPC: %v", errMalformedIPC, p.n, err)
			}
			return nil, p.err
		}
		return fd, nil
	}
}

// recv returns the next message from the client, or fails the stream after p.idle without one.
func (p *putStream) recv() (*flight.FlightData, error) {
	if p.idle <= 0 {
		return p.s.Recv()
	}
	if p.msgs == nil {
		p.msgs, p.pumped = make(chan *flight.FlightData), make(chan struct{})
		p.deadline = time.Now().Add(p.idle)
		p.timer = time.NewTimer(p.idle)
		go p.pump()
	} else {
		p.timer.Reset(time.Until(p.deadline))
	}
	select {
	case fd := <-p.msgs:
		p.timer.Stop()
		// Only a message toward a batch (one with an IPC header) is progress: a stream of
		// app_metadata-only messages is as idle as a silent one.
		if len(fd.DataHeader) > 0 {
			p.deadline = time.Now().Add(p.idle)
		}
		return fd, nil
	case <-p.pumped: // every message pump received was delivered: msgs is unbuffered
		p.timer.Stop()
		return nil, p.pumpErr
	case <-p.timer.C:
		what := "its next message"
		if p.n == 0 {
			what = "its first message"
		}
		p.err = fmt.Errorf("%w: the DoPut stream sent no Arrow data for %v, waiting for %s (--put-idle-timeout; app_metadata-only messages do not count); nothing was committed",
			errPutIdleTimeout, p.idle, what)
		return nil, p.err
	}
}

// pump receives the client's messages for recv until the stream ends (pumpErr is then io.EOF or
// the stream's error). The handler's return cancels the stream's context, which ends pump even
// when nobody takes the message it holds.
func (p *putStream) pump() {
	defer close(p.pumped)
	done := p.s.Context().Done()
	for {
		fd, err := p.s.Recv()
		if err != nil {
			p.pumpErr = err
			return
		}
		select {
		case p.msgs <- fd:
		case <-done:
			p.pumpErr = toStatus(p.s.Context().Err())
			return
		}
	}
}

// batchReader adapts a Flight reader to streaming.BatchSource, classifying its errors: a broken
// IPC stream is the client's bad input, a cancelled call stays a cancellation.
type batchReader struct {
	*flight.Reader
	in  *putStream
	err error // a batch that could not be decoded
}

// Next decodes the next batch. A panic while decoding fails the stream as bad input, never the
// process, and nothing of it is committed. The batch's data is checked against its schema where
// every batch enters the sink (arrowschema.StoreBatch), before any write path reads it.
func (b *batchReader) Next() (ok bool) {
	if b.err != nil {
		return false
	}
	defer func() {
		if r := recover(); r != nil {
			b.err = fmt.Errorf("%w: the DoPut stream's Arrow data could not be decoded: %v", errMalformedIPC, r)
			ok = false
		}
	}()
	return b.Reader.Next()
}

func (b *batchReader) Err() error {
	if b.in.err != nil {
		return b.in.err
	}
	if b.err != nil {
		return b.err
	}
	err := b.Reader.Err()
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return fmt.Errorf("%w data in DoPut stream: %v", errMalformedIPC, err)
}

// newPutReader starts the IPC reader on a DoPut stream: it reads the schema message.
func newPutReader(in *putStream, alloc memory.Allocator) (rdr *flight.Reader, err error) {
	defer func() {
		if r := recover(); r != nil {
			rdr, err = nil, fmt.Errorf("%w: the DoPut stream's schema could not be decoded: %v", errMalformedIPC, r)
		}
	}()
	return flight.NewRecordReader(in, ipc.WithAllocator(alloc))
}

// DoPut lands one stream: an epoch (CMD descriptor) or a plain append (PATH descriptor). The
// PutResult is sent only after the write is durable.
func (s *Service) DoPut(stream flight.FlightService_DoPutServer) error {
	ctx := stream.Context()
	release, err := s.puts.acquire()
	if err != nil {
		return toStatus(err)
	}
	defer release()
	putsInFlight.Add(ctx, 1)
	defer putsInFlight.Add(context.WithoutCancel(ctx), -1)
	in := &putStream{s: stream, idle: s.putIdleTimeout,
		guard: arrowschema.IPCStreamGuard{MaxMessageBytes: s.maxDecodedMessageBytes, MaxStreamBytes: s.maxPutBytes}}
	rdr, err := newPutReader(in, s.alloc)
	if err != nil {
		if in.err != nil {
			return toStatus(in.err)
		}
		if ctx.Err() != nil {
			return toStatus(ctx.Err())
		}
		if errors.Is(err, io.EOF) {
			return toStatus(fmt.Errorf("%w: DoPut stream ended before its schema message", streaming.ErrInvalidRequest))
		}
		if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
			return toStatus(err)
		}
		return toStatus(fmt.Errorf("%w: DoPut stream does not start with an Arrow schema: %v", errMalformedIPC, err))
	}
	defer rdr.Release()
	desc := in.desc
	if desc == nil {
		return toStatus(fmt.Errorf("%w: DoPut stream has no flight descriptor", streaming.ErrInvalidRequest))
	}
	var ack streaming.Ack
	switch desc.Type {
	case flight.DescriptorPATH:
		if len(desc.Path) != 1 {
			return toStatus(fmt.Errorf("%w: PATH descriptor must be one element, the table name; got %q", streaming.ErrInvalidRequest, desc.Path))
		}
		ack, err = s.sink.Append(ctx, desc.Path[0], &batchReader{Reader: rdr, in: in})
	case flight.DescriptorCMD:
		req, perr := parsePutCommand(desc.Cmd)
		if perr != nil {
			return toStatus(perr)
		}
		ack, err = s.sink.WriteEpoch(ctx, req, &batchReader{Reader: rdr, in: in})
	default:
		return toStatus(fmt.Errorf("%w: descriptor type %v is not supported; use CMD (epoch JSON) or PATH (table name)", streaming.ErrInvalidRequest, desc.Type))
	}
	if err != nil {
		return toStatus(err) // logged by the interceptors, at the level of its code
	}
	if ack.Status == streaming.StatusCommitted {
		epochs := int64(0)
		if ack.EpochID != nil {
			epochs = 1
		}
		s.rates.record(ack.Table, ack.Rows, epochs)
	}
	body, err := json.Marshal(ackResult(ack))
	if err != nil {
		return toStatus(err)
	}
	attrs := []any{"status", string(ack.Status), "table", ack.Table, "version", ack.Version, "rows", ack.Rows,
		"metadata_only_messages_skipped", in.skipped}
	if ack.QueryID != "" {
		attrs = append(attrs, "query_id", ack.QueryID)
	}
	if ack.EpochID != nil {
		attrs = append(attrs, "epoch_id", *ack.EpochID)
	}
	if ack.Route != "" {
		attrs = append(attrs, "route", string(ack.Route))
	}
	if ack.Stage != "" {
		attrs = append(attrs, "stage", ack.Stage)
	}
	requestLogger(ctx, s.logger).Debug("DoPut acknowledged", attrs...)
	return stream.Send(&flight.PutResult{AppMetadata: body})
}

// DoGet streams a consistent snapshot of one version of a table, or a table's changes over a
// range of versions.
func (s *Service) DoGet(tk *flight.Ticket, stream flight.FlightService_DoGetServer) error {
	ctx := stream.Context()
	get, err := parseTicket(tk.GetTicket())
	if err != nil {
		return toStatus(err)
	}
	release, err := s.gets.acquire()
	if err != nil {
		return toStatus(err)
	}
	defer release()
	req := get.read
	var sc array.RecordReader
	if get.changes != nil {
		req.Table = get.changes.table
		sc, err = s.readChanges(ctx, get.changes)
	} else {
		req.Allocator = s.getAlloc
		sc, err = s.sink.Read(ctx, req)
	}
	if err != nil {
		return toStatus(err)
	}
	defer sc.Release()
	ra := newReadAhead(ctx, sc)
	defer ra.Close() // before sc.Release: stops the goroutine reading sc
	w := newGetWriter(stream, ipc.WithSchema(sc.Schema()), ipc.WithAllocator(s.getAlloc))
	for ra.Next() {
		if err := writeBounded(w, ra.RecordBatch()); err != nil {
			w.Close()
			return toStatus(err)
		}
	}
	if err := ra.Err(); err != nil {
		if ra.panicStack != nil {
			requestLogger(ctx, s.logger).Error("panic reading a table for DoGet", "table", req.Table, "err", err, "stack", string(ra.panicStack))
		}
		w.Close()
		return toStatus(err)
	}
	return toStatus(w.Close())
}

// tableFromDescriptor reads the table (and optional version) a descriptor names: a PATH of one
// element, or a CMD whose command is a DescriptorCommand.
func tableFromDescriptor(desc *flight.FlightDescriptor) (tableVersion, error) {
	switch desc.GetType() {
	case flight.DescriptorPATH:
		if len(desc.Path) != 1 {
			return tableVersion{}, fmt.Errorf("%w: PATH descriptor must be one element, the table name", streaming.ErrInvalidRequest)
		}
		return tableVersion{table: desc.Path[0]}, nil
	case flight.DescriptorCMD:
		var c DescriptorCommand
		if err := decodeStrict("descriptor command", desc.Cmd, &c); err != nil {
			return tableVersion{}, err
		}
		v, err := versionArg(c.Version)
		if err != nil {
			return tableVersion{}, err
		}
		if c.Changes != nil {
			if c.Version != nil || c.Direct {
				return tableVersion{}, invalidf("descriptor command \"changes\" describes a range of versions: it takes no \"version\" or \"direct\"")
			}
			ch, err := parseChangeRange("descriptor command", c.Table, c.Changes, c.Columns, c.Filter, "")
			return tableVersion{table: c.Table, changes: ch}, err
		}
		if _, _, err := columnsAndFilter("descriptor command", c.Columns, c.Filter); err != nil {
			return tableVersion{}, err
		}
		return tableVersion{table: c.Table, version: v, columns: c.Columns, filter: c.Filter, direct: c.Direct}, nil
	}
	return tableVersion{}, fmt.Errorf("%w: descriptor type %v is not supported", streaming.ErrInvalidRequest, desc.GetType())
}

func (s *Service) manifestFor(ctx context.Context, t tableVersion) (*engine.Table, *engine.Manifest, error) {
	tbl, err := s.sink.Table(ctx, t.table)
	if err != nil {
		return nil, nil, err
	}
	var m *engine.Manifest
	if t.version == 0 {
		m, err = tbl.Latest(ctx)
	} else {
		m, err = tbl.Manifest(ctx, t.version)
	}
	return tbl, m, err
}

// flightInfo describes table t: one endpoint per part of a read plan (groups of fragments of
// about endpointBytes, and the MemWAL rows), every ticket pinned to the version described and to
// the MemWAL state the plan captured, so the union of the endpoints is exactly one read of the
// table at the moment of the call. TotalRecords is what the endpoints return together (-1 with a
// filter: unknown until read).
func (s *Service) flightInfo(ctx context.Context, t tableVersion) (*flight.FlightInfo, error) {
	plan, err := s.sink.PlanRead(ctx, t.table, t.version, s.endpointBytes)
	if err != nil {
		return nil, err
	}
	m := plan.Manifest
	_, filter, err := columnsAndFilter("descriptor command", t.columns, t.filter)
	if err != nil {
		return nil, err
	}
	if filter != nil {
		if err := filter.Validate(m.ArrowSchema()); err != nil {
			return nil, fmt.Errorf("table %s: descriptor command \"filter\": %w", t.table, err)
		}
		plan = prunePartitions(plan, engine.NewPartitionPruner(m, filter))
	}
	schema, err := arrowschema.ProjectSchema(m.ArrowSchema(), t.columns)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", t.table, err)
	}
	info := &flight.FlightInfo{
		Schema:           flight.SerializeSchema(schema, s.alloc),
		FlightDescriptor: &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{t.table}},
		TotalRecords:     plan.Rows,
		TotalBytes:       plan.Bytes,
	}
	if filter != nil {
		info.TotalRecords = -1
	}
	var direct *directPlanner
	if t.direct && filter == nil {
		if direct, err = s.newDirectPlanner(ctx, t.table, m, t.columns); err != nil {
			return nil, err
		}
	}
	for _, p := range plan.Parts {
		if direct != nil && p.Snapshot == "" && !p.MemWAL {
			eps, err := direct.endpoints(ctx, t, p.Fragments)
			if err != nil {
				return nil, err
			}
			info.Endpoint = append(info.Endpoint, eps...)
			continue
		}
		frags := p.Fragments
		tb, err := json.Marshal(Ticket{Table: t.table, Version: &m.Version, Columns: t.columns, Filter: t.filter,
			Fragments: &frags, Snapshot: p.Snapshot, MemWAL: p.MemWAL, TableID: m.TableID})
		if err != nil {
			return nil, err
		}
		info.Endpoint = append(info.Endpoint, &flight.FlightEndpoint{Ticket: &flight.Ticket{Ticket: tb}})
	}
	return info, nil
}

// prunePartitions drops from plan the base fragments whose partition cannot match the filter
// (engine.PartitionPruner), and the parts of base fragments left with none, so the endpoints and
// their bytes are those of the fragments a read of them opens.
func prunePartitions(plan streaming.ReadPlan, pruner *engine.PartitionPruner) streaming.ReadPlan {
	if pruner == nil {
		return plan
	}
	byID := make(map[uint64]engine.Fragment, len(plan.Manifest.Fragments))
	for _, f := range plan.Manifest.Fragments {
		byID[f.ID] = f
	}
	parts := make([]streaming.ReadPart, 0, len(plan.Parts))
	for _, p := range plan.Parts {
		if len(p.Fragments) == 0 {
			parts = append(parts, p)
			continue
		}
		kept := make([]uint64, 0, len(p.Fragments))
		for _, id := range p.Fragments {
			if f := byID[id]; pruner.MayMatch(f) {
				kept = append(kept, id)
			} else {
				plan.Bytes -= f.DataBytes()
				p.Bytes -= f.DataBytes()
			}
		}
		if len(kept) == 0 && !p.MemWAL {
			continue
		}
		p.Fragments = kept
		parts = append(parts, p)
	}
	if len(parts) == 0 { // a plan has a part: one that reads no fragment
		parts = append(parts, streaming.ReadPart{Fragments: []uint64{}})
	}
	plan.Parts = parts
	return plan
}

// GetFlightInfo describes a table at its latest (or a given) version as parallel endpoints
// (flightInfo).
func (s *Service) GetFlightInfo(ctx context.Context, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	t, err := tableFromDescriptor(desc)
	if err != nil {
		return nil, toStatus(err)
	}
	if t.changes != nil {
		info, err := s.changeFlightInfo(ctx, t.changes)
		return info, toStatus(err)
	}
	info, err := s.flightInfo(ctx, t)
	return info, toStatus(err)
}

// GetSchema returns a table's schema (of the descriptor command's columns, when given).
func (s *Service) GetSchema(ctx context.Context, desc *flight.FlightDescriptor) (*flight.SchemaResult, error) {
	t, err := tableFromDescriptor(desc)
	if err != nil {
		return nil, toStatus(err)
	}
	if t.changes != nil {
		schema, err := s.changeSchema(ctx, t.changes)
		if err != nil {
			return nil, toStatus(err)
		}
		return &flight.SchemaResult{Schema: flight.SerializeSchema(schema, s.alloc)}, nil
	}
	_, m, err := s.manifestFor(ctx, t)
	if err != nil {
		return nil, toStatus(err)
	}
	schema, err := arrowschema.ProjectSchema(m.ArrowSchema(), t.columns) // the schema its DoGets return
	if err != nil {
		return nil, toStatus(fmt.Errorf("table %s: %w", t.table, err))
	}
	return &flight.SchemaResult{Schema: flight.SerializeSchema(schema, s.alloc)}, nil
}

// ListFlights lists every table under the root with its latest version.
func (s *Service) ListFlights(c *flight.Criteria, stream flight.FlightService_ListFlightsServer) error {
	ctx := stream.Context()
	names, err := engine.ListTables(ctx, s.sink.Store())
	if err != nil {
		return toStatus(err)
	}
	for _, name := range names {
		info, err := s.flightInfo(ctx, tableVersion{table: name})
		if err != nil {
			requestLogger(ctx, s.logger).Warn("ListFlights: skipping unreadable table", "table", name, "err", err)
			continue
		}
		if err := stream.Send(info); err != nil {
			return err
		}
	}
	return nil
}

// maxGetMessageBytes bounds the body of one DoGet message, so that clients with gRPC's default
// 4 MiB receive limit (arrow-go's Flight client, for one) can read any table.
const maxGetMessageBytes = 2 << 20

// writeBounded writes rec as slices of at most about maxGetMessageBytes each.
func writeBounded(w *ipc.Writer, rec arrow.RecordBatch) error {
	size, n := arrowschema.RecordBytes(rec), rec.NumRows()
	if size <= maxGetMessageBytes || n <= 1 {
		return w.Write(rec)
	}
	step := max(1, n*maxGetMessageBytes/size)
	for off := int64(0); off < n; off += step {
		part := rec.NewSlice(off, min(n, off+step))
		err := w.Write(part)
		part.Release()
		if err != nil {
			return err
		}
	}
	return nil
}
