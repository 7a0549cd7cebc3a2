// Package flightsvc is flight-sink's Arrow Flight surface. It only decodes requests, calls the
// streaming sink or the engine, and encodes answers; every rule about epochs lives in streaming
// and every rule about tables in engine. The wire protocol is documented in docs/protocol.md.
package flightsvc
