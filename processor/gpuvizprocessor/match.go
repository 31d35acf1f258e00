package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// match finds the GPUs that served a request, trying the configured
// methods in order, and says which one matched so users can trust or fix it.
func (c *core) match(req inference.Request) ([]timeline.Key, string) {
	for _, method := range c.cfg.Match.Order {
		var keys []timeline.Key
		switch method {
		case MatchAttribute:
			keys = c.matchAttributes(req)
		case MatchProcess:
			if req.PID != 0 {
				keys = c.store.ProcessGPUs(req.Host, req.PID)
			}
		case MatchHost:
			keys = c.hostGPUs(req.Host)
		}
		if len(keys) > 0 {
			return keys, method
		}
	}
	return nil, ""
}

// matchAttributes resolves GPU UUIDs and indexes named on the span or its
// resource to GPUs the timeline knows.
func (c *core) matchAttributes(req inference.Request) []timeline.Key {
	var keys []timeline.Key
	if len(req.GPUIDs) > 0 {
		for _, k := range c.hostGPUs(req.Host) {
			for _, id := range req.GPUIDs {
				if k.GPU == id {
					keys = append(keys, k)
				}
			}
		}
	}
	for _, idx := range req.GPUIndexes {
		if k, ok := c.store.ByIndex(c.resolveHost(req.Host), idx); ok {
			keys = append(keys, k)
		}
	}
	return keys
}

// hostGPUs returns the GPUs of a host. Spans often lack host.name (an
// inference server rarely runs a resource detector): then, when every GPU
// the timeline knows is on one host — a node-local agent — those are the
// span's GPUs. In a gateway fed by many hosts a span without host.name
// matches nothing this way.
func (c *core) hostGPUs(host string) []timeline.Key {
	return c.store.GPUs(c.resolveHost(host))
}

func (c *core) resolveHost(host string) string {
	if host != "" {
		return host
	}
	all := c.store.GPUs("")
	if len(all) == 0 {
		return ""
	}
	for _, k := range all[1:] {
		if k.Host != all[0].Host {
			return "\x00no single host" // matches no GPU
		}
	}
	return all[0].Host
}
