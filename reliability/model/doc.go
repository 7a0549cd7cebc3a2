// Package model is flight-sink's model-based test of a whole table, as Pebble's metamorphic test
// checks its LSM and FoundationDB's simulation its cluster. It holds no code of its own: its test
// generates random sequences of operations from a seed (epochs in every mode on the direct and the
// MemWAL route, deletes by predicate, compaction, MemWAL flushes and folds, schema merges,
// cleanup, server restarts, drops and re-creates, over random schemas of every stored type with
// nulls at every level), runs them against real `flight-sink serve` processes sharing one root,
// and checks every read against a plain in-memory model of the table after each step.
//
// A failure prints the seed and the operation log; FLIGHT_SINK_MODEL_SEED (or -model.seed)
// replays it. docs/reliability.md describes the operations, the checks and the knobs.
package model
