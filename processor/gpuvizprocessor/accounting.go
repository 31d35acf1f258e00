package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// AccountingConfig configures the accounting counters
// (gpuviz.accounting.energy and gpuviz.accounting.gpu_time): GPU energy and
// GPU-seconds by host, model and tenant, for charge-back.
type AccountingConfig struct {
	// TenantAttribute names the attribute whose value is a request's
	// tenant (a team, project or user: gpuviz.tenant on the counters),
	// looked up on the span, then on its resource. Non-string values count
	// by their string form. Empty (the default): no tenant dimension, every
	// request's tenant is "unknown", as is a request without the attribute.
	TenantAttribute string `mapstructure:"tenant_attribute"`
	// MaxTenants bounds the tenants kept apart per host; the requests of
	// more are counted under "other" (and in
	// processor_gpuviz_requests_folded) until a tenant has had no request
	// for metrics.idle_expiry. Default 256: a fleet's teams or projects,
	// with room; with metrics.max_models it bounds a host's series at
	// (max_models + 2) × (max_tenants + 2): "unknown" and "other" take no
	// slot (bounded.go; docs/attribution.md gives the bytes).
	MaxTenants int `mapstructure:"max_tenants"`

	_ struct{}
}

func defaultAccounting() AccountingConfig {
	return AccountingConfig{MaxTenants: 256}
}

// validate names the bad fields.
func (a AccountingConfig) validate() error {
	var errs []error
	if a.MaxTenants < 1 {
		errs = append(errs, fmt.Errorf("metrics.accounting.max_tenants: %d must be at least 1 (tenants kept apart per host; the rest are counted as %q)", a.MaxTenants, otherValue))
	}
	if strings.TrimSpace(a.TenantAttribute) != a.TenantAttribute {
		errs = append(errs, fmt.Errorf("metrics.accounting.tenant_attribute: %q has leading or trailing spaces", a.TenantAttribute))
	}
	return errors.Join(errs...)
}

// tenantOf returns the first non-empty value of the attribute name on the
// span, else on its resource; "" where neither has one or name is "".
func tenantOf(name string, span, resource pcommon.Map) string {
	if name == "" {
		return ""
	}
	for _, m := range [...]pcommon.Map{span, resource} {
		if v, ok := m.Get(name); ok {
			if s := v.AsString(); s != "" {
				return s
			}
		}
	}
	return ""
}

// Attribute names of the accounting counters' points, as metadata.yaml
// declares them (the idle and unsampled points go through the generated
// builder, the requests' are written here: TestAccountingGolden pins both).
const (
	attrEnergyUse = "gpuviz.energy.use"
	attrModel     = "gen_ai.request.model"
	attrTenant    = "gpuviz.tenant"
)

// acctKey is a requests series of a host.
type acctKey struct{ model, tenant string }

// acctSeries is one series of both counters: its joules and GPU-seconds.
type acctSeries struct {
	joules, seconds float64
	start           pcommon.Timestamp // the flush before its first point
	updated         time.Time         // its last request, or flush (idle, unsampled)
}

// acctSeriesBytes bounds what a requests series costs in memory beyond its
// names: its map entry (key and pointer, with the map's overhead) and the
// series. Measured 92–128 B as the map fills (TestAccountingSeriesBytes).
const acctSeriesBytes = 160

// hostAccounts are a host's series: its requests' by model and tenant,
// and its GPUs' idle and unsampled time.
type hostAccounts struct {
	requests        map[acctKey]*acctSeries
	idle, unsampled acctSeries
	updated         time.Time // last request, or last flush with one of its GPUs in the books
}

// bookedIdle is what a GPU's books had counted as idle and unsampled at
// the last flush.
type bookedIdle struct {
	measured, idleJ, idleS, unsampledJ, unsampledS float64
}

// accounting keeps the accounting counters. Requests add to their series
// as they are released; idle and unsampled follow the books at each flush.
// Series are cumulative and never go back; a series without a request for
// idle_expiry is dropped (and, should it come back, starts again from 0
// with a new start time). Not safe for concurrent use (the emitter's lock).
type accounting struct {
	idleExpiry time.Duration
	hosts      map[string]*hostAccounts
	booked     map[timeline.Key]bookedIdle
	// mb makes the counters' metrics as metadata.yaml declares them. Only
	// the idle and unsampled points go through it: its record checks every
	// point recorded before for a duplicate, quadratic in a host's series.
	mb *metadata.MetricsBuilder
}

func newAccounting(set processor.Settings, idleExpiry time.Duration) *accounting {
	return &accounting{
		idleExpiry: idleExpiry, hosts: map[string]*hostAccounts{}, booked: map[timeline.Key]bookedIdle{},
		mb: metadata.NewMetricsBuilder(metadata.DefaultMetricsBuilderConfig(), set),
	}
}

func (a *accounting) host(name string, since pcommon.Timestamp) *hostAccounts {
	h := a.hosts[name]
	if h == nil {
		h = &hostAccounts{requests: map[acctKey]*acctSeries{}}
		h.idle.start, h.unsampled.start = since, since
		a.hosts[name] = h
	}
	return h
}

// add counts a request recorded at t (model and tenant already bounded);
// since is the last flush's time, a new series' start.
func (a *accounting) add(host, model, tenant string, joules, seconds float64, t time.Time, since pcommon.Timestamp) {
	h := a.host(host, since)
	k := acctKey{model, tenant}
	s := h.requests[k]
	if s == nil {
		s = &acctSeries{start: since}
		h.requests[k] = s
	}
	s.joules += joules
	s.seconds += seconds
	if t.After(s.updated) {
		s.updated = t
	}
	if t.After(h.updated) {
		h.updated = t
	}
}

// book adds to each host's idle and unsampled series what its GPUs' books
// counted since the last flush. A book that went back (a GPU forgotten
// and seen again: a new book) counts from 0.
func (a *accounting) book(gpus []gpuBooks, now time.Time, since pcommon.Timestamp) {
	seen := make(map[timeline.Key]bool, len(gpus))
	for _, g := range gpus {
		seen[g.key] = true
		t := g.totals
		cur := bookedIdle{measured: t.Measured, idleJ: t.Idle, idleS: t.IdleSeconds, unsampledJ: t.Unsampled, unsampledS: t.UnsampledSeconds}
		last := a.booked[g.key]
		if cur.measured < last.measured || cur.idleJ < last.idleJ || cur.idleS < last.idleS || cur.unsampledJ < last.unsampledJ || cur.unsampledS < last.unsampledS {
			last = bookedIdle{}
		}
		a.booked[g.key] = cur
		h := a.host(g.key.Host, since)
		h.idle.joules += cur.idleJ - last.idleJ
		h.idle.seconds += cur.idleS - last.idleS
		h.unsampled.joules += cur.unsampledJ - last.unsampledJ
		h.unsampled.seconds += cur.unsampledS - last.unsampledS
		if now.After(h.updated) {
			h.updated = now
		}
	}
	for k := range a.booked {
		if !seen[k] {
			delete(a.booked, k)
		}
	}
}

// expire drops the requests series idle for idle_expiry, and the hosts
// with none left that no GPU in the books has kept.
func (a *accounting) expire(now time.Time) {
	for name, h := range a.hosts {
		for k, s := range h.requests {
			if now.Sub(s.updated) > a.idleExpiry {
				delete(h.requests, k)
			}
		}
		if len(h.requests) == 0 && now.Sub(h.updated) > a.idleExpiry {
			delete(a.hosts, name)
		}
	}
}

// hostNames returns the hosts with series, sorted.
func (a *accounting) hostNames() []string {
	out := make([]string, 0, len(a.hosts))
	for name := range a.hosts {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// appendTo adds host's two counters to ms: the idle and unsampled points,
// then the requests' by model and tenant.
func (a *accounting) appendTo(ms pmetric.MetricSlice, host string, ts pcommon.Timestamp) {
	h := a.hosts[host]
	if h == nil {
		return
	}
	idle, unsampled := metadata.AttributeEnergyUseIdle.String(), metadata.AttributeEnergyUseUnsampled.String()
	a.mb.RecordGpuvizAccountingEnergyDataPoint(ts, h.idle.joules, metadata.AttributeEnergyUseIdle, idle, idle)
	a.mb.RecordGpuvizAccountingEnergyDataPoint(ts, h.unsampled.joules, metadata.AttributeEnergyUseUnsampled, unsampled, unsampled)
	a.mb.RecordGpuvizAccountingGpuTimeDataPoint(ts, h.idle.seconds, metadata.AttributeEnergyUseIdle, idle, idle)
	a.mb.RecordGpuvizAccountingGpuTimeDataPoint(ts, h.unsampled.seconds, metadata.AttributeEnergyUseUnsampled, unsampled, unsampled)
	rms := a.mb.Emit().ResourceMetrics()
	if rms.Len() == 0 {
		return // disabled in the builder's config
	}
	keys := make([]acctKey, 0, len(h.requests))
	for k := range h.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y acctKey) int {
		return cmp.Or(strings.Compare(x.model, y.model), strings.Compare(x.tenant, y.tenant))
	})
	requests := metadata.AttributeEnergyUseRequests.String()
	metrics := rms.At(0).ScopeMetrics().At(0).Metrics()
	for i := range metrics.Len() {
		m := metrics.At(i)
		energy := m.Name() == "gpuviz.accounting.energy"
		dps := m.Sum().DataPoints()
		dps.At(0).SetStartTimestamp(h.idle.start)
		dps.At(1).SetStartTimestamp(h.unsampled.start)
		dps.EnsureCapacity(dps.Len() + len(keys))
		for _, k := range keys {
			s := h.requests[k]
			dp := dps.AppendEmpty()
			dp.SetStartTimestamp(s.start)
			dp.SetTimestamp(ts)
			if energy {
				dp.SetDoubleValue(s.joules)
			} else {
				dp.SetDoubleValue(s.seconds)
			}
			attrs := dp.Attributes()
			attrs.EnsureCapacity(3)
			attrs.PutStr(attrEnergyUse, requests)
			attrs.PutStr(attrModel, k.model)
			attrs.PutStr(attrTenant, k.tenant)
		}
	}
	metrics.MoveAndAppendTo(ms)
}
