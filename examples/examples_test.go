// Package examples_test checks the example deployments: that the Grafana
// dashboards and Prometheus rules name only metrics the distribution emits
// (as the collector's prometheus exporter names them, internal/promnames),
// that the alert rules pass their promtool unit tests, and that the
// Kubernetes, docker-compose and SigNoz files hang together: every
// collector config uses only components builder-config.yaml builds, and
// every pipeline only components it defines.
package examples_test

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gpuviz/gpuviz/internal/promnames"
)

// The tests run in examples/.
const (
	repoRoot     = ".."
	metadataPath = "../receiver/gpuvizreceiver/metadata.yaml"
	// processorMetadataPath declares the processor's derived sums and gauges.
	processorMetadataPath = "../processor/gpuvizprocessor/metadata.yaml"
	builderPath           = "../builder-config.yaml"
)

// prometheusOwn are series Prometheus writes itself, which rules and
// dashboards may use next to the distribution's.
var prometheusOwn = map[string]bool{
	"up": true, "scrape_duration_seconds": true, "scrape_samples_scraped": true,
	"ALERTS": true, "ALERTS_FOR_STATE": true,
}

// emitted is every series name the distribution's metrics become in
// Prometheus: the receiver's (metadata.yaml) and the processor's derived ones.
func emitted(t *testing.T) map[string]promnames.Metric {
	t.Helper()
	ms, err := promnames.FromMetadata(metadataPath)
	require.NoError(t, err)
	return promnames.Set(ms, promnames.Derived())
}

// unknownMetrics returns the metric names in a PromQL expression (or a
// Grafana variable query) that are neither emitted, nor Prometheus' own,
// nor in extra (recording rules).
func unknownMetrics(expr string, known map[string]promnames.Metric, extra map[string]bool) []string {
	var unknown []string
	for _, n := range queryMetricNames(expr) {
		if _, ok := known[n]; !ok && !prometheusOwn[n] && !extra[n] {
			unknown = append(unknown, n)
		}
	}
	return unknown
}

// queryMetricNames is promnames.InExpression that also understands the
// Prometheus data source's variable queries: label_values(selector, label),
// label_values(label), query_result(expr), label_names(), metrics(regex).
func queryMetricNames(q string) []string {
	q = strings.TrimSpace(q)
	inner := func(prefix string) (string, bool) {
		if !strings.HasPrefix(q, prefix+"(") || !strings.HasSuffix(q, ")") {
			return "", false
		}
		return q[len(prefix)+1 : len(q)-1], true
	}
	if body, ok := inner("label_values"); ok {
		if i := lastTopLevelComma(body); i >= 0 {
			return promnames.InExpression(body[:i])
		}
		return nil // label_values(label)
	}
	if body, ok := inner("query_result"); ok {
		return promnames.InExpression(body)
	}
	if _, ok := inner("label_names"); ok {
		return nil
	}
	if _, ok := inner("metrics"); ok {
		return nil
	}
	return promnames.InExpression(q)
}

func lastTopLevelComma(s string) int {
	depth, last := 0, -1
	inString := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString != 0:
			if c == '\\' {
				i++
			} else if c == inString {
				inString = 0
			}
		case c == '"' || c == '\'' || c == '`':
			inString = c
		case c == '(' || c == '{' || c == '[':
			depth++
		case c == ')' || c == '}' || c == ']':
			depth--
		case c == ',' && depth == 0:
			last = i
		}
	}
	return last
}

// TestUnknownMetricsCheck shows that the check the dashboard and rule tests
// rely on fails for names the distribution does not emit.
func TestUnknownMetricsCheck(t *testing.T) {
	known := emitted(t)
	for expr, want := range map[string][]string{
		`hw_power_watts`: nil,
		`sum by (hw_id) (rate(hw_energy_joules_total[5m]))`:                                    nil,
		`histogram_quantile(0.9, sum by (le) (rate(gpuviz_request_energy_joules_bucket[5m])))`: nil,
		`hw_status{hw_state="failed"} == 1`:                                                    nil,
		`up{job="otelcol-gpuviz"} == 0`:                                                        nil,
		`label_values(nvidia_gpu_info_ratio{host_name=~"$host"}, hw_name)`:                     nil,
		`label_values(host_name)`:                                                              nil,
		`query_result(nvidia_gpu_info_ratio)`:                                                  nil,
		`hw_power_watt`:                                                                        {"hw_power_watt"},
		`rate(hw_energy_joules[5m])`:                                                           {"hw_energy_joules"}, // a counter needs _total
		`hw_status_ratio{hw_state="failed"}`:                                                   {"hw_status_ratio"},  // up-down counters get no _ratio
		`hw_gpu_memory_usage_bytes / hw_gpu_memory_total_bytes`:                                {"hw_gpu_memory_total_bytes"},
		`histogram_quantile(0.9, rate(gpuviz_request_energy_per_output_token_joules_per_token_bucket[5m]))`: {"gpuviz_request_energy_per_output_token_joules_per_token_bucket"},
		`label_values(DCGM_FI_DEV_GPU_UTIL, gpu)`:                                                           {"DCGM_FI_DEV_GPU_UTIL"},
		`rate(gpuviz_gpu_bottleneck_time_total[5m]) * on(hw_id) group_left(hw_name) nvidia_gpu_info`:        {"gpuviz_gpu_bottleneck_time_total", "nvidia_gpu_info"},
	} {
		assert.Equal(t, want, unknownMetrics(expr, known, nil), expr)
	}
	assert.Empty(t, unknownMetrics(`job:gpu_power:sum`, known, map[string]bool{"job:gpu_power:sum": true}))
}

func readYAML(t *testing.T, p string, v any) {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, v), p)
}

// readYAMLDocs returns every document of a multi-document YAML file.
func readYAMLDocs(t *testing.T, p string) []map[string]any {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var docs []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		require.NoError(t, err, p)
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// --- Grafana ---------------------------------------------------------------

type gridPos struct{ X, Y, W, H int }

type dashPanel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	GridPos    *gridPos        `json:"gridPos"`
	Datasource *dsRef          `json:"datasource"`
	Targets    []dashTarget    `json:"targets"`
	Panels     []dashPanel     `json:"panels"`
	Repeat     string          `json:"repeat"`
	Options    json.RawMessage `json:"options"`
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashTarget struct {
	Datasource *dsRef `json:"datasource"`
	Expr       string `json:"expr"`
	RefID      string `json:"refId"`
	Exemplar   bool   `json:"exemplar"`
	QueryType  string `json:"queryType"`
}

type dashboard struct {
	Title         string      `json:"title"`
	UID           string      `json:"uid"`
	SchemaVersion int         `json:"schemaVersion"`
	Panels        []dashPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Datasource *dsRef `json:"datasource"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Links []struct {
		URL string `json:"url"`
	} `json:"links"`
}

var dataSourceUIDs = []string{"prometheus", "jaeger"}

// allPanels flattens rows' collapsed panels into the list.
func allPanels(ps []dashPanel) []dashPanel {
	var out []dashPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob("grafana/dashboards/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files, "no dashboards in grafana/dashboards")
	out := map[string]dashboard{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var d dashboard
		dec := json.NewDecoder(bytes.NewReader(b))
		require.NoError(t, dec.Decode(&d), f)
		out[f] = d
	}
	return out
}

// dashboardExprs returns every PromQL expression of a dashboard: panel
// targets and variable queries, keyed by where they are.
func dashboardExprs(d dashboard) map[string]string {
	out := map[string]string{}
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			if tg.Expr != "" {
				out[fmt.Sprintf("panel %q target %s", p.Title, tg.RefID)] = tg.Expr
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			out[fmt.Sprintf("variable %s", v.Name)] = v.Definition
		}
	}
	return out
}

func TestDashboards(t *testing.T) {
	known := emitted(t)
	dashboards := loadDashboards(t)
	uids := map[string]string{}
	for f, d := range dashboards {
		uids[d.UID] = f
	}
	assert.Len(t, uids, len(dashboards), "dashboard uids must differ")

	for f, d := range dashboards {
		t.Run(filepath.Base(f), func(t *testing.T) {
			assert.NotEmpty(t, d.Title, "title")
			assert.NotEmpty(t, d.UID, "uid")
			assert.GreaterOrEqual(t, d.SchemaVersion, 36, "schemaVersion: a modern dashboard")
			require.NotEmpty(t, d.Panels, "panels")

			ids := map[int]bool{}
			var boxes []struct {
				title string
				pos   gridPos
			}
			for _, p := range allPanels(d.Panels) {
				assert.NotEmpty(t, p.Type, "panel %q has no type", p.Title)
				assert.False(t, ids[p.ID], "panel id %d used twice", p.ID)
				ids[p.ID] = true
				if assert.NotNil(t, p.GridPos, "panel %q has no gridPos", p.Title) {
					g := *p.GridPos
					assert.True(t, g.W > 0 && g.H > 0 && g.X >= 0 && g.Y >= 0 && g.X+g.W <= 24,
						"panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
					for _, b := range boxes {
						overlap := g.X < b.pos.X+b.pos.W && b.pos.X < g.X+g.W && g.Y < b.pos.Y+b.pos.H && b.pos.Y < g.Y+g.H
						assert.False(t, overlap, "panels %q and %q overlap", p.Title, b.title)
					}
					boxes = append(boxes, struct {
						title string
						pos   gridPos
					}{p.Title, g})
				}
				if p.Type == "row" || p.Type == "text" {
					continue
				}
				if assert.NotNil(t, p.Datasource, "panel %q has no datasource", p.Title) {
					assert.Contains(t, dataSourceUIDs, p.Datasource.UID, "panel %q", p.Title)
				}
				assert.NotEmpty(t, p.Targets, "panel %q has no targets", p.Title)
				for _, tg := range p.Targets {
					assert.NotEmpty(t, tg.RefID, "panel %q: target without refId", p.Title)
					ds := p.Datasource
					if tg.Datasource != nil {
						ds = tg.Datasource
						assert.Contains(t, dataSourceUIDs, ds.UID, "panel %q target %s", p.Title, tg.RefID)
					}
					if ds != nil && ds.UID == "prometheus" {
						assert.NotEmpty(t, tg.Expr, "panel %q target %s: no expr", p.Title, tg.RefID)
					}
					if tg.Exemplar {
						// Prometheus keeps exemplars on counters and histograms only.
						var carries bool
						for _, n := range promnames.InExpression(tg.Expr) {
							if m, ok := known[n]; ok && (m.Kind == promnames.Counter || m.Kind == promnames.Histogram) {
								carries = true
							}
						}
						assert.True(t, carries, "panel %q target %s asks for exemplars but reads no counter or histogram", p.Title, tg.RefID)
					}
				}
			}
			for where, expr := range dashboardExprs(d) {
				assert.Empty(t, unknownMetrics(expr, known, nil), "%s: %s names metrics the distribution does not emit", where, expr)
			}
			for _, v := range d.Templating.List {
				if v.Type == "query" && assert.NotNil(t, v.Datasource, "variable %s", v.Name) {
					assert.Contains(t, dataSourceUIDs, v.Datasource.UID, "variable %s", v.Name)
				}
			}
			for _, l := range d.Links {
				if rest, ok := strings.CutPrefix(l.URL, "/d/"); ok {
					uid, _, _ := strings.Cut(rest, "/")
					assert.Contains(t, uids, uid, "link %s to a dashboard that is not here", l.URL)
				}
			}
		})
	}
}

// TestDashboardVariableAll checks that a variable's "All" keeps the
// narrowing of its own query. A variable whose query reads other variables
// ($gpu from $namespace and $pod) and whose allValue is a catch-all (".*")
// makes every panel that filters on it ignore those variables when All is
// selected (the default), unless the panel applies them itself.
func TestDashboardVariableAll(t *testing.T) {
	varRef := regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)
	refs := func(s string) map[string]bool {
		out := map[string]bool{}
		for _, m := range varRef.FindAllStringSubmatch(s, -1) {
			out[m[1]] = true
		}
		return out
	}
	for f, d := range loadDashboards(t) {
		var raw struct {
			Templating struct {
				List []struct {
					Name       string `json:"name"`
					Type       string `json:"type"`
					Definition string `json:"definition"`
					AllValue   string `json:"allValue"`
					IncludeAll bool   `json:"includeAll"`
				} `json:"list"`
			} `json:"templating"`
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &raw), f)
		exprs := dashboardExprs(d)
		for _, v := range raw.Templating.List {
			if v.Type != "query" || !v.IncludeAll || v.AllValue == "" {
				continue
			}
			narrowedBy := refs(v.Definition)
			for where, expr := range exprs {
				used := refs(expr)
				if !used[v.Name] || strings.HasPrefix(where, "variable") {
					continue
				}
				for n := range narrowedBy {
					assert.True(t, used[n], "%s: %s filters on $%s, whose All (allValue %q) drops the narrowing by $%s its query applies, and does not filter on $%s itself",
						filepath.Base(f), where, v.Name, v.AllValue, n, n)
				}
			}
		}
	}
}

// TestDashboardHostFilter checks that on a dashboard with a host variable
// every panel query over series that carry host_name applies it: a panel
// that does not shows every host's data under one host's selection.
func TestDashboardHostFilter(t *testing.T) {
	checkDashboardFilter(t, "host", "host_name", "variable host")
}

// TestDashboardGPUFilter checks that on a dashboard with a gpu variable
// every panel query over series that carry hw_id applies it: a panel that
// does not lists every GPU's rows while the rest of the dashboard shows the
// one GPU selected.
func TestDashboardGPUFilter(t *testing.T) {
	checkDashboardFilter(t, "gpu", "hw_id", "variable")
}

// checkDashboardFilter checks that on every dashboard with the template
// variable name, each query (but those whose place starts with skip) that
// reads series carrying label filters that label on $name.
func checkDashboardFilter(t *testing.T, name, label, skip string) {
	t.Helper()
	known := emitted(t)
	labels := seriesLabels(t)
	ref := regexp.MustCompile(regexp.QuoteMeta(label) + `\s*=~\s*"\$\{?` + regexp.QuoteMeta(name) + `\b`)
	for f, d := range loadDashboards(t) {
		has := false
		for _, v := range d.Templating.List {
			has = has || v.Name == name
		}
		if !has {
			continue
		}
		for where, expr := range dashboardExprs(d) {
			if strings.HasPrefix(where, skip) {
				continue
			}
			var labelled bool
			for _, n := range queryMetricNames(expr) {
				if m, ok := known[n]; ok && labels[m.Name][label] {
					labelled = true
				}
			}
			if labelled {
				assert.Regexp(t, ref, expr, "%s: %s reads series with %s but ignores $%s", filepath.Base(f), where, label, name)
			}
		}
	}
}

// TestDashboardsMarkSimulatedData checks that every dashboard says when what
// it shows comes from the simulated backend: a panel selects the series
// whose gpuviz_backend names simulated, alone or beside another backend (the
// processor's series of a host whose GPUs come from several backends carry
// them all, comma-separated).
func TestDashboardsMarkSimulatedData(t *testing.T) {
	selector := regexp.MustCompile(`gpuviz_backend\s*(=~|=)\s*"([^"]*)"`)
	for f, d := range loadDashboards(t) {
		var marks bool
		for where, expr := range dashboardExprs(d) {
			for _, m := range selector.FindAllStringSubmatch(expr, -1) {
				matches := func(v string) bool { return m[2] == v }
				if m[1] == "=~" {
					re, err := regexp.Compile("^(?:" + m[2] + ")$")
					require.NoError(t, err, "%s: %s", where, expr)
					matches = re.MatchString
				}
				if !matches("simulated") {
					continue
				}
				marks = true
				if strings.Contains(expr, "gpuviz_gpu_") || strings.Contains(expr, "gpuviz_request_") {
					assert.True(t, matches("nvml,simulated") && matches("dcgm,simulated"),
						"%s: %s misses the processor's series of hosts with several backends", filepath.Base(f), where)
				}
			}
		}
		assert.True(t, marks, "%s: no panel shows whether its data is simulated (gpuviz_backend)", filepath.Base(f))
	}
}

func TestGrafanaProvisioning(t *testing.T) {
	known := emitted(t)
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name     string         `yaml:"name"`
			UID      string         `yaml:"uid"`
			Type     string         `yaml:"type"`
			URL      string         `yaml:"url"`
			JSONData map[string]any `yaml:"jsonData"`
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/datasources.yaml", &ds)
	assert.Equal(t, 1, ds.APIVersion)
	byUID := map[string]int{}
	for i, d := range ds.Datasources {
		byUID[d.UID] = i
	}
	require.Contains(t, byUID, "prometheus")
	require.Contains(t, byUID, "jaeger")
	prom := ds.Datasources[byUID["prometheus"]]
	jaeger := ds.Datasources[byUID["jaeger"]]
	assert.Equal(t, "prometheus", prom.Type)
	assert.Equal(t, "http://prometheus:9090", prom.URL)
	assert.Equal(t, "jaeger", jaeger.Type)
	assert.Equal(t, "http://jaeger:16686", jaeger.URL)

	dests, _ := prom.JSONData["exemplarTraceIdDestinations"].([]any)
	require.Len(t, dests, 1, "exemplarTraceIdDestinations")
	dest, _ := dests[0].(map[string]any)
	assert.Equal(t, "trace_id", dest["name"], "the label OTel exemplars carry in Prometheus")
	assert.Equal(t, "jaeger", dest["datasourceUid"])

	if t2m, ok := jaeger.JSONData["tracesToMetrics"].(map[string]any); ok {
		assert.Equal(t, "prometheus", t2m["datasourceUid"])
		queries, _ := t2m["queries"].([]any)
		for _, q := range queries {
			expr, _ := q.(map[string]any)["query"].(string)
			assert.Empty(t, unknownMetrics(expr, known, nil), "tracesToMetrics query %s", expr)
		}
	}

	var prov struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/dashboards.yaml", &prov)
	require.Len(t, prov.Providers, 1)
	assert.Equal(t, "file", prov.Providers[0].Type)
	assert.Equal(t, "/var/lib/grafana/dashboards", prov.Providers[0].Options.Path)
}

// --- Prometheus --------------------------------------------------------------

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name          string                            `yaml:"name"`
		InputSeries   []struct{ Series, Values string } `yaml:"input_series"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `yaml:"exp_labels"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func TestAlertRules(t *testing.T) {
	known := emitted(t)
	var rf ruleFile
	readYAML(t, "prometheus/rules.yaml", &rf)
	require.NotEmpty(t, rf.Groups)
	records := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				records[r.Record] = true
			}
		}
	}
	alerts := map[string]bool{}
	for _, g := range rf.Groups {
		assert.Contains(t, []string{"gpuviz", "gpuviz-accounting"}, g.Name)
		for _, r := range g.Rules {
			assert.Empty(t, unknownMetrics(r.Expr, known, records), "rule %s%s: %s", r.Alert, r.Record, r.Expr)
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			assert.Contains(t, []string{"info", "warning", "critical"}, r.Labels["severity"], "alert %s: severity", r.Alert)
			assert.NotEmpty(t, r.Annotations["summary"], "alert %s: summary", r.Alert)
			assert.NotEmpty(t, r.Annotations["description"], "alert %s: description", r.Alert)
			if strings.HasPrefix(r.Alert, "GPU") {
				assert.Contains(t, r.Annotations["summary"], "$labels.hw_id", "alert %s names the GPU", r.Alert)
			}
		}
	}

	// Every alert has a promtool test in which it fires.
	var rt ruleTests
	readYAML(t, "prometheus/rules_test.yaml", &rt)
	assert.Equal(t, []string{"rules.yaml"}, rt.RuleFiles)
	fires := map[string]bool{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			assert.Contains(t, alerts, a.Alertname, "test %q: no such alert", tc.Name)
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	for a := range alerts {
		assert.True(t, fires[a], "alert %s has no promtool test in which it fires", a)
	}
}

// TestRuleTestSeries checks that the input series of rules_test.yaml look
// like what Prometheus stores from the collector: names it emits, and only
// labels that series can have (the metric's attributes with dots turned
// into underscores, the exported resource attributes, the scope and the
// scrape's job and instance).
func TestRuleTestSeries(t *testing.T) {
	known := emitted(t)
	allowed := seriesLabels(t)
	var rt ruleTests
	readYAML(t, "prometheus/rules_test.yaml", &rt)
	seriesRE := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}$`)
	labelRE := regexp.MustCompile(`\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?`)
	for _, tc := range rt.Tests {
		for _, s := range tc.InputSeries {
			m := seriesRE.FindStringSubmatch(strings.TrimSpace(s.Series))
			if !assert.NotNil(t, m, "test %q: cannot read series %s", tc.Name, s.Series) {
				continue
			}
			name, body := m[1], m[2]
			labels := map[string]string{}
			for _, lm := range labelRE.FindAllStringSubmatch(body, -1) {
				labels[lm[1]] = lm[2]
			}
			assert.Equal(t, strings.Count(body, "="), len(labels), "series %s: unread labels", s.Series)
			metric, ok := known[name]
			if !ok {
				assert.True(t, prometheusOwn[name], "test %q: series %s is not emitted", tc.Name, name)
				continue
			}
			for l := range labels {
				assert.True(t, allowed[metric.Name][l], "test %q: %s cannot have the label %s", tc.Name, name, l)
			}
			if _, ok := labels["hw_id"]; !ok && allowed[metric.Name]["hw_id"] {
				t.Errorf("test %q: %s without hw_id", tc.Name, name)
			}
		}
	}
}

// seriesLabels returns, per OpenTelemetry metric name, the Prometheus labels
// its series can carry.
func seriesLabels(t *testing.T) map[string]map[string]bool {
	t.Helper()
	var md struct {
		Metrics map[string]struct {
			Attributes []string `yaml:"attributes"`
		} `yaml:"metrics"`
	}
	readYAML(t, metadataPath, &md)
	common := []string{"job", "instance", "host_name", "gpuviz_backend", "otel_scope_name", "otel_scope_version"}
	under := func(s string) string { return strings.ReplaceAll(s, ".", "_") }
	out := map[string]map[string]bool{}
	for name, m := range md.Metrics {
		set := map[string]bool{}
		for _, a := range append(slices.Clone(common), m.Attributes...) {
			set[under(a)] = true
		}
		out[name] = set
	}
	// The processor's sums and gauges are declared in its metadata.yaml;
	// its histograms, which mdatagen cannot generate, in histograms.go.
	var pmd struct {
		Attributes map[string]struct {
			NameOverride string `yaml:"name_override"`
		} `yaml:"attributes"`
		Metrics map[string]struct {
			Attributes []string `yaml:"attributes"`
		} `yaml:"metrics"`
	}
	readYAML(t, processorMetadataPath, &pmd)
	derived := map[string][]string{
		"gpuviz.request.energy":                  {"gen_ai.request.model", "gpuviz.bottleneck", "le"},
		"gpuviz.request.energy_per_output_token": {"gen_ai.request.model", "gpuviz.bottleneck", "le"},
		"gpuviz.request.gpu_busy_time":           {"gen_ai.request.model", "gpuviz.bottleneck", "le"},
	}
	for name, m := range pmd.Metrics {
		for _, a := range m.Attributes {
			if o := pmd.Attributes[a].NameOverride; o != "" {
				a = o
			}
			derived[name] = append(derived[name], a)
		}
	}
	for _, m := range promnames.Derived() {
		attrs, ok := derived[m.Name]
		require.True(t, ok, "seriesLabels: add the labels of %s", m.Name)
		set := map[string]bool{"job": true, "instance": true, "host_name": true, "gpuviz_backend": true, "otel_scope_name": true}
		for _, a := range attrs {
			set[under(a)] = true
		}
		out[m.Name] = set
	}
	return out
}

// lookPromtool finds promtool. .ci/run installs it (make prometheus) before
// make test, so under CI its absence fails the test rather than skipping
// the rules' checks silently; elsewhere the test is skipped.
func lookPromtool(t *testing.T) string {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err == nil {
		return promtool
	}
	const why = "promtool is not on PATH: install Prometheus (make prometheus, or Debian/Ubuntu: apt-get install prometheus) to check the rules, run their unit tests and check every dashboard query"
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
	return ""
}

// TestPromtool runs promtool on the rules, their unit tests, the Prometheus
// configs and every dashboard query.
func TestPromtool(t *testing.T) {
	promtool := lookPromtool(t)
	run := func(t *testing.T, dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		assert.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
	t.Run("check rules", func(t *testing.T) { run(t, "prometheus", "check", "rules", "rules.yaml") })
	t.Run("test rules", func(t *testing.T) { run(t, "prometheus", "test", "rules", "rules_test.yaml") })
	t.Run("check config", func(t *testing.T) { run(t, "prometheus", "check", "config", "prometheus.yml") })
	t.Run("check compose config", func(t *testing.T) { run(t, "docker-compose", "check", "config", "prometheus.yml") })

	// Every dashboard query as a recording rule, Grafana's variables
	// replaced: promtool parses them all.
	t.Run("dashboard queries", func(t *testing.T) {
		var rules []map[string]string
		for _, d := range loadDashboards(t) {
			exprs := dashboardExprs(d)
			for _, where := range slices.Sorted(maps.Keys(exprs)) {
				expr := exprs[where]
				if strings.HasPrefix(where, "variable") {
					continue // Grafana's own functions
				}
				rules = append(rules, map[string]string{
					"record": fmt.Sprintf("dashboard:%s:q%d", strings.ReplaceAll(d.UID, "-", "_"), len(rules)),
					"expr":   grafanaToPromQL(expr),
				})
			}
		}
		require.NotEmpty(t, rules)
		b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboards", "rules": rules}}})
		require.NoError(t, err)
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboards.yaml"), b, 0o644))
		run(t, dir, "check", "rules", "dashboards.yaml")
	})
}

var grafanaVar = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*`)

// grafanaToPromQL replaces Grafana's variables: intervals by durations,
// everything else (template variables, used in label matchers) by ".*".
func grafanaToPromQL(expr string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		switch strings.Trim(v, "${}") {
		case "__rate_interval", "__interval", "__range", "__range_s":
			return "5m"
		}
		return ".*"
	})
}

// --- collector configs ---------------------------------------------------------

// builderComponents reads builder-config.yaml: the component types the
// distribution has, per kind.
func builderComponents(t *testing.T) map[string]map[string]bool {
	t.Helper()
	// Only the component lists: dist and replaces have other shapes.
	var raw map[string]yaml.Node
	readYAML(t, builderPath, &raw)
	out := map[string]map[string]bool{}
	for _, kind := range []string{"receivers", "processors", "exporters", "extensions", "connectors"} {
		node, ok := raw[kind]
		if !ok {
			continue
		}
		var list []struct {
			GoMod  string `yaml:"gomod"`
			Import string `yaml:"import"`
		}
		require.NoError(t, node.Decode(&list), kind)
		out[kind] = map[string]bool{}
		suffix := strings.TrimSuffix(kind, "s") // receiver, processor, ...
		for _, c := range list {
			pkg := c.Import
			if pkg == "" {
				pkg, _, _ = strings.Cut(c.GoMod, " ")
			}
			base := path.Base(pkg)
			typ, ok := componentTypes[base]
			if !ok {
				typ = strings.TrimSuffix(base, suffix)
			}
			require.NotEqual(t, base, typ, "cannot tell the component type of %s: add it to componentTypes", pkg)
			out[kind][typ] = true
		}
	}
	return out
}

// componentTypes are the component types that are not their package name
// without its kind suffix.
var componentTypes = map[string]string{
	"memorylimiterprocessor": "memory_limiter",
	"healthcheckextension":   "health_check",
	"gpuvizviewextension":    "gpuviz_view",
	// The OTLP exporters' types; "otlp" and "otlphttp" are deprecated
	// aliases the collector warns about.
	"otlpexporter":     "otlp_grpc",
	"otlphttpexporter": "otlp_http",
}

func TestBuilderComponents(t *testing.T) {
	got := builderComponents(t)
	want := map[string]map[string]bool{
		"receivers":  {"gpuviz": true, "otlp": true, "prometheus": true, "kafka": true},
		"processors": {"gpuviz": true, "batch": true, "memory_limiter": true, "resource": true},
		"exporters":  {"debug": true, "otlp_grpc": true, "otlp_http": true, "prometheus": true, "kafka": true, "hostrouting": true},
		"extensions": {"health_check": true, "pprof": true, "zpages": true, "gpuviz_view": true, "bearertokenauth": true},
	}
	assert.Equal(t, want, got, "builder-config.yaml changed: update the examples and this table")
}

// TestBuilderOneCollectorRelease: every collector module the distribution
// builds with is of the release builder-config.yaml names (core v0.N.0 with
// its v1 modules, contrib v0.N.x), the gpuviz components' dependencies
// included: they come into ocb's go.mod at the versions this go.mod requires.
func TestBuilderOneCollectorRelease(t *testing.T) {
	var cfg map[string]yaml.Node
	readYAML(t, builderPath, &cfg)
	var release string // v0.N of the core components
	var imports []string
	for _, kind := range []string{"receivers", "processors", "exporters", "extensions", "connectors"} {
		var list []struct {
			GoMod  string `yaml:"gomod"`
			Import string `yaml:"import"`
		}
		if node, ok := cfg[kind]; ok {
			require.NoError(t, node.Decode(&list), kind)
		}
		for _, c := range list {
			mod, version, _ := strings.Cut(c.GoMod, " ")
			switch {
			case strings.HasPrefix(mod, "github.com/gpuviz/gpuviz"):
				imports = append(imports, c.Import)
			case strings.HasPrefix(mod, "go.opentelemetry.io/collector/"):
				v0 := version[:strings.LastIndex(version, ".")]
				require.True(t, release == "" || release == v0, "builder-config.yaml: core components at %s and %s", release, v0)
				release = v0
			}
		}
	}
	require.NotEmpty(t, release, "builder-config.yaml: no core component")
	require.NotEmpty(t, imports, "builder-config.yaml: no gpuviz component")

	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}"}, imports...)...)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	require.NoError(t, err, "go list -deps %v", imports)
	v1 := map[string][]string{} // the v1 core modules by version: one version
	for line := range strings.Lines(string(out)) {
		mod, version, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch {
		case strings.HasPrefix(mod, "go.opentelemetry.io/collector/") && strings.HasPrefix(version, "v1."):
			v1[version] = append(v1[version], mod)
		case strings.HasPrefix(mod, "go.opentelemetry.io/collector/"),
			strings.HasPrefix(mod, "github.com/open-telemetry/opentelemetry-collector-contrib/"):
			assert.True(t, strings.HasPrefix(version, release+"."), "%s %s: the distribution is collector %s (builder-config.yaml)", mod, version, release)
		}
	}
	assert.Len(t, v1, 1, "the v1 core modules at one version: %v", v1)
}

// TestREADMEVersions holds the versions README.md names to the files that
// pin them: the Go of go.mod's go line (the oldest that builds), ocb of
// the Makefile, mdatagen of go.mod, and the collector core and contrib
// releases of builder-config.yaml.
func TestREADMEVersions(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	require.NoError(t, err)
	makefile, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	require.NoError(t, err)
	builder, err := os.ReadFile(builderPath)
	require.NoError(t, err)
	find := func(what string, re string, in []byte) string {
		t.Helper()
		m := regexp.MustCompile(re).FindSubmatch(in)
		require.NotNil(t, m, "%s: %s", what, re)
		return string(m[1])
	}
	goLine := find("go.mod's go line", `(?m)^go (\S+)$`, gomod)
	ocb := find("Makefile's OCB_VERSION", `(?m)^OCB_VERSION := (\S+)$`, makefile)
	core := find("builder-config.yaml's core", `go\.opentelemetry\.io/collector/\S+ (v0\.\S+)`, builder)
	contrib := find("builder-config.yaml's contrib", `opentelemetry-collector-contrib/\S+ (v\S+)`, builder)
	v1 := find("go.mod's v1 core", `(?m)^\s+go\.opentelemetry\.io/collector/component (v1\.\S+)$`, gomod)
	mdatagen := find("go.mod's mdatagen", `(?m)^\s+go\.opentelemetry\.io/collector/cmd/mdatagen (v\S+)`, gomod)

	assert.Equal(t, goLine, find("README's Go", `Requirements: Go ([\d.]+)`, readme), "README's Go: go.mod's go line is the oldest Go that builds")
	assert.Equal(t, ocb, find("README's ocb", "(?s)pinned:\\s+ocb (v\\S+) into `\\.tools/`", readme), "README's ocb")
	assert.Equal(t, core, ocb, "Makefile's ocb and builder-config.yaml's core release")
	assert.Equal(t, mdatagen, find("README's mdatagen", `mdatagen (v\S+) as a Go tool`, readme), "README's mdatagen")
	assert.Equal(t, ocb, find("README's Distribution", "builds `otelcol-gpuviz` with ocb (v\\S+),", readme), "README's Distribution")
	assert.Equal(t, core+" / "+v1, find("README's core", `Collector core is (v\S+ / v[\d.]+)`, readme), "README's collector core")
	assert.Equal(t, contrib, find("README's contrib", `(?s)bearertokenauth\) are (v[\d.]+),`, readme), "README's contrib")
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asStrings(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// collectorConfigProblems checks a collector config against the
// distribution: only components it builds, pipelines that reference defined
// components, and a Prometheus exporter that speaks OpenMetrics (exemplars).
func collectorConfigProblems(cfg map[string]any, builder map[string]map[string]bool) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	typeOf := func(id string) string { typ, _, _ := strings.Cut(id, "/"); return typ }
	defined := map[string]map[string]bool{}
	for _, kind := range []string{"receivers", "processors", "exporters", "extensions", "connectors"} {
		defined[kind] = map[string]bool{}
		for _, id := range slices.Sorted(maps.Keys(asMap(cfg[kind]))) {
			defined[kind][id] = true
			if !builder[kind][typeOf(id)] {
				add("%s %q is not in builder-config.yaml", strings.TrimSuffix(kind, "s"), id)
			}
			if kind == "exporters" && typeOf(id) == "prometheus" && asMap(asMap(cfg[kind])[id])["enable_open_metrics"] != true {
				add("exporter %s without enable_open_metrics: exemplars need OpenMetrics", id)
			}
		}
	}
	service := asMap(cfg["service"])
	if service == nil {
		return append(problems, "no service section")
	}
	for _, ext := range asStrings(service["extensions"]) {
		if !defined["extensions"][ext] {
			add("service.extensions names undefined %q", ext)
		}
	}
	pipelines := asMap(service["pipelines"])
	if len(pipelines) == 0 {
		add("no pipelines")
	}
	for _, id := range slices.Sorted(maps.Keys(pipelines)) {
		if !slices.Contains([]string{"traces", "metrics", "logs"}, typeOf(id)) {
			add("pipeline %s: unknown signal", id)
		}
		pm := asMap(pipelines[id])
		rs, ps, es := asStrings(pm["receivers"]), asStrings(pm["processors"]), asStrings(pm["exporters"])
		if len(rs) == 0 || len(es) == 0 {
			add("pipeline %s needs receivers and exporters", id)
		}
		for _, r := range rs {
			if !defined["receivers"][r] && !defined["connectors"][r] {
				add("pipeline %s names undefined receiver %q", id, r)
			}
		}
		for _, pr := range ps {
			if !defined["processors"][pr] {
				add("pipeline %s names undefined processor %q", id, pr)
			}
		}
		for _, e := range es {
			if !defined["exporters"][e] && !defined["connectors"][e] {
				add("pipeline %s names undefined exporter %q", id, e)
			}
		}
	}
	return problems
}

// collectorConfigs finds every collector config in examples/: files with
// receivers and a service section, the ConfigMaps' embedded configs, and
// the Helm values' alternateConfig.
func collectorConfigs(t *testing.T) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			return err
		}
		for i, doc := range readYAMLDocs(t, p) {
			switch {
			case doc["receivers"] != nil && doc["service"] != nil:
				out[p] = doc
			case doc["kind"] == "ConfigMap":
				for key, v := range asMap(doc["data"]) {
					s, _ := v.(string)
					var cfg map[string]any
					if yaml.Unmarshal([]byte(s), &cfg) == nil && cfg["receivers"] != nil && cfg["service"] != nil {
						out[fmt.Sprintf("%s#%d:%s", p, i, key)] = cfg
					}
				}
			case doc["alternateConfig"] != nil:
				out[p+"#alternateConfig"] = asMap(doc["alternateConfig"])
			}
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

func TestCollectorConfigs(t *testing.T) {
	builder := builderComponents(t)
	configs := collectorConfigs(t)
	for _, want := range []string{
		"quickstart/config.yaml",
		"dcgm-exporter/config.yaml",
		"docker-compose/collector.yaml",
		"signoz/collector.yaml",
		"kubernetes/daemonset.yaml#2:config.yaml",
		"kubernetes/gateway.yaml#0:config.yaml",
		"kubernetes/helm-values.yaml#alternateConfig",
		"tls/gateway.yaml",
		"tls/agent.yaml",
		"fleet/agent.yaml",
		"fleet/gateway.yaml",
		"kafka/agent.yaml",
		"kafka/gateway.yaml",
		"kubernetes/gateway-join/agent-config.yaml#0:config.yaml",
		"kubernetes/gateway-join/gateway-config.yaml#0:config.yaml",
		"slurm/config.yaml",
	} {
		assert.Contains(t, configs, want, "collector config not found")
	}
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		t.Run(name, func(t *testing.T) { assert.Empty(t, collectorConfigProblems(configs[name], builder)) })
	}

	// The negative case: the check catches a component the build lacks, a
	// pipeline naming an undefined one, and a Prometheus exporter without
	// OpenMetrics.
	bad := map[string]any{
		"receivers":  map[string]any{"otlp": nil, "hostmetrics": nil},
		"processors": map[string]any{"batch": nil},
		"exporters":  map[string]any{"debug": nil, "prometheus": map[string]any{"endpoint": ":8889"}},
		"extensions": map[string]any{},
		"service": map[string]any{
			"extensions": []any{"health_check"},
			"pipelines": map[string]any{
				"metrics": map[string]any{"receivers": []any{"otlp"}, "processors": []any{"resource"}, "exporters": []any{"debug"}},
				"traces":  map[string]any{"receivers": []any{"otlp"}, "exporters": []any{"otlp_grpc/jaeger"}},
			},
		},
	}
	assert.Equal(t, []string{
		`receiver "hostmetrics" is not in builder-config.yaml`,
		"exporter prometheus without enable_open_metrics: exemplars need OpenMetrics",
		`service.extensions names undefined "health_check"`,
		`pipeline metrics names undefined processor "resource"`,
		`pipeline traces names undefined exporter "otlp_grpc/jaeger"`,
	}, collectorConfigProblems(bad, builder))
}

// TestCollectorConfigsValidate runs `otelcol-gpuviz validate` on every
// config when the distribution is built (make build), or GPUVIZ_COLLECTOR
// names it.
func TestCollectorConfigsValidate(t *testing.T) {
	bin := os.Getenv("GPUVIZ_COLLECTOR")
	if bin == "" {
		bin = filepath.Join(repoRoot, "_build", "otelcol-gpuviz")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s not built (make build): skipping otelcol-gpuviz validate", bin)
	}
	bin, err := filepath.Abs(bin)
	require.NoError(t, err)
	dir := t.TempDir()
	configs := collectorConfigs(t)
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		t.Run(name, func(t *testing.T) {
			b, err := yaml.Marshal(configs[name])
			require.NoError(t, err)
			p := filepath.Join(dir, strings.NewReplacer("/", "_", "#", "_", ":", "_").Replace(name))
			require.NoError(t, os.WriteFile(p, b, 0o644))
			cmd := exec.Command(bin, "validate", "--config", p)
			cmd.Env = append(os.Environ(), "NODE_IP=127.0.0.1", "POD_IP=127.0.0.1", "MY_POD_IP=127.0.0.1", "NODE_NAME=gpu-node-1",
				// examples/fleet and examples/kafka
				"GPUVIZ_HOST_NAME=gpu-node-1", "GPUVIZ_GATEWAYS=[127.0.0.1:4317]", "GPUVIZ_LISTEN=127.0.0.1:4317",
				"GPUVIZ_TRACES_ENDPOINT=127.0.0.1:4317", "GPUVIZ_METRICS_ENDPOINT=127.0.0.1:4317", "GPUVIZ_KAFKA=[127.0.0.1:9092]")
			out, err := cmd.CombinedOutput()
			assert.NoError(t, err, "otelcol-gpuviz validate %s:\n%s", name, out)
		})
	}
}

// --- Kubernetes ------------------------------------------------------------------

func dig(v any, keys ...string) any {
	for _, k := range keys {
		v = asMap(v)[k]
	}
	return v
}

// TestKustomizeOverlay checks examples/kubernetes/gateway-join: every file
// it names exists, and each patch names an object of its bases.
func TestKustomizeOverlay(t *testing.T) {
	const dir = "kubernetes/gateway-join"
	k := readYAMLDocs(t, filepath.Join(dir, "kustomization.yaml"))
	require.Len(t, k, 1)
	objects := map[string]bool{}
	for _, r := range asStrings(k[0]["resources"]) {
		for _, d := range readYAMLDocs(t, filepath.Join(dir, r)) {
			objects[fmt.Sprint(d["kind"], "/", dig(d, "metadata", "name"))] = true
		}
	}
	patches, _ := k[0]["patches"].([]any)
	require.NotEmpty(t, patches)
	for _, p := range patches {
		path, _ := asMap(p)["path"].(string)
		for _, d := range readYAMLDocs(t, filepath.Join(dir, path)) {
			key := fmt.Sprint(d["kind"], "/", dig(d, "metadata", "name"))
			assert.True(t, objects[key], "%s patches %s, which no resource of the overlay defines", path, key)
		}
	}
	assert.True(t, objects["Service/gpuviz-gateway-headless"], "the agents' DNS resolver needs the headless Service")

	// kustomize loads no file outside a kustomization's folder unless told
	// (`kubectl apply -k` cannot be): where the overlay names such files,
	// no doc may tell users to apply it with -k.
	var outside bool
	for _, r := range asStrings(k[0]["resources"]) {
		outside = outside || strings.HasPrefix(filepath.Clean(r), "..")
	}
	if outside {
		for _, doc := range []string{"../README.md", "../docs/fleet.md", "kubernetes/README.md", filepath.Join(dir, "kustomization.yaml")} {
			b, err := os.ReadFile(doc)
			require.NoError(t, err)
			assert.False(t, strings.Contains(string(b), "apply -k examples/"+dir), "%s: kustomize refuses the overlay's files outside its folder", doc)
		}
	}
	// The documented build, where kubectl is installed.
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("kubectl not installed: the overlay is not built")
		return
	}
	out, err := exec.Command(kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", dir).CombinedOutput()
	require.NoError(t, err, "kubectl kustomize %s:\n%s", dir, out)
	assert.Contains(t, string(out), "hostrouting", "the agents route")
	assert.Contains(t, string(out), "name: gpuviz-gateway-headless")
	built := yamlDocs(t, bytes.NewReader(out))
	checkScrapedPortsServed(t, "gateway-join", built)
	checkWorkloadsGOMEMLIMIT(t, "gateway-join", built)
}

// yamlDocs decodes every document of a multi-document YAML stream.
func yamlDocs(t *testing.T, r io.Reader) []map[string]any {
	t.Helper()
	var docs []map[string]any
	dec := yaml.NewDecoder(r)
	for {
		var d map[string]any
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			return docs
		} else {
			require.NoError(t, err)
		}
		docs = append(docs, d)
	}
}

// mebibytes reads a Kubernetes quantity (512Mi, 2Gi) or a GOMEMLIMIT
// (316MiB) in MiB.
func mebibytes(t *testing.T, q string) float64 {
	t.Helper()
	for suffix, f := range map[string]float64{"MiB": 1, "GiB": 1024, "Mi": 1, "Gi": 1024} {
		if n, ok := strings.CutSuffix(q, suffix); ok && !strings.HasSuffix(n, "i") && !strings.HasSuffix(n, "B") {
			v, err := strconv.ParseFloat(n, 64)
			require.NoError(t, err, q)
			return v * f
		}
	}
	t.Fatalf("%q: no MiB, GiB, Mi or Gi", q)
	return 0
}

// checkGOMEMLIMIT checks docs/reliability.md's rule ("Sizing memory for a
// container limit") for a collector in a container: GOMEMLIMIT is at most
// memory_limiter's soft limit + 16 MiB. Above it, memory_limiter refuses
// data on garbage the runtime has not yet collected (its forced GC runs at
// most every 10 s).
func checkGOMEMLIMIT(t *testing.T, what string, cfg map[string]any, gomemlimit, memoryLimit string) {
	t.Helper()
	ml := asMap(dig(cfg, "processors", "memory_limiter"))
	require.NotNil(t, ml, what)
	limit, _ := ml["limit_mib"].(int)
	spike, _ := ml["spike_limit_mib"].(int)
	soft := float64(limit - spike)
	if pct, ok := ml["limit_percentage"].(int); ok {
		spikePct, _ := ml["spike_limit_percentage"].(int)
		soft = mebibytes(t, memoryLimit) * float64(pct-spikePct) / 100
	}
	require.NotEmpty(t, gomemlimit, "%s: GOMEMLIMIT", what)
	got := mebibytes(t, gomemlimit)
	assert.True(t, got <= soft+17, "%s: GOMEMLIMIT %s, memory_limiter's soft limit %.1f MiB: want at most %.0fMiB", what, gomemlimit, soft, soft+16)
}

// eachWorkload calls fn with every DaemonSet and Deployment of docs: a key
// naming it, its pod spec, and the collector configs of the ConfigMaps it
// mounts (from docs).
func eachWorkload(t *testing.T, what string, docs []map[string]any, fn func(key string, spec map[string]any, cfgs []map[string]any)) {
	t.Helper()
	configMaps := map[string]map[string]any{}
	for _, d := range docs {
		if d["kind"] == "ConfigMap" {
			configMaps[fmt.Sprint(dig(d, "metadata", "name"))] = d
		}
	}
	for _, d := range docs {
		if d["kind"] != "DaemonSet" && d["kind"] != "Deployment" {
			continue
		}
		key := fmt.Sprint(what, ": ", d["kind"], "/", dig(d, "metadata", "name"))
		spec := asMap(dig(d, "spec", "template", "spec"))
		var cfgs []map[string]any
		for _, v := range spec["volumes"].([]any) {
			cm := configMaps[fmt.Sprint(dig(v, "configMap", "name"))]
			for _, text := range asMap(cm["data"]) {
				var cfg map[string]any
				require.NoError(t, yaml.Unmarshal([]byte(fmt.Sprint(text)), &cfg), key)
				cfgs = append(cfgs, cfg)
			}
		}
		fn(key, spec, cfgs)
	}
}

// checkWorkloadsGOMEMLIMIT applies checkGOMEMLIMIT to every DaemonSet and
// Deployment of docs whose config is a ConfigMap of docs.
func checkWorkloadsGOMEMLIMIT(t *testing.T, what string, docs []map[string]any) {
	t.Helper()
	eachWorkload(t, what, docs, func(key string, spec map[string]any, cfgs []map[string]any) {
		c := asMap(spec["containers"].([]any)[0])
		var gomemlimit string
		for _, e := range c["env"].([]any) {
			if asMap(e)["name"] == "GOMEMLIMIT" {
				gomemlimit, _ = asMap(e)["value"].(string)
			}
		}
		memoryLimit, _ := dig(c, "resources", "limits", "memory").(string)
		for _, cfg := range cfgs {
			checkGOMEMLIMIT(t, key, cfg, gomemlimit, memoryLimit)
		}
	})
}

// checkScrapedPortsServed checks that every container port README.md's
// scrape config keeps (named prometheus or prom-exporter) is one a
// prometheus exporter of that pod's collector config listens on: a port
// without one is a target that is always down (GpuvizCollectorDown).
func checkScrapedPortsServed(t *testing.T, what string, docs []map[string]any) {
	t.Helper()
	eachWorkload(t, what, docs, func(key string, spec map[string]any, cfgs []map[string]any) {
		served := map[string]bool{}
		for _, cfg := range cfgs {
			for id, e := range asMap(cfg["exporters"]) {
				if id == "prometheus" || strings.HasPrefix(id, "prometheus/") {
					ep, _ := asMap(e)["endpoint"].(string)
					served[ep[strings.LastIndex(ep, ":")+1:]] = true
				}
			}
		}
		for _, c := range spec["containers"].([]any) {
			ports, _ := asMap(c)["ports"].([]any)
			for _, p := range ports {
				name, _ := asMap(p)["name"].(string)
				if name == "prometheus" || name == "prom-exporter" {
					port := fmt.Sprint(asMap(p)["containerPort"])
					assert.True(t, served[port], "%s: port %s (%s) is scraped by README.md's config, but no prometheus exporter listens on it", key, port, name)
				}
			}
		}
	})
}

func TestKubernetesManifests(t *testing.T) {
	objects := map[string]map[string]any{} // kind/name
	var all []map[string]any
	for _, f := range []string{"kubernetes/daemonset.yaml", "kubernetes/gateway.yaml"} {
		docs := readYAMLDocs(t, f)
		require.NotEmpty(t, docs, f)
		all = append(all, docs...)
		for i, d := range docs {
			kind, _ := d["kind"].(string)
			name, _ := dig(d, "metadata", "name").(string)
			assert.NotEmpty(t, d["apiVersion"], "%s document %d: apiVersion", f, i)
			assert.NotEmpty(t, kind, "%s document %d: kind", f, i)
			assert.NotEmpty(t, name, "%s document %d: metadata.name", f, i)
			if kind != "Namespace" {
				assert.Equal(t, "gpuviz", dig(d, "metadata", "namespace"), "%s %s/%s: namespace", f, kind, name)
			}
			objects[kind+"/"+name] = d
		}
	}
	require.Contains(t, objects, "Namespace/gpuviz")
	checkScrapedPortsServed(t, "daemonset.yaml, gateway.yaml", all)
	checkWorkloadsGOMEMLIMIT(t, "daemonset.yaml, gateway.yaml", all)

	checkWorkload := func(key string) map[string]any {
		w := objects[key]
		require.NotNil(t, w, key)
		spec := asMap(dig(w, "spec", "template", "spec"))
		labels := asMap(dig(w, "spec", "template", "metadata", "labels"))
		for k, v := range asMap(dig(w, "spec", "selector", "matchLabels")) {
			assert.Equal(t, v, labels[k], "%s: selector does not match the pod labels", key)
		}
		containers, _ := spec["containers"].([]any)
		require.Len(t, containers, 1, key)
		c := asMap(containers[0])
		// The config: --config names a file of a mounted ConfigMap.
		args := asStrings(c["args"])
		require.Len(t, args, 1, key)
		cfgPath, ok := strings.CutPrefix(args[0], "--config=")
		require.True(t, ok, "%s: args %v", key, args)
		var mounted bool
		for _, vm := range spec["volumes"].([]any) {
			vol := asMap(vm)
			cm, _ := dig(vol, "configMap", "name").(string)
			if cm == "" {
				continue
			}
			require.Contains(t, objects, "ConfigMap/"+cm, "%s: volume of a ConfigMap that is not here", key)
			for _, m := range c["volumeMounts"].([]any) {
				mount := asMap(m)
				if mount["name"] == vol["name"] {
					rel, err := filepath.Rel(mount["mountPath"].(string), cfgPath)
					require.NoError(t, err)
					if _, ok := asMap(objects["ConfigMap/"+cm]["data"])[rel]; ok {
						mounted = true
					}
				}
			}
		}
		assert.True(t, mounted, "%s: %s is no key of a mounted ConfigMap", key, cfgPath)
		return spec
	}

	ds := checkWorkload("DaemonSet/gpuviz-agent")
	assert.Equal(t, true, ds["hostPID"], "the DaemonSet needs hostPID for process attribution")
	// The kubelet's PodResources socket is mounted where the receiver reads it.
	var podResources bool
	for _, v := range ds["volumes"].([]any) {
		if dig(v, "hostPath", "path") == "/var/lib/kubelet/pod-resources" {
			for _, m := range asMap(ds["containers"].([]any)[0])["volumeMounts"].([]any) {
				podResources = podResources || asMap(m)["name"] == asMap(v)["name"] && asMap(m)["mountPath"] == "/var/lib/kubelet/pod-resources"
			}
		}
	}
	assert.True(t, podResources, "the pod-resources hostPath is mounted")
	// The agent runs without the socket (one info line); a hostPath of type
	// Directory would keep the pod from starting where it is missing.
	for _, v := range ds["volumes"].([]any) {
		if dig(v, "hostPath", "path") == "/var/lib/kubelet/pod-resources" {
			assert.NotEqual(t, "Directory", dig(v, "hostPath", "type"), "a missing socket directory must not keep the agent from starting")
		}
	}
	// Spans come through a node-local Service: the agent with their GPUs.
	assert.Equal(t, "Local", dig(objects["Service/gpuviz-agent"], "spec", "internalTrafficPolicy"))
	assert.Equal(t, "true", dig(ds, "nodeSelector", "nvidia.com/gpu.present"), "GPU node selector")
	assert.Equal(t, "nvidia", ds["runtimeClassName"])
	if ds["hostNetwork"] == true {
		assert.Equal(t, "ClusterFirstWithHostNet", ds["dnsPolicy"], "host network needs ClusterFirstWithHostNet for cluster DNS")
	}
	sa, _ := ds["serviceAccountName"].(string)
	assert.Contains(t, objects, "ServiceAccount/"+sa)
	agent := asMap(ds["containers"].([]any)[0])
	var ports []int
	for _, p := range agent["ports"].([]any) {
		port, _ := asMap(p)["containerPort"].(int)
		ports = append(ports, port)
		if hp, ok := asMap(p)["hostPort"].(int); ok && ds["hostNetwork"] == true {
			assert.Equal(t, port, hp, "with hostNetwork a hostPort must equal its containerPort")
		}
	}
	assert.Contains(t, ports, 4317, "OTLP gRPC port")
	assert.Contains(t, ports, 4318, "OTLP HTTP port")
	env := map[string]string{}
	for _, e := range agent["env"].([]any) {
		em := asMap(e)
		v, _ := em["value"].(string)
		env[em["name"].(string)] = v
	}
	assert.Equal(t, "all", env["NVIDIA_VISIBLE_DEVICES"])
	assert.Equal(t, "utility", env["NVIDIA_DRIVER_CAPABILITIES"])
	assert.Nil(t, dig(agent, "resources", "limits", "nvidia.com/gpu"), "monitoring only: no GPU allocated")
	assert.NotNil(t, dig(agent, "resources", "limits"), "resource limits")
	assert.Equal(t, false, dig(agent, "securityContext", "allowPrivilegeEscalation"))

	gw := checkWorkload("Deployment/gpuviz-gateway")
	assert.Equal(t, 2, dig(objects["Deployment/gpuviz-gateway"], "spec", "replicas"))
	svc := objects["Service/gpuviz-gateway"]
	require.NotNil(t, svc)
	podLabels := asMap(dig(objects["Deployment/gpuviz-gateway"], "spec", "template", "metadata", "labels"))
	for k, v := range asMap(dig(svc, "spec", "selector")) {
		assert.Equal(t, v, podLabels[k], "the Service selects the gateway's pods")
	}
	portNames := map[string]bool{}
	for _, p := range asMap(gw["containers"].([]any)[0])["ports"].([]any) {
		portNames[asMap(p)["name"].(string)] = true
	}
	for _, p := range dig(svc, "spec", "ports").([]any) {
		tp, _ := asMap(p)["targetPort"].(string)
		assert.True(t, portNames[tp], "Service targetPort %q is no container port", tp)
	}
	// The agent exports to the gateway's Service.
	agentCfg := collectorConfigs(t)["kubernetes/daemonset.yaml#2:config.yaml"]
	require.NotNil(t, agentCfg)
	assert.Equal(t, "gpuviz-gateway.gpuviz.svc.cluster.local:4317", dig(agentCfg, "exporters", "otlp_grpc", "endpoint"))
	// The gpuviz processor runs in the agent, and not in the gateway.
	gwCfg := collectorConfigs(t)["kubernetes/gateway.yaml#0:config.yaml"]
	require.NotNil(t, gwCfg)
	assert.Contains(t, asMap(agentCfg["processors"]), "gpuviz")
	assert.Equal(t, true, dig(agentCfg, "receivers", "gpuviz", "kubernetes", "pod_resources", "enabled"))
	assert.NotContains(t, asMap(gwCfg["processors"]), "gpuviz")
}

// helmChartKeys are the top-level keys of the opentelemetry-collector
// chart's values schema (additionalProperties: false) that the values use.
var helmChartKeys = []string{
	"mode", "image", "command", "hostNetwork", "dnsPolicy", "service", "nodeSelector", "tolerations",
	"extraEnvs", "ports", "podAnnotations", "resources", "useGOMEMLIMIT", "securityContext",
	"podSecurityContext", "serviceAccount", "alternateConfig", "config", "presets", "affinity",
	"priorityClassName", "extraVolumes", "extraVolumeMounts", "livenessProbe", "readinessProbe",
	"fullnameOverride", "nameOverride", "hostPID", "runtimeClassName",
}

// TestPodMonitor checks that the Prometheus Operator's PodMonitor scrapes the
// pods of both the manifests and the Helm chart, on the ports README.md's
// scrape config keeps, under a job GpuvizCollectorDown watches.
func TestPodMonitor(t *testing.T) {
	docs := readYAMLDocs(t, "kubernetes/podmonitor.yaml")
	require.Len(t, docs, 1)
	pm := docs[0]
	require.Equal(t, "PodMonitor", pm["kind"])
	selector := asMap(dig(pm, "spec", "selector", "matchLabels"))
	require.NotEmpty(t, selector)

	var agentLabels map[string]any
	for _, d := range readYAMLDocs(t, "kubernetes/daemonset.yaml") {
		if d["kind"] == "DaemonSet" {
			agentLabels = asMap(dig(d, "spec", "template", "metadata", "labels"))
		}
	}
	var helm map[string]any
	readYAML(t, "kubernetes/helm-values.yaml", &helm)
	// The chart labels its pods app.kubernetes.io/name: <nameOverride, else
	// the chart's name> and app.kubernetes.io/instance: <release>.
	chartLabels := map[string]any{"app.kubernetes.io/name": helm["nameOverride"], "app.kubernetes.io/instance": "gpuviz-agent"}
	for k, v := range selector {
		assert.Equal(t, v, agentLabels[k], "daemonset.yaml's agent pods lack the PodMonitor's label %s", k)
		assert.Equal(t, v, chartLabels[k], "the Helm chart's pods lack the PodMonitor's label %s", k)
	}

	var ports []string
	for _, e := range dig(pm, "spec", "podMetricsEndpoints").([]any) {
		ports = append(ports, asMap(e)["port"].(string))
	}
	assert.ElementsMatch(t, []string{"prometheus", "prom-exporter"}, ports, "the exporter's port names in daemonset.yaml and helm-values.yaml")

	var rules ruleFile
	readYAML(t, "prometheus/rules.yaml", &rules)
	var expr string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "GpuvizCollectorDown" {
				expr = r.Expr
			}
		}
	}
	m := regexp.MustCompile(`job\s*=~\s*"([^"]+)"`).FindStringSubmatch(expr)
	require.NotNil(t, m, "GpuvizCollectorDown: %s selects no job by regex", expr)
	job := regexp.MustCompile("^(?:" + m[1] + ")$")
	// The operator's job for a PodMonitor without jobLabel.
	assert.Regexp(t, job, fmt.Sprintf("%s/%s", dig(pm, "metadata", "namespace"), dig(pm, "metadata", "name")), "GpuvizCollectorDown misses the PodMonitor's job")
	var prom struct {
		ScrapeConfigs []struct {
			JobName string `yaml:"job_name"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "prometheus/prometheus.yml", &prom)
	assert.Regexp(t, job, prom.ScrapeConfigs[0].JobName, "GpuvizCollectorDown misses prometheus.yml's job")
}

func TestHelmValues(t *testing.T) {
	var v map[string]any
	readYAML(t, "kubernetes/helm-values.yaml", &v)
	for k := range v {
		assert.Contains(t, helmChartKeys, k, "the chart's values schema rejects unknown keys; %q is not one this test knows the chart has", k)
	}
	assert.Equal(t, "daemonset", v["mode"])
	// As daemonset.yaml: both are chart values (hostPID from 0.143.1).
	assert.Equal(t, true, v["hostPID"], "process attribution needs the host PID namespace")
	assert.Equal(t, "nvidia", v["runtimeClassName"])
	assert.Equal(t, "otelcol-gpuviz", dig(v, "command", "name"), "the chart runs /<command.name>")
	assert.NotEmpty(t, dig(v, "image", "repository"))
	assert.Equal(t, "true", dig(v, "nodeSelector", "nvidia.com/gpu.present"))
	assert.Equal(t, 4317, dig(v, "ports", "otlp", "containerPort"))
	for name, p := range asMap(v["ports"]) {
		if strings.HasPrefix(name, "jaeger") || name == "zipkin" {
			assert.Equal(t, false, asMap(p)["enabled"], "port %s: the build has no such receiver", name)
		}
	}
	// The chart gives otlp and otlp-http a hostPort in daemonset mode
	// (values.yaml: hostPort: 4317, 4318), merged into these values unless
	// removed with null: spans come through the node-local Service instead.
	for _, name := range []string{"otlp", "otlp-http"} {
		hp, set := asMap(asMap(v["ports"])[name])["hostPort"]
		assert.True(t, set && hp == nil, "port %s: hostPort must be null to remove the chart's default", name)
	}
	require.NotNil(t, v["alternateConfig"], "alternateConfig")
	var gomemlimit string
	for _, e := range v["extraEnvs"].([]any) {
		if asMap(e)["name"] == "GOMEMLIMIT" {
			gomemlimit, _ = asMap(e)["value"].(string)
		}
	}
	memoryLimit, _ := dig(v, "resources", "limits", "memory").(string)
	checkGOMEMLIMIT(t, "helm-values.yaml", asMap(v["alternateConfig"]), gomemlimit, memoryLimit)
	assert.Equal(t, "/var/lib/kubelet/pod-resources", dig(asMap(v["extraVolumes"].([]any)[0]), "hostPath", "path"), "the PodResources socket")
	assert.Equal(t, "Local", dig(v, "service", "internalTrafficPolicy"), "spans reach the agent on their node")
	// The chart names its Service by its fullname: fullnameOverride, else
	// <release>-opentelemetry-collector. Inference pods are told to send to
	// gpuviz-agent.gpuviz.svc, daemonset.yaml's Service.
	b, err := os.ReadFile("kubernetes/README.md")
	require.NoError(t, err)
	release := regexp.MustCompile(`helm install (\S+) open-telemetry/opentelemetry-collector`).FindStringSubmatch(string(b))
	require.NotNil(t, release, "README.md's helm install")
	fullname, _ := v["fullnameOverride"].(string)
	if fullname == "" {
		fullname = release[1]
		if !strings.Contains(release[1], "opentelemetry-collector") {
			fullname += "-opentelemetry-collector"
		}
	}
	require.Contains(t, string(b), "gpuviz-agent.gpuviz.svc.cluster.local:4317", "README.md's endpoint for inference pods")
	assert.Equal(t, "gpuviz-agent", fullname, "the chart's Service is not the gpuviz-agent inference pods send to")
	// The DaemonSet the README patches is the chart's <fullname>-agent.
	for _, m := range regexp.MustCompile(`patch daemonset (\S+)`).FindAllStringSubmatch(string(b), -1) {
		assert.Equal(t, fullname+"-agent", m[1], "README.md patches a DaemonSet the chart does not make")
	}
}

// --- docker-compose ----------------------------------------------------------------

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
		Target     string `yaml:"target"`
	} `yaml:"build"`
	Hostname    string            `yaml:"hostname"`
	Command     []string          `yaml:"command"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	Environment map[string]string `yaml:"environment"`
	DependsOn   []string          `yaml:"depends_on"`
}

func TestDockerCompose(t *testing.T) {
	const dir = "docker-compose"
	var compose struct {
		Services map[string]composeService `yaml:"services"`
		Volumes  map[string]any            `yaml:"volumes"`
	}
	readYAML(t, filepath.Join(dir, "docker-compose.yaml"), &compose)
	for _, s := range []string{"otelcol", "loadgen", "jaeger", "prometheus", "grafana"} {
		require.Contains(t, compose.Services, s, "service %s", s)
	}
	for name, s := range compose.Services {
		assert.NotEmpty(t, s.Image, "service %s: image (pinned for pulled ones, named for built ones)", name)
		if s.Build == nil {
			assert.NotContains(t, s.Image, ":latest", "service %s: pin the image", name)
			assert.Contains(t, s.Image, ":", "service %s: pin the image", name)
		}
		for _, dep := range s.DependsOn {
			assert.Contains(t, compose.Services, dep, "service %s depends on %s", name, dep)
		}
		for _, v := range s.Volumes {
			src, _, ok := strings.Cut(v, ":")
			require.True(t, ok, "service %s: volume %q", name, v)
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				_, err := os.Stat(filepath.Join(dir, src))
				assert.NoError(t, err, "service %s mounts %s, which is not in the repository", name, src)
			} else {
				assert.Contains(t, compose.Volumes, src, "service %s: named volume %s", name, src)
			}
		}
	}

	// Built services: the Dockerfile and its targets exist.
	targets := map[string]bool{}
	for name, s := range compose.Services {
		if s.Build == nil {
			continue
		}
		df := filepath.Join(dir, s.Build.Context, s.Build.Dockerfile)
		b, err := os.ReadFile(df)
		require.NoError(t, err, "service %s: Dockerfile", name)
		for _, m := range regexp.MustCompile(`(?mi)^FROM\s+\S+\s+AS\s+(\S+)`).FindAllStringSubmatch(string(b), -1) {
			targets[m[1]] = true
		}
		assert.True(t, targets[s.Build.Target], "service %s: target %s not in %s", name, s.Build.Target, df)
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 3 || !strings.EqualFold(fields[0], "COPY") || slices.ContainsFunc(fields, func(f string) bool { return strings.HasPrefix(f, "--from") }) {
				continue
			}
			fields = slices.DeleteFunc(fields[1:], func(f string) bool { return strings.HasPrefix(f, "--") })
			for _, src := range fields[:len(fields)-1] { // the last is the destination
				if src != "." {
					_, err := os.Stat(filepath.Join(dir, s.Build.Context, src))
					assert.NoError(t, err, "%s copies %s, which is not in the repository", df, src)
				}
			}
		}
	}
	assert.True(t, targets["otelcol"] && targets["loadgen"], "Dockerfile targets otelcol and loadgen")
	if _, err := os.Stat("loadgen"); err != nil {
		t.Log("examples/loadgen is not there yet: the loadgen image cannot be built")
	}

	col := compose.Services["otelcol"]
	for _, p := range []string{"4317:4317", "4318:4318", "8889:8889"} {
		assert.True(t, slices.ContainsFunc(col.Ports, func(s string) bool { _, ports := composePortHost(s); return strings.HasPrefix(ports, p) }), "otelcol publishes %s", p)
	}
	assert.Equal(t, "all", col.Environment["NVIDIA_VISIBLE_DEVICES"])
	assert.Equal(t, "utility", col.Environment["NVIDIA_DRIVER_CAPABILITIES"])
	// The collector's config is the mounted collector.yaml.
	assert.Contains(t, col.Volumes, "./collector.yaml:/etc/otelcol-gpuviz/config.yaml:ro")
	assert.Contains(t, col.Command, "--config=/etc/otelcol-gpuviz/config.yaml")

	// The load generator describes the collector's simulated GPUs, from the
	// same host name.
	lg := compose.Services["loadgen"]
	assert.Equal(t, col.Hostname, lg.Hostname, "loadgen and otelcol must share host.name for the processor to match the spans")
	var cc map[string]any
	readYAML(t, filepath.Join(dir, "collector.yaml"), &cc)
	sim := asMap(dig(cc, "receivers", "gpuviz", "simulated"))
	for flag, want := range map[string]any{"--sim-model": sim["model"], "--sim-gpus": sim["gpus"], "--sim-seed": sim["seed"]} {
		assert.Contains(t, lg.Command, fmt.Sprintf("%s=%v", flag, want), "loadgen %s must equal the collector's simulated setting", flag)
	}
	assert.Contains(t, lg.Command, "--endpoint=otelcol:4317")
	assert.Equal(t, "jaeger:4317", dig(cc, "exporters", "otlp_grpc/jaeger", "endpoint"))

	prom := compose.Services["prometheus"]
	assert.Contains(t, prom.Command, "--enable-feature=exemplar-storage")
	var cfgFile string
	for _, c := range prom.Command {
		if v, ok := strings.CutPrefix(c, "--config.file="); ok {
			cfgFile = v
		}
	}
	mounts := map[string]string{} // container path -> repository path
	for _, v := range prom.Volumes {
		parts := strings.Split(v, ":")
		mounts[parts[1]] = filepath.Join(dir, parts[0])
	}
	require.Contains(t, mounts, cfgFile, "Prometheus' --config.file is mounted")
	var pc struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, mounts[cfgFile], &pc)
	for _, rf := range pc.RuleFiles {
		inContainer := path.Join(path.Dir(cfgFile), rf)
		inRepo, ok := mounts[inContainer]
		if assert.True(t, ok, "rule file %s (%s in the container) is not mounted", rf, inContainer) {
			assert.Equal(t, filepath.Clean(filepath.Join(filepath.Dir(mounts[cfgFile]), rf)), filepath.Clean(inRepo),
				"rule file %s resolves to different files in the repository and the container", rf)
		}
	}
	assert.Equal(t, "otelcol:8889", pc.ScrapeConfigs[0].StaticConfigs[0].Targets[0])

	graf := compose.Services["grafana"]
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/dashboards.yaml", &prov)
	assert.Contains(t, graf.Volumes, "../grafana/dashboards:"+prov.Providers[0].Options.Path+":ro", "Grafana mounts the dashboards where the provider reads them")
}

// --- SigNoz ----------------------------------------------------------------------

func TestSigNoz(t *testing.T) {
	var cfg map[string]any
	readYAML(t, "signoz/collector.yaml", &cfg)
	assert.Equal(t, "signoz-otel-collector:4317", dig(cfg, "exporters", "otlp_grpc/signoz", "endpoint"))
	for _, p := range []string{"metrics", "traces"} {
		pm := asMap(dig(cfg, "service", "pipelines", p))
		assert.Contains(t, asStrings(pm["processors"]), "gpuviz", "pipeline %s runs the gpuviz processor", p)
		assert.Contains(t, asStrings(pm["exporters"]), "otlp_grpc/signoz", "pipeline %s goes to SigNoz", p)
	}
	b, err := os.ReadFile("signoz/README.md")
	require.NoError(t, err)
	assert.Contains(t, string(b), "gpuviz.bottleneck = 'memory_bound'")

	// The attribute table's values are the processor's: every family of
	// its README's "Recognised spans" table, every bottleneck label.
	row := func(attr string) []string {
		m := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(attr) + "` \\|(.*)\\|$").FindStringSubmatch(string(b))
		require.NotNil(t, m, "signoz/README.md has no row for %s", attr)
		var vals []string
		for _, v := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[1], -1) {
			vals = append(vals, v[1])
		}
		return vals
	}
	pr, err := os.ReadFile("../processor/gpuvizprocessor/README.md")
	require.NoError(t, err)
	_, recognised, ok := strings.Cut(string(pr), "## Recognised spans\n\n")
	require.True(t, ok)
	recognised, _, _ = strings.Cut(recognised, "\n\n") // its table
	var families []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(recognised, -1) {
		families = append(families, m[1])
	}
	require.NotEmpty(t, families)
	assert.ElementsMatch(t, families, row("gpuviz.request.family"), "the families signoz/README.md names")
	var md struct {
		Attributes map[string]struct {
			Enum []string `yaml:"enum"`
		} `yaml:"attributes"`
	}
	readYAML(t, processorMetadataPath, &md)
	assert.ElementsMatch(t, md.Attributes["bottleneck"].Enum, row("gpuviz.bottleneck"), "the bottleneck labels signoz/README.md names")
}

// --- exposure: published ports, Grafana, TLS ------------------------------------

// composeVar is a docker-compose interpolation: ${VAR}, ${VAR:-default},
// ${VAR-default}, ${VAR:?error}, ${VAR?error}.
var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}`)

// composeDefault is s as docker compose reads it with no variable set: a
// default in place of its variable, "" for a plain ${VAR}, and
// "<required>" for ${VAR:?...}, which compose refuses to run without.
func composeDefault(s string) string {
	return composeVar.ReplaceAllStringFunc(s, func(m string) string {
		sub := composeVar.FindStringSubmatch(m)
		switch strings.TrimPrefix(sub[2], ":") {
		case "-":
			return sub[3]
		case "?":
			return "<required>"
		}
		return ""
	})
}

// composePortHost splits a short-syntax port ("[HOST:]PUBLISHED:TARGET")
// into the host address, as compose reads it without variables ("" when
// none: every interface), and the ports.
func composePortHost(p string) (host, ports string) {
	p = composeDefault(p)
	parts := strings.Split(p, ":")
	if len(parts) < 3 {
		return "", p
	}
	return strings.Trim(strings.Join(parts[:len(parts)-2], ":"), "[]"), strings.Join(parts[len(parts)-2:], ":")
}

func isLoopback(host string) bool {
	return host == "localhost" || strings.HasPrefix(host, "127.") || host == "::1"
}

// composeExposureProblems checks that, unless the user sets a variable, a
// compose file publishes every port on loopback only (through
// GPUVIZ_BIND_ADDRESS, so that the user can opt out), and that Grafana is
// neither an anonymous Editor (or Admin) nor left with a default admin
// password.
func composeExposureProblems(services map[string]composeService) []string {
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(services)) {
		s := services[name]
		for _, p := range s.Ports {
			if host, _ := composePortHost(p); !isLoopback(host) {
				problems = append(problems, fmt.Sprintf("service %s publishes %q on %q: bind it to ${GPUVIZ_BIND_ADDRESS:-127.0.0.1}", name, p, host))
			} else if !strings.HasPrefix(p, "${GPUVIZ_BIND_ADDRESS:-127.0.0.1}:") {
				problems = append(problems, fmt.Sprintf("service %s publishes %q: use ${GPUVIZ_BIND_ADDRESS:-127.0.0.1} so that users can opt out", name, p))
			}
		}
		if !strings.HasPrefix(s.Image, "grafana/") {
			continue
		}
		env := map[string]string{}
		for k, v := range s.Environment {
			env[k] = composeDefault(v)
		}
		if strings.EqualFold(env["GF_AUTH_ANONYMOUS_ENABLED"], "true") {
			role := env["GF_AUTH_ANONYMOUS_ORG_ROLE"]
			if role == "" {
				role = "Viewer" // Grafana's default
			}
			if role != "Viewer" {
				problems = append(problems, fmt.Sprintf("service %s: anonymous users are %s by default; Viewer at most", name, role))
			}
		}
		if strings.EqualFold(env["GF_AUTH_ANONYMOUS_ORG_ROLE"], "Editor") || strings.EqualFold(env["GF_AUTH_ANONYMOUS_ORG_ROLE"], "Admin") {
			problems = append(problems, fmt.Sprintf("service %s: an anonymous %s, even when opted in", name, env["GF_AUTH_ANONYMOUS_ORG_ROLE"]))
		}
		if strings.EqualFold(env["GF_AUTH_DISABLE_LOGIN_FORM"], "true") {
			problems = append(problems, fmt.Sprintf("service %s: the login form is disabled", name))
		}
		if pw := env["GF_SECURITY_ADMIN_PASSWORD"]; pw != "<required>" && env["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "" {
			problems = append(problems, fmt.Sprintf("service %s: the admin password is %q by default: require it with ${GRAFANA_ADMIN_PASSWORD:?...} or read it from a file", name, pw))
		}
	}
	return problems
}

func TestDockerComposeExposure(t *testing.T) {
	var compose struct {
		Services map[string]composeService `yaml:"services"`
	}
	readYAML(t, "docker-compose/docker-compose.yaml", &compose)
	require.NotEmpty(t, compose.Services)
	assert.Empty(t, composeExposureProblems(compose.Services))
	b, err := os.ReadFile("docker-compose/README.md")
	require.NoError(t, err)
	for _, s := range []string{"GPUVIZ_BIND_ADDRESS=0.0.0.0", "GRAFANA_ADMIN_PASSWORD", "GRAFANA_ANONYMOUS=true"} {
		assert.Contains(t, string(b), s, "the README says how to opt out")
	}

	// The negative case: what the compose file used to be, and opt-outs
	// that are not opt-ins.
	bad := map[string]composeService{
		"otelcol": {Image: "gpuviz/otelcol-gpuviz:dev", Ports: []string{"4317:4317", "0.0.0.0:4318:4318", "${GPUVIZ_BIND_ADDRESS:-0.0.0.0}:8889:8889", "127.0.0.1:13133:13133"}},
		"grafana": {Image: "grafana/grafana:12.1.0", Ports: []string{"${GPUVIZ_BIND_ADDRESS:-127.0.0.1}:3000:3000"}, Environment: map[string]string{
			"GF_AUTH_ANONYMOUS_ENABLED":  "true",
			"GF_AUTH_ANONYMOUS_ORG_ROLE": "Editor",
			"GF_AUTH_DISABLE_LOGIN_FORM": "true",
		}},
		"grafana2": {Image: "grafana/grafana:12.1.0", Environment: map[string]string{
			"GF_AUTH_ANONYMOUS_ENABLED":  "${GRAFANA_ANONYMOUS:-true}",
			"GF_AUTH_ANONYMOUS_ORG_ROLE": "${GRAFANA_ROLE:-Admin}",
			"GF_SECURITY_ADMIN_PASSWORD": "${GRAFANA_ADMIN_PASSWORD:-admin}",
		}},
	}
	assert.Equal(t, []string{
		`service grafana: anonymous users are Editor by default; Viewer at most`,
		`service grafana: an anonymous Editor, even when opted in`,
		`service grafana: the login form is disabled`,
		`service grafana: the admin password is "" by default: require it with ${GRAFANA_ADMIN_PASSWORD:?...} or read it from a file`,
		`service grafana2: anonymous users are Admin by default; Viewer at most`,
		`service grafana2: an anonymous Admin, even when opted in`,
		`service grafana2: the admin password is "admin" by default: require it with ${GRAFANA_ADMIN_PASSWORD:?...} or read it from a file`,
		`service otelcol publishes "4317:4317" on "": bind it to ${GPUVIZ_BIND_ADDRESS:-127.0.0.1}`,
		`service otelcol publishes "0.0.0.0:4318:4318" on "0.0.0.0": bind it to ${GPUVIZ_BIND_ADDRESS:-127.0.0.1}`,
		`service otelcol publishes "${GPUVIZ_BIND_ADDRESS:-0.0.0.0}:8889:8889" on "0.0.0.0": bind it to ${GPUVIZ_BIND_ADDRESS:-127.0.0.1}`,
		`service otelcol publishes "127.0.0.1:13133:13133": use ${GPUVIZ_BIND_ADDRESS:-127.0.0.1} so that users can opt out`,
	}, composeExposureProblems(bad))
}

// collectorEnv is a collector config value as the collector reads it with
// no environment variable set: ${env:VAR:-default} becomes its default,
// ${env:VAR} "".
var collectorEnv = regexp.MustCompile(`\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}`)

func collectorDefault(v any) string {
	s, _ := v.(string)
	return collectorEnv.ReplaceAllString(s, "$2")
}

// endpointHost is the host an endpoint ("host:port", "http://host:port")
// listens on or connects to, by default.
func endpointHost(v any) string {
	s := collectorDefault(v)
	if _, rest, ok := strings.Cut(s, "://"); ok {
		s = rest
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}

// tlsExposureProblems checks a collector config meant for a network: every
// server socket binds to loopback unless it has TLS, and then OTLP
// receivers also authenticate their clients (client certificates and a
// token) and a Prometheus exporter wants client certificates; every OTLP
// exporter verifies its server (no insecure, a CA) and authenticates.
func tlsExposureProblems(cfg map[string]any) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	typeOf := func(id string) string { typ, _, _ := strings.Cut(id, "/"); return typ }
	server := func(where string, c map[string]any, wantAuth bool) {
		if c == nil {
			add("%s: no endpoint: set one (the default may not be loopback)", where)
			return
		}
		host := endpointHost(c["endpoint"])
		if host == "" {
			add("%s: no endpoint: set one (the default may not be loopback)", where)
			return
		}
		if isLoopback(host) {
			return
		}
		tls := asMap(c["tls"])
		if tls["cert_file"] == nil || tls["key_file"] == nil {
			add("%s listens on %s without TLS", where, host)
			return
		}
		if tls["client_ca_file"] == nil {
			add("%s listens on %s without client certificates", where, host)
		}
		if wantAuth && dig(c, "auth", "authenticator") == nil {
			add("%s listens on %s without an authenticator", where, host)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(asMap(cfg["receivers"]))) {
		if typeOf(id) != "otlp" {
			continue
		}
		for _, proto := range []string{"grpc", "http"} {
			if p, ok := asMap(dig(cfg, "receivers", id, "protocols"))[proto]; ok {
				server(fmt.Sprintf("receiver %s %s", id, proto), asMap(p), true)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(asMap(cfg["exporters"]))) {
		e := asMap(asMap(cfg["exporters"])[id])
		switch typeOf(id) {
		case "prometheus":
			server("exporter "+id, e, false)
		case "otlp", "otlp_grpc", "otlphttp", "otlp_http":
			tls := asMap(e["tls"])
			if tls["insecure"] == true || tls["insecure_skip_verify"] == true || tls["ca_file"] == nil {
				add("exporter %s does not verify its server against a CA", id)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(asMap(cfg["extensions"]))) {
		switch typeOf(id) {
		case "health_check", "pprof", "zpages", "gpuviz_view":
			server("extension "+id, asMap(asMap(cfg["extensions"])[id]), false)
		}
	}
	readers, _ := dig(cfg, "service", "telemetry", "metrics", "readers").([]any)
	if len(readers) == 0 {
		add("service.telemetry.metrics: no readers: the default listens on localhost:8888, say so with host: 127.0.0.1")
	}
	for _, r := range readers {
		if h := collectorDefault(dig(r, "pull", "exporter", "prometheus", "host")); !isLoopback(h) {
			add("the collector's own metrics listen on %q", h)
		}
	}
	return problems
}

// exampleConfig returns the collector config at path under examples/.
func exampleConfig(t *testing.T, path string) map[string]any {
	t.Helper()
	cfg := collectorConfigs(t)[path]
	require.NotNil(t, cfg, path)
	return cfg
}

// TestTLSExamples checks examples/tls: every socket on loopback unless it
// has TLS and authentication; the agent's exporter to the gateway presents
// a certificate and a token read from a file, none inline; and the
// gateway takes the token the agent sends.
func TestTLSExamples(t *testing.T) {
	gw, agent := exampleConfig(t, "tls/gateway.yaml"), exampleConfig(t, "tls/agent.yaml")
	for name, cfg := range map[string]map[string]any{"gateway": gw, "agent": agent} {
		assert.Empty(t, tlsExposureProblems(cfg), name)
		for id, ext := range asMap(cfg["extensions"]) {
			if strings.HasPrefix(id, "bearertokenauth") {
				assert.NotNil(t, asMap(ext)["filename"], "%s %s: the token from a file", name, id)
				assert.Nil(t, asMap(ext)["token"], "%s %s: no inline token", name, id)
				assert.Nil(t, asMap(ext)["tokens"], "%s %s: no inline tokens", name, id)
			}
		}
	}
	for _, proto := range []string{"grpc", "http"} {
		assert.Equal(t, "bearertokenauth/server", dig(gw, "receivers", "otlp", "protocols", proto, "auth", "authenticator"))
		assert.NotEmpty(t, endpointHost(dig(gw, "receivers", "otlp", "protocols", proto, "endpoint")))
		assert.True(t, isLoopback(endpointHost(dig(agent, "receivers", "otlp", "protocols", proto, "endpoint"))), "the agent's OTLP %s is for servers on its machine", proto)
	}
	exp := asMap(dig(agent, "exporters", "otlp_grpc/gateway"))
	require.NotNil(t, exp, "the agent exports to the gateway")
	assert.Equal(t, "bearertokenauth/client", dig(exp, "auth", "authenticator"))
	assert.NotNil(t, dig(exp, "tls", "cert_file"), "the agent presents a client certificate")
	assert.NotNil(t, dig(exp, "tls", "key_file"))
	assert.Equal(t, "4317", strings.TrimPrefix(collectorDefault(exp["endpoint"]), "gpuviz-gateway.gpuviz.svc.cluster.local:"), "the gateway's OTLP/gRPC port")
	for _, p := range []string{"metrics", "traces"} {
		assert.Contains(t, asStrings(dig(agent, "service", "pipelines", p, "exporters")), "otlp_grpc/gateway", "the agent's %s go to the gateway", p)
		assert.Contains(t, asStrings(dig(gw, "service", "pipelines", p, "processors")), "gpuviz", "the gateway joins %s", p)
	}
	b, err := os.ReadFile("tls/README.md")
	require.NoError(t, err)
	assert.Contains(t, string(b), "openssl", "the README says how to make the certificates")

	// The negative case: the docker-compose collector, made for a
	// container network, is not fit for one.
	var compose map[string]any
	readYAML(t, "docker-compose/collector.yaml", &compose)
	assert.Equal(t, []string{
		"receiver otlp grpc listens on 0.0.0.0 without TLS",
		"receiver otlp http listens on 0.0.0.0 without TLS",
		"exporter otlp_grpc/jaeger does not verify its server against a CA",
		"exporter prometheus listens on 0.0.0.0 without TLS",
		"extension health_check listens on 0.0.0.0 without TLS",
		"service.telemetry.metrics: no readers: the default listens on localhost:8888, say so with host: 127.0.0.1",
	}, tlsExposureProblems(compose))
	half := map[string]any{
		"receivers": map[string]any{"otlp": map[string]any{"protocols": map[string]any{
			"grpc": map[string]any{"endpoint": "${env:ADDR:-0.0.0.0}:4317", "tls": map[string]any{"cert_file": "c", "key_file": "k"}},
			"http": map[string]any{"endpoint": "${env:ADDR:-127.0.0.1}:4318"},
		}}},
		"exporters":  map[string]any{"otlp": map[string]any{"tls": map[string]any{"ca_file": "ca", "insecure_skip_verify": true}}},
		"extensions": map[string]any{"pprof": map[string]any{}},
		"service":    map[string]any{"telemetry": map[string]any{"metrics": map[string]any{"readers": []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{"prometheus": map[string]any{"host": "0.0.0.0"}}}}}}}},
	}
	assert.Equal(t, []string{
		"receiver otlp grpc listens on 0.0.0.0 without client certificates",
		"receiver otlp grpc listens on 0.0.0.0 without an authenticator",
		"exporter otlp does not verify its server against a CA",
		"extension pprof: no endpoint: set one (the default may not be loopback)",
		`the collector's own metrics listen on "0.0.0.0"`,
	}, tlsExposureProblems(half))
}

// readmeBlock returns the first fenced block of lang in file after the
// line that starts with heading.
func readmeBlock(t *testing.T, file, heading, lang string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(b), "\n"+heading)
	require.True(t, ok, "%s has no %q", file, heading)
	_, rest, ok = strings.Cut(rest, "```"+lang+"\n")
	require.True(t, ok, "%s: no ```%s block after %q", file, lang, heading)
	block, _, ok := strings.Cut(rest, "\n```")
	require.True(t, ok)
	return block
}

// TestTLSREADMEOpenSSL runs the README's openssl commands as the sh
// script its fence says they are (dash where there is one, as /bin/sh is
// on Debian and Ubuntu), and checks what they make: a gateway certificate
// the agents and Prometheus verify for every name they dial, client
// certificates the gateway takes, and keys only their owner reads.
func TestTLSREADMEOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed")
	}
	shell := "sh"
	if p, err := exec.LookPath("dash"); err == nil {
		shell = p
	}
	script := readmeBlock(t, "tls/README.md", "### With openssl", "sh")
	dir := t.TempDir()
	cmd := exec.Command(shell, "-e", "-c", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s -e: the README's openssl commands:\n%s", shell, out)

	read := func(name string) *x509.Certificate {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		blk, _ := pem.Decode(b)
		require.NotNil(t, blk, name)
		c, err := x509.ParseCertificate(blk.Bytes)
		require.NoError(t, err, name)
		return c
	}
	roots := x509.NewCertPool()
	roots.AddCert(read("ca.crt"))
	gw := read("gateway.crt")
	for _, name := range []string{"gpuviz-gateway.gpuviz.svc.cluster.local", "gpuviz-gateway.example.com", "127.0.0.1"} {
		_, err := gw.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		assert.NoError(t, err, "the gateway's certificate for %s", name)
	}
	for _, name := range []string{"gpu-node-1", "prometheus"} {
		_, err := read(name + ".crt").Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		assert.NoError(t, err, "%s's client certificate", name)
	}
	for _, name := range []string{"ca", "gateway", "gpu-node-1", "prometheus"} {
		_, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
		assert.NoError(t, err, name)
		fi, err := os.Stat(filepath.Join(dir, name+".key"))
		require.NoError(t, err)
		assert.Zero(t, fi.Mode().Perm()&0o077, "%s.key is %v: readable by others", name, fi.Mode().Perm())
	}
}

// TestTLSREADMECertManagerCA checks the README's cert-manager objects: the
// CA outlives the certificates it signs and keeps its key when renewed.
// The collectors read their CA (an agent's ca_file, the gateway's
// client_ca_file) once, at start; reload_interval reloads only the
// certificate and key. A CA at cert-manager's default duration (90 days,
// as long as its leaves) expires in every collector's pool, and a renewal
// with a new key signs leaves no running collector verifies.
func TestTLSREADMECertManagerCA(t *testing.T) {
	var leaves []time.Duration
	var ca map[string]any
	for _, d := range yamlDocs(t, strings.NewReader(readmeBlock(t, "tls/README.md", "### With cert-manager", "yaml"))) {
		if d["kind"] != "Certificate" {
			continue
		}
		if dig(d, "spec", "isCA") == true {
			ca = asMap(d["spec"])
			continue
		}
		s, _ := dig(d, "spec", "duration").(string)
		leaf, err := time.ParseDuration(cmp.Or(s, "2160h"))
		require.NoError(t, err)
		leaves = append(leaves, leaf)
	}
	require.NotNil(t, ca, "the README's cert-manager objects have a CA Certificate")
	require.NotEmpty(t, leaves)
	s, _ := ca["duration"].(string)
	d, err := time.ParseDuration(cmp.Or(s, "2160h")) // cert-manager's default
	require.NoError(t, err)
	assert.GreaterOrEqual(t, d, 10*slices.Max(leaves), "the CA's duration, against its leaves'")
	assert.Equal(t, "Never", dig(ca, "privateKey", "rotationPolicy"), "the CA keeps its key when cert-manager renews it")
}

// kafkaDeliveryProblems checks the Kafka components of a collector config
// for settings under which a record the pipeline took can be lost or
// stall: a kafka exporter must wait for every in-sync replica
// (required_acks: all; the default, 1, acknowledges once the leader has
// it, and a leader that fails before its followers copied it loses it); a
// kafka receiver must mark a record after its pipeline took it
// (message_marking: after; the default marks it before, and a crash loses
// it), and then back off and retry on a transient error (error_backoff:
// without it the receiver pauses the record's partition until the next
// rebalance, which a steady consumer group may never have), and mark a
// record that failed for good (message_marking: on_permanent_error, which
// defaults to on_error: an undecodable record is a permanent error, never
// retried, and left unmarked it stops its partition for every owner).
func kafkaDeliveryProblems(cfg map[string]any) []string {
	var problems []string
	typeOf := func(id string) string { typ, _, _ := strings.Cut(id, "/"); return typ }
	for _, id := range slices.Sorted(maps.Keys(asMap(cfg["receivers"]))) {
		if typeOf(id) != "kafka" {
			continue
		}
		r := asMap(asMap(cfg["receivers"])[id])
		switch {
		case dig(r, "message_marking", "after") != true:
			problems = append(problems, fmt.Sprintf("receiver %s marks a record before its pipeline took it: a crash loses it", id))
		case dig(r, "message_marking", "on_error") != true && dig(r, "error_backoff", "enabled") != true:
			problems = append(problems, fmt.Sprintf("receiver %s without error_backoff: a transient error pauses the partition until a rebalance", id))
		}
		permanent, set := asMap(r["message_marking"])["on_permanent_error"]
		if !set {
			permanent = dig(r, "message_marking", "on_error")
		}
		if permanent != true {
			problems = append(problems, fmt.Sprintf("receiver %s leaves a record that failed for good unmarked: one undecodable record stops its partition", id))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(asMap(cfg["exporters"]))) {
		if typeOf(id) != "kafka" {
			continue
		}
		acks := dig(cfg, "exporters", id, "producer", "required_acks")
		if acks == nil {
			acks = "unset (1)"
		}
		switch fmt.Sprint(acks) {
		case "all", "-1":
		default:
			problems = append(problems, fmt.Sprintf("exporter %s: required_acks %v, not all: a leader that fails before its followers copy a record loses it", id, acks))
		}
	}
	return problems
}

// TestKafkaExamples checks examples/kafka: the gateway consumes the topics
// the agent writes, in the encoding it writes them, and neither side
// loses what it took.
func TestKafkaExamples(t *testing.T) {
	agent, gw := exampleConfig(t, "kafka/agent.yaml"), exampleConfig(t, "kafka/gateway.yaml")
	for _, signal := range []string{"traces", "metrics"} {
		assert.Equal(t, []string{fmt.Sprint(dig(agent, "exporters", "kafka", signal, "topic"))}, asStrings(dig(gw, "receivers", "kafka", signal, "topics")), signal)
		assert.Equal(t, dig(agent, "exporters", "kafka", signal, "encoding"), dig(gw, "receivers", "kafka", signal, "encoding"), signal)
	}
	for name, cfg := range map[string]map[string]any{"agent": agent, "gateway": gw} {
		assert.Empty(t, kafkaDeliveryProblems(cfg), name)
	}

	// The negative case: the exporter's defaults.
	assert.Equal(t, []string{
		"exporter kafka: required_acks unset (1), not all: a leader that fails before its followers copy a record loses it",
		"exporter kafka/b: required_acks 1, not all: a leader that fails before its followers copy a record loses it",
	}, kafkaDeliveryProblems(map[string]any{"exporters": map[string]any{
		"kafka":   map[string]any{},
		"kafka/b": map[string]any{"producer": map[string]any{"required_acks": 1}},
		"kafka/c": map[string]any{"producer": map[string]any{"required_acks": -1}},
	}}))
	assert.Equal(t, []string{
		"receiver kafka marks a record before its pipeline took it: a crash loses it",
		"receiver kafka leaves a record that failed for good unmarked: one undecodable record stops its partition",
		"receiver kafka/b without error_backoff: a transient error pauses the partition until a rebalance",
		"receiver kafka/c leaves a record that failed for good unmarked: one undecodable record stops its partition",
		"receiver kafka/e leaves a record that failed for good unmarked: one undecodable record stops its partition",
	}, kafkaDeliveryProblems(map[string]any{"receivers": map[string]any{
		"kafka":   map[string]any{},
		"kafka/b": map[string]any{"message_marking": map[string]any{"after": true, "on_permanent_error": true}},
		"kafka/c": map[string]any{"message_marking": map[string]any{"after": true}, "error_backoff": map[string]any{"enabled": true}},
		"kafka/d": map[string]any{"message_marking": map[string]any{"after": true, "on_permanent_error": true}, "error_backoff": map[string]any{"enabled": true}},
		"kafka/e": map[string]any{"message_marking": map[string]any{"after": true, "on_error": true, "on_permanent_error": false}},
		"kafka/f": map[string]any{"message_marking": map[string]any{"after": true, "on_error": true}},
		"otlp":    map[string]any{},
	}}))
}

// --- systemd -----------------------------------------------------------------------

// systemdEnvironmentProblems splits the value of an Environment= line as
// systemd does (systemd.exec(5): assignments separated by spaces, each
// double- or single-quoted to hold one) and returns the words systemd
// would ignore ("Invalid environment assignment, ignoring") or cut short:
// a word that is no VAR=value assignment.
func systemdEnvironmentProblems(value string) []string {
	var problems, words []string
	var cur strings.Builder
	quote, inWord := rune(0), false
	for _, r := range value {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	assignment := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	for _, w := range words {
		if !assignment.MatchString(w) {
			problems = append(problems, fmt.Sprintf("%q is no VAR=value assignment: systemd ignores it", w))
		}
	}
	return problems
}

// TestSystemdEnvironment checks every systemd Environment= line the docs
// and examples give (in a unit file, or in a Markdown code span): each word
// is one assignment, so that a value with a space (a YAML list such as
// GPUVIZ_GATEWAYS=[gw-0:4317, gw-1:4317]) is quoted whole.
func TestSystemdEnvironment(t *testing.T) {
	var files []string
	for _, g := range []string{"../README.md", "../docs/*.md", "*/README.md", "*/*.service"} {
		m, err := filepath.Glob(g)
		require.NoError(t, err)
		files = append(files, m...)
	}
	codeSpan := regexp.MustCompile("`(Environment=[^`]*)`")
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var lines []string
		if strings.HasSuffix(f, ".service") {
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "Environment=") {
					lines = append(lines, l)
				}
			}
		} else {
			for _, m := range codeSpan.FindAllStringSubmatch(string(b), -1) {
				lines = append(lines, m[1])
			}
		}
		for _, l := range lines {
			found++
			assert.Empty(t, systemdEnvironmentProblems(strings.TrimPrefix(l, "Environment=")), "%s: %s", f, l)
		}
	}
	assert.NotZero(t, found, "no Environment= lines found")

	// The negative case: an unquoted space splits an assignment in two.
	assert.Equal(t, []string{`"gw-1:4317]" is no VAR=value assignment: systemd ignores it`},
		systemdEnvironmentProblems(`GPUVIZ_HOST_NAME=%H GPUVIZ_GATEWAYS=[gw-0:4317, gw-1:4317]`))
	assert.Empty(t, systemdEnvironmentProblems(`GPUVIZ_HOST_NAME=%H "GPUVIZ_GATEWAYS=[gw-0:4317, gw-1:4317]"`))
	assert.Empty(t, systemdEnvironmentProblems(`GOMEMLIMIT=400MiB`))
}

// githubAnchor is the anchor GitHub gives a heading: lower case, letters,
// digits, '-' and '_' kept, each space a '-', everything else dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// markdownTargets returns what a reference into a Markdown document can
// name: the anchors of its headings (a repeated heading's second is
// anchor-1, ...), and the titles a prose reference quotes: its headings,
// its bold paragraph leads and the comment lines of its code blocks.
func markdownTargets(doc string) (anchors map[string]bool, titles []string) {
	anchors = map[string]bool{}
	fenced := false
	for line := range strings.Lines(doc) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			if c, ok := strings.CutPrefix(strings.TrimSpace(line), "#"); ok {
				titles = append(titles, strings.TrimSpace(c))
			}
			continue
		}
		level := len(line) - len(strings.TrimLeft(line, "#"))
		if level < 1 || level > 6 || !strings.HasPrefix(line[level:], " ") {
			continue
		}
		text := strings.TrimSpace(line[level:])
		titles = append(titles, text, strings.ReplaceAll(text, "`", ""))
		a := githubAnchor(text)
		for n := 1; anchors[a]; n++ {
			a = fmt.Sprintf("%s-%d", githubAnchor(text), n)
		}
		anchors[a] = true
	}
	for _, m := range regexp.MustCompile(`(?s)\*\*(.+?)\*\*`).FindAllStringSubmatch(doc, -1) {
		titles = append(titles, strings.Join(strings.Fields(m[1]), " "))
	}
	return anchors, titles
}

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	mdScheme   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	mdCodeSpan = regexp.MustCompile("`[^`\n]*`")
	// A prose reference to a section: docs/benchmarks.md, "Fleet";
	// docs/attribution.md "Memory"; docs/slurm.md's "…"; (docs/x.md, section "…").
	mdSectionRef = regexp.MustCompile(`([\w./-]+\.md)(?:'s)?\)?[,:]?\s+\(?(?:section\s+)?"([^"]+)"`)
)

// docRefProblems returns the references of the Markdown document at p
// (relative to the repository root) that lead nowhere: a relative link to
// a file that does not exist, an #anchor no heading of its document has,
// or a prose reference (docs/benchmarks.md, "Fleet") quoting a section the
// document has no heading, bold lead or code comment for. read reads a
// file by its path from the root; a relative path in a prose reference is
// tried from p's folder, then from the root, as the docs write both.
func docRefProblems(p, doc string, read func(string) ([]byte, error)) []string {
	var problems []string
	targets := func(file string) (map[string]bool, []string, bool) {
		if file == p {
			a, t := markdownTargets(doc)
			return a, t, true
		}
		b, err := read(file)
		if err != nil {
			return nil, nil, false
		}
		a, t := markdownTargets(string(b))
		return a, t, true
	}
	// Links, outside code blocks and code spans.
	var prose strings.Builder
	fenced := false
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		} else if !fenced {
			prose.WriteString(mdCodeSpan.ReplaceAllString(line, ""))
		}
	}
	for _, m := range mdLink.FindAllStringSubmatch(prose.String(), -1) {
		link := m[1]
		if mdScheme.MatchString(link) {
			continue
		}
		file, anchor, _ := strings.Cut(link, "#")
		if file == "" {
			file = p
		} else {
			file = path.Join(path.Dir(p), file)
		}
		if _, err := read(file); file != p && err != nil && !errors.Is(err, syscall.EISDIR) {
			problems = append(problems, fmt.Sprintf("%s: link %s: no file %s", p, link, file))
			continue
		}
		if anchor == "" || !strings.HasSuffix(file, ".md") {
			continue
		}
		if anchors, _, _ := targets(file); !anchors[anchor] {
			problems = append(problems, fmt.Sprintf("%s: link %s: %s has no heading with anchor #%s", p, link, file, anchor))
		}
	}
	// Prose references to a section, code blocks included (a config's
	// comment points at a section too).
	for _, m := range mdSectionRef.FindAllStringSubmatch(doc, -1) {
		quoted := strings.Join(strings.Fields(m[2]), " ")
		_, titles, ok := targets(path.Join(path.Dir(p), m[1]))
		if !ok {
			_, titles, ok = targets(path.Clean(m[1]))
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: %s, %q: no file %s", p, m[1], quoted, m[1]))
			continue
		}
		if !slices.ContainsFunc(titles, func(t string) bool { return strings.Contains(t, quoted) }) {
			problems = append(problems, fmt.Sprintf("%s: %s, %q: %s has no such section", p, m[1], quoted, m[1]))
		}
	}
	return problems
}

// TestDocReferencesResolve checks every Markdown document of the
// repository (README.md, docs/, the components' and examples' READMEs):
// each relative link leads to a file, each #anchor to a heading of its
// document, and each prose reference to a section (docs/benchmarks.md,
// "Fleet") to a heading, bold lead or code comment that says it. A heading
// renamed breaks the links and references that named it.
func TestDocReferencesResolve(t *testing.T) {
	read := func(p string) ([]byte, error) { return os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(p))) }
	var docs []string
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "_build" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			docs = append(docs, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, docs, "README.md")
	require.Contains(t, docs, "docs/benchmarks.md")
	for _, p := range docs {
		b, err := read(p)
		require.NoError(t, err)
		assert.Empty(t, docRefProblems(p, string(b), read), p)
	}

	// The check itself, on a document of docs/ that links to what is
	// there and to what is not.
	doc := strings.Join([]string{
		"[ok](benchmarks.md#processor-end-to-end-what-users-pay), [ok](../README.md#what-make-run-shows),",
		"[ok](#a-heading), [ok](../examples/kubernetes), [ok](https://example.com/x.md#y), `[not a link](nosuch.md)`",
		"# A heading",
		"[no file](nosuch.md), [no anchor](benchmarks.md#fleet), [no anchor here](#nowhere)",
		`docs/benchmarks.md, "Processor, end to end"; docs/hardware.md, "GPM readings lag" (a bold lead); benchmarks.md, "Fleet"; benchmarks.md, "Fleet sizing"`,
	}, "\n")
	assert.Equal(t, []string{
		"docs/x.md: link nosuch.md: no file docs/nosuch.md",
		"docs/x.md: link benchmarks.md#fleet: docs/benchmarks.md has no heading with anchor #fleet",
		"docs/x.md: link #nowhere: docs/x.md has no heading with anchor #nowhere",
		`docs/x.md: benchmarks.md, "Fleet sizing": benchmarks.md has no such section`,
	}, docRefProblems("docs/x.md", doc, read))
	assert.Equal(t, "2026-12-04--nvidia-h200", githubAnchor("2026-12-04 — NVIDIA H200"))
	assert.Equal(t, "what-make-run-shows", githubAnchor("What `make run` shows"))
}

// TestFleetAgentNamesTheDNSResolverExample checks that the example
// examples/fleet/agent.yaml points at for the dns resolver on a headless
// Service configures hostrouting with that resolver.
func TestFleetAgentNamesTheDNSResolverExample(t *testing.T) {
	b, err := os.ReadFile("fleet/agent.yaml")
	require.NoError(t, err)
	m := regexp.MustCompile(`dns resolver on a headless Service,\s*#\s*examples/(\S+?)\)`).FindStringSubmatch(string(b))
	require.NotNil(t, m, "fleet/agent.yaml names an example of the dns resolver")
	var resolvers []string
	for name, cfg := range collectorConfigs(t) {
		if strings.HasPrefix(name, m[1]) && dig(cfg, "exporters", "hostrouting", "resolver", "dns") != nil {
			resolvers = append(resolvers, name)
		}
	}
	assert.NotEmpty(t, resolvers, "examples/%s has no hostrouting exporter with a dns resolver", m[1])
}

// docQueries returns the PromQL queries of a doc's first promql block,
// each keyed by the comment above it.
func docQueries(t *testing.T, doc string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", doc))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```promql\n(.*?)```").FindStringSubmatch(string(b))
	require.NotNil(t, m, "%s has a promql block", doc)
	out := map[string]string{}
	var comment string
	var expr []string
	flush := func() {
		if len(expr) > 0 {
			out[comment] = strings.Join(expr, " ")
		}
		expr = nil
	}
	for _, l := range strings.Split(m[1], "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "#"):
			flush()
			comment = strings.TrimSpace(strings.TrimPrefix(l, "#"))
		case l != "":
			expr = append(expr, l)
		}
	}
	flush()
	return out
}

// checkDocQueries runs every query of doc's promql block in promtool on
// the input series (each "series values", one sample a minute) and checks
// each gives what want has under its comment, evaluated at 1m.
func checkDocQueries(t *testing.T, doc string, input []string, want map[string][]map[string]any) {
	t.Helper()
	queries := docQueries(t, doc)
	require.Len(t, queries, len(want), "%s's queries: %v", doc, queries)
	checkQueries(t, doc, queries, input, want)
}

// checkQueries runs the queries (keyed by where they are) in promtool on
// the input series and checks each of want's gives its samples at 1m.
func checkQueries(t *testing.T, doc string, queries map[string]string, input []string, want map[string][]map[string]any) {
	t.Helper()
	promtool := lookPromtool(t)
	var tests []any
	for comment, exp := range want {
		q, ok := queries[comment]
		require.True(t, ok, "%s has no query under %q: %v", doc, comment, queries)
		tests = append(tests, map[string]any{"expr": q, "eval_time": "1m", "exp_samples": exp})
	}
	var series []any
	for _, in := range input {
		i := strings.LastIndex(in, "} ")
		require.True(t, i > 0, "input %q is not \"series values\"", in)
		s, v := in[:i+1], in[i+2:]
		series = append(series, map[string]string{"series": s, "values": v})
	}
	unit := map[string]any{
		"rule_files":          []string{},
		"evaluation_interval": "1m",
		"tests": []any{map[string]any{
			"interval":         "1m",
			"input_series":     series,
			"promql_expr_test": tests,
		}},
	}
	b, err := yaml.Marshal(unit)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "queries_test.yaml"), b, 0o644))
	cmd := exec.Command(promtool, "test", "rules", "queries_test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	assert.NoError(t, err, "promtool test rules on %s's queries:\n%s", doc, out)
}

// TestSlurmDocQueries runs docs/slurm.md's per-job queries in promtool on
// two nodes, one GPU of which two jobs share: the utilisation query gives
// each job the GPU's utilisation, and the power query the job's GPUs' sum.
func TestSlurmDocQueries(t *testing.T) {
	checkDocQueries(t, "docs/slurm.md", []string{
		`hw_gpu_utilization_ratio{host_name="n1",hw_id="GPU-a",hw_name="gpu0",hw_gpu_task="general"} 0.5x3`,
		`hw_gpu_utilization_ratio{host_name="n2",hw_id="GPU-b",hw_name="gpu0",hw_gpu_task="general"} 0.25x3`,
		`hw_power_watts{host_name="n1",hw_id="GPU-a",hw_name="gpu0"} 300x3`,
		`hw_power_watts{host_name="n2",hw_id="GPU-b",hw_name="gpu0"} 200x3`,
		`nvidia_gpu_slurm_job_ratio{host_name="n1",hw_id="GPU-a",hw_name="gpu0",slurm_job_id="4242",slurm_step_id="0"} 1x3`,
		`nvidia_gpu_slurm_job_ratio{host_name="n1",hw_id="GPU-a",hw_name="gpu0",slurm_job_id="4243",slurm_step_id="0"} 1x3`,
		`nvidia_gpu_slurm_job_ratio{host_name="n2",hw_id="GPU-b",hw_name="gpu0",slurm_job_id="4242",slurm_step_id="0"} 1x3`,
	}, map[string][]map[string]any{
		"utilisation per job (a GPU shared by jobs counts for each)": {
			{"labels": `{host_name="n1",hw_id="GPU-a",slurm_job_id="4242"}`, "value": 0.5},
			{"labels": `{host_name="n1",hw_id="GPU-a",slurm_job_id="4243"}`, "value": 0.5},
			{"labels": `{host_name="n2",hw_id="GPU-b",slurm_job_id="4242"}`, "value": 0.25},
		},
		"a job's power, across its nodes": {{"labels": `{}`, "value": 500}},
	})
}

// TestKubernetesDocQueries runs docs/kubernetes.md's per-pod queries in
// promtool on three GPUs, one time-sliced between two pods: the
// utilisation query gives each pod its GPU's utilisation, and the
// namespace's power query its GPUs' sum, the shared one once.
func TestKubernetesDocQueries(t *testing.T) {
	alloc := func(gpu, ns, pod, replica string) string {
		return fmt.Sprintf(`nvidia_gpu_k8s_allocation_ratio{host_name="n1",hw_id=%q,hw_name="gpu0",k8s_namespace_name=%q,k8s_pod_name=%q,k8s_container_name="c",nvidia_gpu_mig_id="",nvidia_gpu_k8s_replica=%q} 1x3`, gpu, ns, pod, replica)
	}
	checkDocQueries(t, "docs/kubernetes.md", []string{
		`hw_gpu_utilization_ratio{host_name="n1",hw_id="GPU-a",hw_name="gpu0",hw_gpu_task="general"} 0.5x3`,
		`hw_gpu_utilization_ratio{host_name="n1",hw_id="GPU-b",hw_name="gpu1",hw_gpu_task="general"} 0.25x3`,
		`hw_gpu_utilization_ratio{host_name="n1",hw_id="GPU-c",hw_name="gpu2",hw_gpu_task="general"} 0.75x3`,
		`hw_power_watts{host_name="n1",hw_id="GPU-a",hw_name="gpu0"} 300x3`,
		`hw_power_watts{host_name="n1",hw_id="GPU-b",hw_name="gpu1"} 200x3`,
		`hw_power_watts{host_name="n1",hw_id="GPU-c",hw_name="gpu2"} 100x3`,
		alloc("GPU-a", "llm", "p1", "0"),
		alloc("GPU-a", "llm", "p2", "1"),
		alloc("GPU-b", "llm", "p3", "-1"),
		alloc("GPU-c", "batch", "p4", "-1"),
	}, map[string][]map[string]any{
		"utilisation per pod (a time-sliced GPU counts for each of its pods)": {
			{"labels": `{hw_id="GPU-a",k8s_namespace_name="llm",k8s_pod_name="p1"}`, "value": 0.5},
			{"labels": `{hw_id="GPU-a",k8s_namespace_name="llm",k8s_pod_name="p2"}`, "value": 0.5},
			{"labels": `{hw_id="GPU-b",k8s_namespace_name="llm",k8s_pod_name="p3"}`, "value": 0.25},
			{"labels": `{hw_id="GPU-c",k8s_namespace_name="batch",k8s_pod_name="p4"}`, "value": 0.75},
		},
		"power of the GPUs one namespace holds": {{"labels": `{}`, "value": 500}},
	})
}

// TestInfoJoinInDocs runs the joins with nvidia_gpu_info_ratio that
// README.md and examples/prometheus/README.md give for putting a GPU's
// name or model on its nvidia_gpu_* and gpuviz_* series, in promtool on a
// GPU whose driver was upgraded a minute ago behind a gateway: the
// gateway's prometheus exporter serves the info series of the old driver
// beside the new one until its metric_expiration (5 minutes) passes, so
// for a while the GPU has two. The join gives the GPU's series once.
func TestInfoJoinInDocs(t *testing.T) {
	join := regexp.MustCompile("`((?:\\.\\.\\. )?\\* on\\([^`]*group_left\\([^`]*nvidia_gpu_info_ratio[^`]*)`")
	queries := map[string]string{}
	for _, doc := range []string{"README.md", "examples/prometheus/README.md"} {
		b, err := os.ReadFile(filepath.Join("..", doc))
		require.NoError(t, err)
		for _, m := range join.FindAllStringSubmatch(string(b), -1) {
			// The docs leave the left side out: the power limit, an
			// nvidia_gpu_* series without hw_model.
			queries[doc+": "+m[1]] = "nvidia_gpu_power_limit_watts " + strings.TrimPrefix(m[1], "... ")
		}
	}
	require.Len(t, queries, 3, "the docs' joins with nvidia_gpu_info_ratio: %v", queries)
	info := func(driver string) string {
		return fmt.Sprintf(`nvidia_gpu_info_ratio{job="otelcol-gpuviz",instance="gateway:8889",host_name="n1",hw_id="GPU-a",hw_name="GPU 0",hw_vendor="NVIDIA",hw_model="NVIDIA H200",hw_driver_version=%q,nvidia_gpu_index="0",nvidia_gpu_pci_bus_id="00000000:19:00.0"} 1x3`, driver)
	}
	want := map[string][]map[string]any{}
	for where, q := range queries {
		l := `job="otelcol-gpuviz",instance="gateway:8889",host_name="n1",hw_id="GPU-a",hw_name="GPU 0"`
		if strings.Contains(q, "group_left(hw_model)") {
			l += `,hw_model="NVIDIA H200"`
		}
		want[where] = []map[string]any{{"labels": "{" + l + "}", "value": 700}}
	}
	checkQueries(t, "the docs' info joins", queries, []string{
		`nvidia_gpu_power_limit_watts{job="otelcol-gpuviz",instance="gateway:8889",host_name="n1",hw_id="GPU-a",hw_name="GPU 0"} 700x3`,
		info("550.54.15"),
		info("570.133.20"),
	}, want)
}

// TestDashboardPowerLimitJoin runs the GPU fleet dashboard's power / limit
// panel in promtool on two GPUs that each have two power limit series: one
// while the gateway still serves its agent's series from before an upgrade
// (otel_scope_version 0.1.0 beside 0.2.0, until the gateway's
// metric_expiration passes), one scraped by two jobs (a PodMonitor beside
// an annotation-based scrape config). Each power series gets its share.
func TestDashboardPowerLimitJoin(t *testing.T) {
	var queries map[string]string
	for f, d := range loadDashboards(t) {
		if filepath.Base(f) == "gpu-fleet.json" {
			queries = dashboardExprs(d)
		}
	}
	const where = `panel "Power / limit" target A`
	require.Contains(t, queries, where)
	queries[where] = grafanaToPromQL(queries[where])
	series := func(name, job, version, host, gpu string, v float64) string {
		return fmt.Sprintf(`%s{job=%q,instance="i:8889",host_name=%q,gpuviz_backend="nvml",hw_id=%q,hw_name="GPU 0",otel_scope_name="github.com/gpuviz/gpuviz/receiver/gpuvizreceiver",otel_scope_version=%q} %gx3`, name, job, host, gpu, version, v)
	}
	labels := func(job, version, host, gpu string) string {
		return fmt.Sprintf(`{job=%q,instance="i:8889",host_name=%q,gpuviz_backend="nvml",hw_id=%q,hw_name="GPU 0",otel_scope_name="github.com/gpuviz/gpuviz/receiver/gpuvizreceiver",otel_scope_version=%q}`, job, host, gpu, version)
	}
	checkQueries(t, "gpu-fleet.json", queries, []string{
		series("hw_power_watts", "otelcol-gpuviz", "0.1.0", "n1", "GPU-a", 350),
		series("hw_power_watts", "otelcol-gpuviz", "0.2.0", "n1", "GPU-a", 350),
		series("nvidia_gpu_power_limit_watts", "otelcol-gpuviz", "0.1.0", "n1", "GPU-a", 700),
		series("nvidia_gpu_power_limit_watts", "otelcol-gpuviz", "0.2.0", "n1", "GPU-a", 700),
		series("hw_power_watts", "otelcol-gpuviz", "0.2.0", "n2", "GPU-b", 175),
		series("hw_power_watts", "gpuviz/otelcol-gpuviz", "0.2.0", "n2", "GPU-b", 175),
		series("nvidia_gpu_power_limit_watts", "otelcol-gpuviz", "0.2.0", "n2", "GPU-b", 700),
		series("nvidia_gpu_power_limit_watts", "gpuviz/otelcol-gpuviz", "0.2.0", "n2", "GPU-b", 700),
	}, map[string][]map[string]any{where: {
		{"labels": labels("otelcol-gpuviz", "0.1.0", "n1", "GPU-a"), "value": 0.5},
		{"labels": labels("otelcol-gpuviz", "0.2.0", "n1", "GPU-a"), "value": 0.5},
		{"labels": labels("otelcol-gpuviz", "0.2.0", "n2", "GPU-b"), "value": 0.25},
		{"labels": labels("gpuviz/otelcol-gpuviz", "0.2.0", "n2", "GPU-b"), "value": 0.25},
	}})
}

// TestGrafanaREADMENamesTheDashboardsVariables holds grafana/README.md's
// row of each dashboard to the variables the dashboard has: a variable
// added to a dashboard (the GPU fleet's namespace and pod) is named there.
func TestGrafanaREADMENamesTheDashboardsVariables(t *testing.T) {
	b, err := os.ReadFile("grafana/README.md")
	require.NoError(t, err)
	rows := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if m := regexp.MustCompile("^\\| `(dashboards/[^`]+\\.json)` \\|").FindStringSubmatch(line); m != nil {
			rows[filepath.Join("grafana", m[1])] = line
		}
	}
	for f, d := range loadDashboards(t) {
		row, ok := rows[f]
		if !assert.True(t, ok, "grafana/README.md has no row for %s", f) {
			continue
		}
		_, vars, ok := strings.Cut(row, "; variables ")
		if !assert.True(t, ok, "%s: the README's row names no variables", f) {
			continue
		}
		var named, have []string
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(vars, -1) {
			named = append(named, m[1])
		}
		for _, v := range d.Templating.List {
			have = append(have, v.Name)
		}
		slices.Sort(named)
		slices.Sort(have)
		assert.Equal(t, have, named, "%s: the variables grafana/README.md names", f)
	}
}
