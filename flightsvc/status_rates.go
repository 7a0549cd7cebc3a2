package flightsvc

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// The status page's rates: the rows and epochs this server acknowledged per table, in rateBuckets
// buckets of rateBucket each (the last rateWindow). Memory is bounded per table (one fixed ring,
// no query ids), and a table the root no longer lists is forgotten at a page render once its
// window is empty.
const (
	rateBucket  = 10 * time.Second
	rateBuckets = 30
	rateWindow  = rateBucket * rateBuckets
)

// tableRates holds one rateRing per table. Safe for concurrent use.
type tableRates struct {
	now    func() time.Time
	mu     sync.Mutex
	tables map[string]*rateRing
}

// rateRing is one table's ring: slot i holds bucket number slot[i] (the Unix time divided by
// rateBucket) and what was acknowledged in it.
type rateRing struct {
	bucket [rateBuckets]int64
	rows   [rateBuckets]int64
	epochs [rateBuckets]int64
}

func newTableRates(now func() time.Time) *tableRates {
	if now == nil {
		now = time.Now
	}
	return &tableRates{now: now, tables: map[string]*rateRing{}}
}

func bucketOf(t time.Time) int64 { return t.UnixNano() / int64(rateBucket) }

// record counts rows and epochs acknowledged for table now.
func (r *tableRates) record(table string, rows, epochs int64) {
	b := bucketOf(r.now())
	r.mu.Lock()
	defer r.mu.Unlock()
	ring := r.tables[table]
	if ring == nil {
		ring = &rateRing{}
		r.tables[table] = ring
	}
	i := int(b % rateBuckets)
	if ring.bucket[i] != b {
		ring.bucket[i], ring.rows[i], ring.epochs[i] = b, 0, 0
	}
	ring.rows[i] += rows
	ring.epochs[i] += epochs
}

// retain forgets every table not in names that acknowledged nothing in the window (a table
// created after names were listed keeps its first acknowledgements).
func (r *tableRates) retain(names []string) {
	keep := make(map[string]bool, len(names))
	for _, n := range names {
		keep[n] = true
	}
	oldest := bucketOf(r.now()) - rateBuckets + 1
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, ring := range r.tables {
		if !keep[n] && slices.Max(ring.bucket[:]) < oldest {
			delete(r.tables, n)
		}
	}
}

// statusRates is a table's acknowledged throughput over the last rateWindow, in /status.json.
type statusRates struct {
	WindowSeconds int     `json:"window_seconds"`
	RowsPerSec    float64 `json:"rows_per_second"`
	EpochsPerSec  float64 `json:"epochs_per_second"`
	// RowsPerBucket are the rows acknowledged in each bucket of BucketSeconds, oldest first, the
	// last one the bucket in progress.
	BucketSeconds int     `json:"bucket_seconds"`
	RowsPerBucket []int64 `json:"rows_per_bucket"`
}

// rates returns table's throughput over the rateWindow that ends now.
func (r *tableRates) rates(table string) statusRates {
	cur := bucketOf(r.now())
	out := statusRates{WindowSeconds: int(rateWindow / time.Second), BucketSeconds: int(rateBucket / time.Second),
		RowsPerBucket: make([]int64, rateBuckets)}
	r.mu.Lock()
	defer r.mu.Unlock()
	ring := r.tables[table]
	if ring == nil {
		return out
	}
	var rows, epochs int64
	for k := 0; k < rateBuckets; k++ {
		b := cur - int64(rateBuckets-1-k)
		i := int(b % rateBuckets)
		if b < 0 || ring.bucket[i] != b {
			continue
		}
		out.RowsPerBucket[k] = ring.rows[i]
		rows += ring.rows[i]
		epochs += ring.epochs[i]
	}
	secs := rateWindow.Seconds()
	out.RowsPerSec, out.EpochsPerSec = float64(rows)/secs, float64(epochs)/secs
	return out
}

// Sparkline geometry (pixels).
const sparkWidth, sparkHeight = 120, 24

// sparkline renders rows per bucket as the points of an SVG polyline, scaled to the largest.
func sparkline(rows []int64) string {
	if len(rows) < 2 {
		return ""
	}
	peak := int64(1)
	for _, v := range rows {
		peak = max(peak, v)
	}
	pts := make([]string, len(rows))
	for i, v := range rows {
		x := float64(i) * sparkWidth / float64(len(rows)-1)
		y := sparkHeight - 1 - float64(v)*(sparkHeight-2)/float64(peak)
		pts[i] = fmt.Sprintf("%.1f,%.1f", x, y)
	}
	return strings.Join(pts, " ")
}

// rateText renders a per-second rate for people: "0", "0.25", "12.5", "1,234".
func rateText(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 1000:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
