// Package flightsvc is flight-sink's Arrow Flight surface. It only decodes requests, calls the
// streaming sink or the engine, and encodes answers; every rule about epochs lives in streaming
// and every rule about tables in engine. The wire protocol is documented in docs/protocol.md.
//
// flightsvc owns the wire contract: wire.go has a request type for every DoPut command, ticket,
// descriptor command and action body, and a result type for every ack and action result. A
// handler decodes its request strictly (decode.go: unknown fields and wrong JSON types are
// InvalidArgument naming the field), converts it into the domain call's arguments, which carry no
// JSON tags, and converts the domain's answer into its result type. TestProtocolDocExamples keeps
// docs/protocol.md's examples and these types in step.
package flightsvc
