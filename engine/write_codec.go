package engine

import (
	"fmt"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// DataCodec is the compression codec of a table's data files (Parquet pages), a table option
// chosen at create and stored in the table config under ConfigDataCodec. docs/storage.md has the
// measured trade-off between them.
type DataCodec string

// The data codecs a table may use.
const (
	// CodecZstd (level 1) gives the smallest files and the most CPU per read; the default.
	CodecZstd DataCodec = "zstd"
	// CodecLZ4Raw decodes at a fraction of zstd's CPU for larger files.
	CodecLZ4Raw DataCodec = "lz4_raw"
	// CodecSnappy is between the two, for readers that lack LZ4_RAW.
	CodecSnappy DataCodec = "snappy"
	// CodecNone stores pages uncompressed.
	CodecNone DataCodec = "none"
)

// DataCodecs lists the data codecs in the order the docs and errors name them.
var DataCodecs = []DataCodec{CodecZstd, CodecLZ4Raw, CodecSnappy, CodecNone}

// DefaultDataCodec is the codec a table created without a data_codec option gets (stamped in
// its config at create, so a later change of this default leaves existing tables as they are):
// zstd, because lz4_raw's cheaper decoding saves a DoGet 9-16 % of its CPU and pyarrow nothing,
// for files 1.9 times as large (docs/storage.md).
const DefaultDataCodec = CodecZstd

// ConfigDataCodec is the table config key holding the table's DataCodec. A table whose config
// lacks it writes zstd, the codec of every table created before the option existed.
const ConfigDataCodec = "flight_sink.data_codec"

// ParseDataCodec returns the codec named s; "" is DefaultDataCodec. Any other name is an error
// that names the option and the accepted values.
func ParseDataCodec(s string) (DataCodec, error) {
	if s == "" {
		return DefaultDataCodec, nil
	}
	for _, c := range DataCodecs {
		if string(c) == s {
			return c, nil
		}
	}
	return "", fmt.Errorf("data_codec must be one of %v, got %q", DataCodecs, s)
}

// DataCodecOf returns the data codec of table version m (zstd when its config has none).
func DataCodecOf(m *Manifest) DataCodec {
	if c, ok := m.Config[ConfigDataCodec]; ok {
		if dc, err := ParseDataCodec(c); err == nil {
			return dc
		}
	}
	return CodecZstd
}

// writerProperties returns the Parquet writer properties of codec c.
func (c DataCodec) writerProperties() []parquet.WriterProperty {
	switch c {
	case CodecLZ4Raw:
		return []parquet.WriterProperty{parquet.WithCompression(compress.Codecs.Lz4Raw)}
	case CodecSnappy:
		return []parquet.WriterProperty{parquet.WithCompression(compress.Codecs.Snappy)}
	case CodecNone:
		return []parquet.WriterProperty{parquet.WithCompression(compress.Codecs.Uncompressed)}
	default:
		return []parquet.WriterProperty{parquet.WithCompression(compress.Codecs.Zstd), parquet.WithCompressionLevel(zstdLevel)}
	}
}

// WithDataCodec makes the writer compress with c instead of the table's codec: for the data files
// of a table's first commit, written before the table (and its config) exists.
func WithDataCodec(c DataCodec) WriterOption { return func(w *Writer) { w.codec = c } }
