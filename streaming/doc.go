// Package streaming lands streaming micro-batches in tables exactly once.
//
// Every write carries an epoch identity (query_id, epoch_id). Before committing epoch E of query
// Q the sink asks whether (Q, E) is already in the table, in two steps:
//
//  1. The latest manifest's watermark for Q (the last epoch Q committed) answers in O(1): E above
//     it is new, E equal to it is a replay of the version that set it.
//  2. An epoch below the watermark is looked for in the transaction history, newest first, up to
//     the look-back window. Found: a replay. Not found: the query id was reused with a new
//     checkpoint, and the write is refused rather than silently dropped.
//
// The commit itself re-checks the watermark under the engine's optimistic concurrency, so two
// writers racing with the same epoch produce one commit and one duplicate.
//
// Output modes follow Spark's: append commits an Append per non-empty epoch (an empty epoch
// commits nothing), complete commits an Overwrite per epoch (an empty one truncates), update
// appends on tables without a primary key. Only the mode decides whether a write replaces data.
//
// Multi-writer epochs stage each partition's files (engine.Table.WriteStage, under
// <table>/_staging/) and commit the chosen stages as one transaction, exactly once
// (CommitStaged). Stages that are never committed stay invisible, and every cleanup path expires
// them after Options.StageTTL (engine.Table.Cleanup).
//
// On MemWAL tables the sink keeps the epoch rules (the route, the split of an epoch's rows by
// key, the dedupe of a shard put, the ack) and leaves the shards themselves (writers, fencing
// and reopening, fold scheduling, the fold ceiling) to one memwal.ShardSet per table.
package streaming
