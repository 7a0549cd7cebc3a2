package httpcheck

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// /metrics counts MemWAL shard claims by reason under their Prometheus name: a server writing an
// unkeyed MemWAL table claims one shard when it starts writing and none for the epochs after.
func TestMetricsCountMemWALShardClaims(t *testing.T) {
	grpcAddr, httpAddr := start(t)
	c, err := flight.NewClientWithMiddleware(grpcAddr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := get(t, "http://"+httpAddr+"/metrics")
	create := map[string]any{"memwal": map[string]any{"shards": 2}}
	for e := int64(0); e < 5; e++ {
		for _, q := range []string{"a", "b", "c"} {
			if s := putWith(t, c, map[string]any{"table": "claims", "query_id": q, "epoch_id": e, "create": create}, e*10); s != "committed" {
				t.Fatalf("query %s epoch %d: %s", q, e, s)
			}
		}
	}
	body := get(t, "http://"+httpAddr+"/metrics")
	const name = "flight_sink_memwal_shard_claims_total"
	if v := metricValue(t, body, name, `reason="start"`) - metricValue(t, before, name, `reason="start"`); v != 1 {
		t.Errorf("%s{reason=\"start\"} rose by %v, want 1 (three queries share the server's one shard)\n%s", name, v, body)
	}
	for _, reason := range []string{"fenced", "fallback", "takeover"} {
		if v := metricValue(t, body, name, `reason="`+reason+`"`) - metricValue(t, before, name, `reason="`+reason+`"`); v != 0 {
			t.Errorf("%s{reason=%q} rose by %v, want 0", name, reason, v)
		}
	}
}
