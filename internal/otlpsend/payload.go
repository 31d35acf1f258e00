// Package otlpsend sends OTLP/gRPC trace exports at a fixed span rate from
// requests encoded once, so that what limits the rate is the receiver, not
// the sender's CPU: each request is a copy of a pre-encoded
// ExportTraceServiceRequest with fresh span IDs and timestamps written into
// it in place (a few stores per span, no protobuf encoding). It counts, per
// outcome, the spans the receiver accepted and those it refused, by gRPC
// code: an overloaded collector tells its clients with ResourceExhausted or
// Unavailable.
package otlpsend // import "github.com/gpuviz/gpuviz/internal/otlpsend"

import (
	"encoding/binary"
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/protobuf/encoding/protowire"
)

// Payload is one encoded ExportTraceServiceRequest and where in its bytes
// the spans' IDs and timestamps lie.
type Payload struct {
	raw   []byte
	spans int
	ids   []int // offsets of trace, span and parent span IDs (and links'): their first 8 bytes are salted
	times []int // offsets of fixed64 timestamps (span start and end, events)
	end   int64 // the latest timestamp: a send shifts them all so that it is the send's time
}

// Spans is the number of spans in the payload.
func (p *Payload) Spans() int { return p.spans }

// Size is the encoded request's size in bytes.
func (p *Payload) Size() int { return len(p.raw) }

// The fields of the OTLP trace messages (opentelemetry/proto/trace/v1 and
// collector/trace/v1) that hold what a send rewrites, and the messages
// that lead to them.
type role int

const (
	roleMessage role = iota
	roleID
	roleTime
)

type field struct {
	role role
	msg  message // roleMessage: its schema
}

type message map[protowire.Number]field

var (
	eventMsg    = message{1: {role: roleTime}}                  // Span.Event.time_unix_nano
	linkMsg     = message{1: {role: roleID}, 2: {role: roleID}} // Span.Link.trace_id, span_id
	spanMsg     = message{1: {role: roleID}, 2: {role: roleID}, 4: {role: roleID}, 7: {role: roleTime}, 8: {role: roleTime}, 11: {msg: eventMsg}, 13: {msg: linkMsg}}
	scopeMsg    = message{2: {msg: spanMsg}}  // ScopeSpans.spans
	resourceMsg = message{2: {msg: scopeMsg}} // ResourceSpans.scope_spans
	requestMsg  = message{1: {msg: resourceMsg}}
)

// Encode encodes td once. Sends copy it and rewrite only IDs and times; a
// zero timestamp or ID is absent from the encoding and stays so.
func Encode(td ptrace.Traces) (*Payload, error) {
	if td.SpanCount() == 0 {
		return nil, errors.New("otlpsend: a payload needs spans")
	}
	raw, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		return nil, fmt.Errorf("otlpsend: encoding the request: %w", err)
	}
	p := &Payload{raw: raw, spans: td.SpanCount()}
	if err := p.scan(raw, 0, requestMsg); err != nil {
		return nil, err
	}
	return p, nil
}

// scan records the offsets of the IDs and timestamps in b, a message of
// schema m that starts at offset base of the request.
func (p *Payload) scan(b []byte, base int, m message) error {
	for at := 0; at < len(b); {
		num, typ, n := protowire.ConsumeTag(b[at:])
		if n < 0 {
			return fmt.Errorf("otlpsend: bad tag at byte %d: %w", base+at, protowire.ParseError(n))
		}
		at += n
		f, known := m[num]
		switch {
		case known && f.role == roleTime && typ == protowire.Fixed64Type:
			p.times = append(p.times, base+at)
			p.end = max(p.end, int64(binary.LittleEndian.Uint64(b[at:])))
		case known && typ == protowire.BytesType:
			v, vn := protowire.ConsumeBytes(b[at:])
			if vn < 0 {
				return fmt.Errorf("otlpsend: bad field at byte %d: %w", base+at, protowire.ParseError(vn))
			}
			start := base + at + vn - len(v)
			switch {
			case f.role == roleMessage:
				if err := p.scan(v, start, f.msg); err != nil {
					return err
				}
			case f.role == roleID && len(v) >= 8: // an empty parent ID is absent, not zeros
				p.ids = append(p.ids, start)
			}
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[at:])
		if vn < 0 {
			return fmt.Errorf("otlpsend: bad field at byte %d: %w", base+at, protowire.ParseError(vn))
		}
		at += vn
	}
	return nil
}

// stamp writes into dst (len(p.raw) bytes) the payload with every ID's
// first 8 bytes XORed with salt, which keeps a span's parent and links
// pointing at the same (salted) spans, and every timestamp shifted so the
// latest is at.
func (p *Payload) stamp(dst []byte, salt uint64, at int64) {
	copy(dst, p.raw)
	for _, o := range p.ids {
		binary.LittleEndian.PutUint64(dst[o:], binary.LittleEndian.Uint64(dst[o:])^salt)
	}
	shift := uint64(at - p.end)
	for _, o := range p.times {
		binary.LittleEndian.PutUint64(dst[o:], binary.LittleEndian.Uint64(dst[o:])+shift)
	}
}
