package flightsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/streaming"
)

// Service implements the Flight service on a streaming.Sink.
type Service struct {
	flight.BaseFlightServer
	sink   *streaming.Sink
	alloc  memory.Allocator
	logger *slog.Logger
	puts   putLimiter // nil: no limit
	// maxPutBytes bounds the Arrow bytes of one DoPut stream (0: no limit).
	maxPutBytes int64
}

// NewService returns the Flight service for sink.
func NewService(sink *streaming.Sink, alloc memory.Allocator, logger *slog.Logger) *Service {
	if alloc == nil {
		alloc = memory.DefaultAllocator
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Service{sink: sink, alloc: alloc, logger: logger}
}

// putStream is the DoPut message stream as the IPC reader sees it. It remembers the descriptor of
// the first message and drops messages that carry no IPC header (app_metadata only, as pyarrow's
// write_metadata sends): the IPC reader cannot decode them and would stop the stream there.
type putStream struct {
	s       flight.FlightService_DoPutServer
	desc    *flight.FlightDescriptor
	skipped int
}

func (p *putStream) Recv() (*flight.FlightData, error) {
	for {
		fd, err := p.s.Recv()
		if err != nil {
			return nil, err
		}
		if p.desc == nil && fd.FlightDescriptor != nil {
			p.desc = fd.FlightDescriptor
		}
		if len(fd.DataHeader) == 0 {
			p.skipped++
			continue
		}
		return fd, nil
	}
}

// batchReader adapts a Flight reader to streaming.BatchSource, classifying its errors: a broken
// IPC stream is the client's bad input, a cancelled call stays a cancellation.
type batchReader struct {
	*flight.Reader
	err   error // a batch that failed validation, or the size limit
	limit int64 // the stream's byte limit (0: none)
	bytes int64
}

// Next validates every batch before the write path sees it: buffers from the wire are untrusted,
// and corrupt offsets would otherwise panic deep in the Parquet encoder.
func (b *batchReader) Next() bool {
	if b.err != nil || !b.Reader.Next() {
		return false
	}
	rec := b.Reader.RecordBatch()
	if b.limit > 0 {
		b.bytes += recordBytes(rec)
		if b.bytes > b.limit {
			b.err = fmt.Errorf("%w: the DoPut stream passed %d bytes of Arrow data (the server's --max-put-bytes); split the epoch or raise the limit", errResourceExhausted, b.limit)
			return false
		}
	}
	for i, col := range rec.Columns() {
		if err := array.ValidateFull(col); err != nil {
			b.err = fmt.Errorf("%w: column %q of the DoPut stream is malformed: %v", streaming.ErrInvalidRequest, rec.Schema().Field(i).Name, err)
			return false
		}
	}
	return true
}

func (b *batchReader) Err() error {
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
	return fmt.Errorf("%w: malformed Arrow IPC data in DoPut stream: %v", streaming.ErrInvalidRequest, err)
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
	in := &putStream{s: stream}
	rdr, err := flight.NewRecordReader(in, ipc.WithAllocator(s.alloc))
	if err != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		if errors.Is(err, io.EOF) {
			return status.Error(codes.InvalidArgument, "DoPut stream ended before its schema message")
		}
		if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
			return st.Err()
		}
		return status.Errorf(codes.InvalidArgument, "DoPut stream does not start with an Arrow schema: %v", err)
	}
	defer rdr.Release()
	desc := in.desc
	if desc == nil {
		return status.Error(codes.InvalidArgument, "DoPut stream has no flight descriptor")
	}
	var ack streaming.Ack
	switch desc.Type {
	case flight.DescriptorPATH:
		if len(desc.Path) != 1 {
			return status.Errorf(codes.InvalidArgument, "PATH descriptor must be one element, the table name; got %q", desc.Path)
		}
		ack, err = s.sink.Append(ctx, desc.Path[0], &batchReader{Reader: rdr, limit: s.maxPutBytes})
	case flight.DescriptorCMD:
		req, _, perr := parsePutCommand(desc.Cmd)
		if perr != nil {
			return toStatus(perr)
		}
		ack, err = s.sink.WriteEpoch(ctx, req, &batchReader{Reader: rdr, limit: s.maxPutBytes})
	default:
		return status.Errorf(codes.InvalidArgument, "descriptor type %v is not supported; use CMD (epoch JSON) or PATH (table name)", desc.Type)
	}
	if err != nil {
		requestLogger(ctx, s.logger).Info("DoPut failed", "err", err)
		return toStatus(err)
	}
	body, err := json.Marshal(ack)
	if err != nil {
		return toStatus(err)
	}
	requestLogger(ctx, s.logger).Debug("DoPut", "ack", string(body), "metadata_only_messages_skipped", in.skipped)
	return stream.Send(&flight.PutResult{AppMetadata: body})
}

// DoGet streams a consistent snapshot of one version of a table.
func (s *Service) DoGet(tk *flight.Ticket, stream flight.FlightService_DoGetServer) error {
	ctx := stream.Context()
	var t ticket
	if err := decodeJSON("ticket", tk.GetTicket(), &t); err != nil {
		return toStatus(err)
	}
	sc, err := s.sink.Scan(ctx, t.Table, t.Version, t.Columns)
	if err != nil {
		return toStatus(err)
	}
	defer sc.Release()
	ra := newReadAhead(ctx, sc)
	defer ra.Close() // before sc.Release: stops the goroutine reading sc
	w := flight.NewRecordWriter(stream, ipc.WithSchema(sc.Schema()), ipc.WithAllocator(s.alloc))
	for ra.Next() {
		if err := writeBounded(w, ra.RecordBatch()); err != nil {
			w.Close()
			return toStatus(err)
		}
	}
	if err := ra.Err(); err != nil {
		w.Close()
		return toStatus(err)
	}
	return toStatus(w.Close())
}

// tableFromDescriptor reads the table (and optional version) a descriptor names.
func tableFromDescriptor(desc *flight.FlightDescriptor) (ticket, error) {
	switch desc.GetType() {
	case flight.DescriptorPATH:
		if len(desc.Path) != 1 {
			return ticket{}, fmt.Errorf("%w: PATH descriptor must be one element, the table name", streaming.ErrInvalidRequest)
		}
		return ticket{Table: desc.Path[0]}, nil
	case flight.DescriptorCMD:
		var t ticket
		if err := decodeJSON("descriptor command", desc.Cmd, &t); err != nil {
			return ticket{}, err
		}
		return t, nil
	}
	return ticket{}, fmt.Errorf("%w: descriptor type %v is not supported", streaming.ErrInvalidRequest, desc.GetType())
}

func (s *Service) manifestFor(ctx context.Context, t ticket) (*engine.Table, *engine.Manifest, error) {
	tbl, err := s.sink.Table(ctx, t.Table)
	if err != nil {
		return nil, nil, err
	}
	var m *engine.Manifest
	if t.Version == 0 {
		m, err = tbl.Latest(ctx)
	} else {
		m, err = tbl.Manifest(ctx, t.Version)
	}
	return tbl, m, err
}

func (s *Service) flightInfo(t ticket, m *engine.Manifest) (*flight.FlightInfo, error) {
	tb, err := json.Marshal(ticket{Table: t.Table, Version: m.Version})
	if err != nil {
		return nil, err
	}
	var bytes int64
	for _, f := range m.Fragments {
		for _, df := range f.Files {
			bytes += df.SizeBytes
		}
	}
	return &flight.FlightInfo{
		Schema:           flight.SerializeSchema(m.ArrowSchema(), s.alloc),
		FlightDescriptor: &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{t.Table}},
		Endpoint:         []*flight.FlightEndpoint{{Ticket: &flight.Ticket{Ticket: tb}}},
		TotalRecords:     m.Rows(),
		TotalBytes:       bytes,
		Ordered:          true,
	}, nil
}

// GetFlightInfo describes a table at its latest (or a given) version; the endpoint's ticket pins
// that version so a later DoGet reads exactly what was described.
func (s *Service) GetFlightInfo(ctx context.Context, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	t, err := tableFromDescriptor(desc)
	if err != nil {
		return nil, toStatus(err)
	}
	_, m, err := s.manifestFor(ctx, t)
	if err != nil {
		return nil, toStatus(err)
	}
	info, err := s.flightInfo(t, m)
	return info, toStatus(err)
}

// GetSchema returns a table's schema.
func (s *Service) GetSchema(ctx context.Context, desc *flight.FlightDescriptor) (*flight.SchemaResult, error) {
	t, err := tableFromDescriptor(desc)
	if err != nil {
		return nil, toStatus(err)
	}
	_, m, err := s.manifestFor(ctx, t)
	if err != nil {
		return nil, toStatus(err)
	}
	return &flight.SchemaResult{Schema: flight.SerializeSchema(m.ArrowSchema(), s.alloc)}, nil
}

// ListFlights lists every table under the root with its latest version.
func (s *Service) ListFlights(c *flight.Criteria, stream flight.FlightService_ListFlightsServer) error {
	ctx := stream.Context()
	names, err := engine.ListTables(ctx, s.sink.Store())
	if err != nil {
		return toStatus(err)
	}
	for _, name := range names {
		_, m, err := s.manifestFor(ctx, ticket{Table: name})
		if err != nil {
			requestLogger(ctx, s.logger).Warn("ListFlights: skipping unreadable table", "table", name, "err", err)
			continue
		}
		info, err := s.flightInfo(ticket{Table: name}, m)
		if err != nil {
			return toStatus(err)
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
func writeBounded(w *flight.Writer, rec arrow.RecordBatch) error {
	size, n := recordBytes(rec), rec.NumRows()
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

// recordBytes is the size of rec's buffers (of the whole arrays, even when rec is a slice).
func recordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	var add func(d arrow.ArrayData)
	add = func(d arrow.ArrayData) {
		for _, b := range d.Buffers() {
			if b != nil {
				n += int64(b.Len())
			}
		}
		for _, c := range d.Children() {
			add(c)
		}
	}
	for _, c := range rec.Columns() {
		add(c.Data())
	}
	return n
}
