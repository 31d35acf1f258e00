// Package hostroutingexporter sends each host's telemetry to one replica of
// a gateway tier, so that the gpuviz processor there sees a host's spans and
// GPU samples together: the routing key is a resource attribute (host.name),
// the replica is chosen by rendezvous hashing over the replicas the resolver
// lists (static or DNS), and a replica that fails an export is skipped for a
// while, its hosts moving to their next-best replica. docs/fleet.md says why
// gpuviz has its own and when to use it.
//
//go:generate go tool mdatagen metadata.yaml
package hostroutingexporter // import "github.com/gpuviz/gpuviz/exporter/hostroutingexporter"
