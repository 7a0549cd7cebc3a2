// Package benchdata makes the deterministic record batches every flight-sink benchmark writes:
// the 8-column mixed Schema and Batch, the same rows for the same arguments.
package benchdata

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Schema is the 8-column mixed schema every benchmark writes.
var Schema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "user_id", Type: arrow.PrimitiveTypes.Int32},
	{Name: "amount", Type: arrow.PrimitiveTypes.Float64},
	{Name: "ok", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "country", Type: arrow.BinaryTypes.String},
	{Name: "session", Type: arrow.BinaryTypes.String},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	{Name: "score", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
}, nil)

var countries = []string{"US", "DE", "FR", "JP", "BR", "IN", "GB", "CA", "AU", "NL", "ES", "IT"}

// Batch returns rows rows of Schema with ids starting at first. Values are pseudo-random from
// seed, so the same arguments give the same batch.
func Batch(mem memory.Allocator, first int64, rows int, seed uint64) arrow.RecordBatch {
	rng := rand.New(rand.NewPCG(seed, uint64(first)))
	b := array.NewRecordBuilder(mem, Schema)
	defer b.Release()
	ids := b.Field(0).(*array.Int64Builder)
	users := b.Field(1).(*array.Int32Builder)
	amounts := b.Field(2).(*array.Float64Builder)
	oks := b.Field(3).(*array.BooleanBuilder)
	ctry := b.Field(4).(*array.StringBuilder)
	sess := b.Field(5).(*array.StringBuilder)
	tss := b.Field(6).(*array.TimestampBuilder)
	scores := b.Field(7).(*array.Int64Builder)
	b.Reserve(rows)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for i := 0; i < rows; i++ {
		ids.UnsafeAppend(first + int64(i))
		users.UnsafeAppend(rng.Int32N(100000))
		amounts.UnsafeAppend(float64(rng.IntN(1000000)) / 100)
		oks.UnsafeAppend(rng.IntN(10) != 0)
		ctry.Append(countries[rng.IntN(len(countries))])
		sess.Append(fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()))
		tss.UnsafeAppend(arrow.Timestamp(base + first + int64(i)*1000))
		if rng.IntN(5) == 0 {
			scores.AppendNull()
		} else {
			scores.UnsafeAppend(rng.Int64N(1000))
		}
	}
	return b.NewRecordBatch()
}
