// Package reliability is flight-sink's reliability harness. It holds no code of its own: its tests
// try hard to break the exactly-once promise and the storage format, and every later change runs
// against them (docs/reliability.md has what is guaranteed, what is tried and the figures).
//
//   - TestTorture: Spark-like producers stream epochs through a direct table and a MemWAL table
//     while the harness kill -9s the `flight-sink serve` process at random moments (mid-commit,
//     mid-flush, mid-compaction) and restarts it on the same root. `go test` runs 10 kill cycles;
//     `make torture` runs 100 (FLIGHT_SINK_TORTURE_CYCLES) with a printed, settable seed
//     (FLIGHT_SINK_TORTURE_SEED).
//   - TestThreeServersOneTable: three server processes on one S3 prefix (a real S3 server, see
//     objstore/storetest), producers spread across them, with kills.
//   - TestMemWALServerKilled: two server processes on one MemWAL table, producers pinned to each;
//     kill -9 of one: its producers fail over to the survivor, which takes over the dead server's
//     shards; every acknowledged epoch is there exactly once after a flush and fold through it.
//   - TestEngineUnderStoreFaults, TestMemWALUnderStoreFaults: the engine and MemWAL on an object
//     store that fails 1% of its calls (objstore/faultstore), on a local disk and on S3.
//
// The model-based test, random operation sequences checked against an in-memory model of the
// table, is its own package: reliability/model.
//
// The fuzz targets live beside the decoders they fuzz (engine, memwal, flightsvc:
// *_fuzz_test.go); `make fuzz` runs each for a fixed time.
package reliability
