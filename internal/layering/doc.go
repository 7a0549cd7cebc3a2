// Package layering holds the test that keeps docs/architecture.md, the module's package map, true:
// every package `go list ./...` prints has a row there, and each imports only the module's
// packages its row allows.
package layering
