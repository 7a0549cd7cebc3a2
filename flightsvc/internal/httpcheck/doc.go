// Package httpcheck holds the tests of flight-sink's HTTP endpoints (/metrics, /healthz,
// /status). They live in their own package so they run in their own process: metrics are
// process-wide, and counting them needs a process no other test writes to.
package httpcheck
