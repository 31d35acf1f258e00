//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the otlp exporter compresses
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gpuviz/gpuviz/internal/procs"
)

// tlsPKI is the test's certificates, generated at run time: the fleet's CA
// with a server certificate (127.0.0.1, localhost) and a client
// certificate, and a second CA nobody trusts with a client certificate of
// its own. Files are PEM in dir.
type tlsPKI struct {
	dir                           string
	ca, rogueCA                   *x509.CertPool
	client, rogueClient           tls.Certificate
	caFile, serverCert, serverKey string
	clientCert, clientKey         string
}

// tlsIssuer is a CA that signs certificates.
type tlsIssuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func tlsNewCA(t *testing.T, name string) tlsIssuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          tlsSerial(t),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"gpuviz e2e"}},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return tlsIssuer{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func tlsSerial(t *testing.T) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	require.NoError(t, err)
	return n
}

// issue signs a leaf certificate: a server one for 127.0.0.1 and
// localhost, or a client one.
func (ca tlsIssuer) issue(t *testing.T, name string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: tlsSerial(t),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"gpuviz e2e"}},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

func tlsMakePKI(t *testing.T, dir string) tlsPKI {
	t.Helper()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	ca, rogue := tlsNewCA(t, "gpuviz fleet CA"), tlsNewCA(t, "rogue CA")
	srvCert, srvKey := ca.issue(t, "gpuviz-gateway", true)
	cliCert, cliKey := ca.issue(t, "gpuviz-agent", false)
	rogueCert, rogueKey := rogue.issue(t, "gpuviz-agent", false)
	p := tlsPKI{
		dir:        dir,
		ca:         x509.NewCertPool(),
		rogueCA:    x509.NewCertPool(),
		caFile:     write("ca.crt", ca.pem),
		serverCert: write("server.crt", srvCert),
		serverKey:  write("server.key", srvKey),
		clientCert: write("client.crt", cliCert),
		clientKey:  write("client.key", cliKey),
	}
	write("rogue-ca.crt", rogue.pem)
	p.ca.AddCert(ca.cert)
	p.rogueCA.AddCert(rogue.cert)
	var err error
	p.client, err = tls.X509KeyPair(cliCert, cliKey)
	require.NoError(t, err)
	p.rogueClient, err = tls.X509KeyPair(rogueCert, rogueKey)
	require.NoError(t, err)
	return p
}

// tlsSink is the gateway's trace backend: an OTLP/gRPC server over TLS
// (the fleet CA's server certificate) that keeps the names and hosts of
// the spans it gets.
type tlsSink struct {
	ptraceotlp.UnimplementedGRPCServer
	mu    sync.Mutex
	spans map[string]string // span name -> its resource's host.name
}

func (s *tlsSink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rss := req.Traces().ResourceSpans()
	for i := range rss.Len() {
		host := ""
		if v, ok := rss.At(i).Resource().Attributes().Get("host.name"); ok {
			host = v.AsString()
		}
		for j := range rss.At(i).ScopeSpans().Len() {
			spans := rss.At(i).ScopeSpans().At(j).Spans()
			for k := range spans.Len() {
				s.spans[spans.At(k).Name()] = host
			}
		}
	}
	return ptraceotlp.NewExportResponse(), nil
}

func (s *tlsSink) names() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.spans))
	for k, v := range s.spans {
		out[k] = v
	}
	return out
}

// tlsSpan is one span named name, without host.name: a plain span, which
// the gpuviz processor passes through at once.
func tlsSpan(name string) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "tls-e2e")
	sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName(name)
	sp.SetTraceID([16]byte{1, 2, 3, byte(len(name)), 5})
	sp.SetSpanID([8]byte{9, byte(len(name))})
	now := time.Now()
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(now.Add(-time.Second)))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now))
	return td
}

// tlsClient says how a test client connects: its trust, its certificate
// and its token.
type tlsClient struct {
	plaintext bool // no TLS at all
	roots     *x509.CertPool
	cert      *tls.Certificate
	token     string // "" = no Authorization header
}

func (c tlsClient) tlsConfig() *tls.Config {
	cfg := &tls.Config{RootCAs: c.roots, MinVersion: tls.VersionTLS12}
	if c.cert != nil {
		// Always sent, even when the server asks for another CA's: Go
		// would otherwise keep a certificate the server's CA did not sign
		// to itself, and an untrusted certificate would look like none.
		cert := c.cert
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return cfg
}

// exportGRPC sends one span over OTLP/gRPC to addr.
func (c tlsClient) exportGRPC(ctx context.Context, addr, span string) error {
	creds := insecure.NewCredentials()
	if !c.plaintext {
		creds = credentials.NewTLS(c.tlsConfig())
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if c.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
	}
	_, err = ptraceotlp.NewGRPCClient(conn).Export(ctx, ptraceotlp.NewExportRequestFromTraces(tlsSpan(span)))
	return err
}

// exportHTTP sends one span over OTLP/HTTP to https://addr/v1/traces and
// returns the status code (0 when no response came).
func (c tlsClient) exportHTTP(ctx context.Context, addr, span string) (int, error) {
	body, err := ptraceotlp.NewExportRequestFromTraces(tlsSpan(span)).MarshalProto()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+"/v1/traces", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: c.tlsConfig()}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// handshake dials addr over TLS (offering HTTP/2, as gRPC does) and reads:
// nil when the server accepted the handshake and spoke, else the error.
func (c tlsClient) handshake(addr string) error {
	cfg := c.tlsConfig()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	return err
}

// scrape GETs url with c's TLS settings and returns status and body.
func (c tlsClient) scrape(ctx context.Context, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	tr := &http.Transport{TLSClientConfig: c.tlsConfig()}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// tlsSecretVolume writes file into dir the way the kubelet updates a
// Secret volume (its AtomicWriter): the content in a new timestamped
// directory, dir/..data switched to it by renaming a symlink over it,
// dir/file a symlink to ..data/file, the previous directory removed.
func tlsSecretVolume(t *testing.T, dir, file, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	version := fmt.Sprintf("..%s", time.Now().Format("2006_01_02_15_04_05.000000000"))
	require.NoError(t, os.Mkdir(filepath.Join(dir, version), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, version, file), []byte(content), 0o600))
	require.NoError(t, os.Symlink(version, filepath.Join(dir, "..data_tmp")))
	require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	if old == "" {
		require.NoError(t, os.Symlink(filepath.Join("..data", file), filepath.Join(dir, file)))
	} else {
		require.NoError(t, os.RemoveAll(filepath.Join(dir, old)))
	}
}

// tlsSpawn starts the collector with config and the environment env (on
// top of the test's).
func tlsSpawn(t *testing.T, g *procs.Group, name, bin, config string, env map[string]string, args ...string) *procs.Proc {
	t.Helper()
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	p, err := g.SpawnEnv(name, environ, bin, append([]string{"--config", config}, args...)...)
	require.NoError(t, err)
	return p
}

// TestTLS runs examples/tls/gateway.yaml, the file users copy, on
// certificates made at run time, and shows who gets through: over OTLP/gRPC
// and OTLP/HTTP a client without the token, with a wrong one, with a
// certificate from another CA, without a certificate, or not trusting the
// gateway's CA is refused, and one with the fleet's CA, its certificate and
// the token gets its span to the trace backend; the Prometheus exporter
// answers only over TLS with a client certificate. Then
// examples/tls/agent.yaml, on simulated GPUs, sends its GPU metrics and a
// local server's span to the gateway over mutual TLS with its token, and
// both arrive; a token written to the gateway's token file is taken
// without a restart and the one it replaced is refused. It needs only the
// collector (make build):
//
//	go test -tags e2e -count=1 -run TestTLS -v ./e2e/
func TestTLS(t *testing.T) {
	root, bin := builtCollector(t)
	work := t.TempDir()
	pki := tlsMakePKI(t, work)
	const agentToken, agentHost = "agent-token-3f9c2a", "gpuviz-tls-agent"
	// The gateway's tokens in a directory laid out as the kubelet mounts a
	// Secret, so that the rotation below is the one a cluster does.
	tokenVolume := filepath.Join(work, "token")
	tlsSecretVolume(t, tokenVolume, "tokens", agentToken+"  # the e2e agent\n")
	serverTokens := filepath.Join(tokenVolume, "tokens")
	agentTokenFile := filepath.Join(work, "agent-token")
	require.NoError(t, os.WriteFile(agentTokenFile, []byte(agentToken+"\n"), 0o600))

	// The trace backend, over TLS.
	sink := &tlsSink{spans: map[string]string{}}
	srvPair, err := tls.LoadX509KeyPair(pki.serverCert, pki.serverKey)
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{srvPair}})))
	ptraceotlp.RegisterGRPCServer(srv, sink)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop) // after the collectors'

	ports, err := procs.FreePorts(11)
	require.NoError(t, err)
	gw := map[string]int{"grpc": ports[0], "http": ports[1], "prometheus": ports[2], "health": ports[3], "pprof": ports[4], "zpages": ports[5], "telemetry": ports[6]}
	ag := map[string]int{"grpc": ports[7], "http": ports[8], "health": ports[9], "telemetry": ports[10]}

	// GPUVIZ_TLS_WORK keeps the collectors' logs after the test, to read
	// what a refused client leaves there.
	group, err := procs.NewGroup(filepath.Join(env("GPUVIZ_TLS_WORK", work), "logs"))
	require.NoError(t, err)
	t.Cleanup(func() {
		group.Stop()
		for _, p := range group.Procs() {
			b, err := os.ReadFile(p.Log)
			if err != nil {
				continue
			}
			if t.Failed() {
				t.Logf("--- %s log (last 6 KiB) ---\n%s", p.Name, tail(b, 6144))
			} else if testing.Verbose() {
				t.Logf("--- %s log: the lines on refused clients ---\n%s", p.Name, tlsRefusalLines(string(b)))
			}
		}
	})
	start := time.Now()
	gateway := tlsSpawn(t, group, "gateway", bin, filepath.Join(root, "examples/tls/gateway.yaml"), map[string]string{
		"GPUVIZ_LISTEN_ADDRESS":     "127.0.0.1",
		"GPUVIZ_OTLP_GRPC_PORT":     fmt.Sprint(gw["grpc"]),
		"GPUVIZ_OTLP_HTTP_PORT":     fmt.Sprint(gw["http"]),
		"GPUVIZ_PROMETHEUS_PORT":    fmt.Sprint(gw["prometheus"]),
		"GPUVIZ_HEALTH_PORT":        fmt.Sprint(gw["health"]),
		"GPUVIZ_PPROF_PORT":         fmt.Sprint(gw["pprof"]),
		"GPUVIZ_ZPAGES_PORT":        fmt.Sprint(gw["zpages"]),
		"GPUVIZ_TELEMETRY_PORT":     fmt.Sprint(gw["telemetry"]),
		"GPUVIZ_TLS_CERT_FILE":      pki.serverCert,
		"GPUVIZ_TLS_KEY_FILE":       pki.serverKey,
		"GPUVIZ_TLS_CLIENT_CA_FILE": pki.caFile,
		"GPUVIZ_TOKEN_FILE":         serverTokens,
		"GPUVIZ_TRACES_ENDPOINT":    lis.Addr().String(),
		"GPUVIZ_TRACES_CA_FILE":     pki.caFile,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, procs.WaitReady(ctx, gateway, procs.HTTPReady(fmt.Sprintf("http://127.0.0.1:%d/", gw["health"]))), "the gateway starts")
	t.Logf("gateway ready in %v", time.Since(start).Round(time.Millisecond))

	grpcAddr := fmt.Sprintf("127.0.0.1:%d", gw["grpc"])
	httpAddr := fmt.Sprintf("127.0.0.1:%d", gw["http"])
	authorised := tlsClient{roots: pki.ca, cert: &pki.client, token: agentToken}
	refused := []struct {
		name   string
		client tlsClient
		// what the refusal says: the gRPC code and text, the HTTP status
		// (0: no response) and, for a refused handshake, the TLS error a
		// client reads on either port.
		code     codes.Code
		grpcText string
		status   int
		tlsText  string
	}{
		{"a-no-token", tlsClient{roots: pki.ca, cert: &pki.client}, codes.Unauthenticated, "missing or empty authorization header", http.StatusUnauthorized, ""},
		{"b-wrong-token", tlsClient{roots: pki.ca, cert: &pki.client, token: "guessed"}, codes.Unauthenticated, "provided authorization does not match", http.StatusUnauthorized, ""},
		{"c-untrusted-client-cert", tlsClient{roots: pki.ca, cert: &pki.rogueClient, token: agentToken}, codes.Unavailable, "", 0, "remote error: tls: unknown certificate authority"},
		{"d-no-client-cert", tlsClient{roots: pki.ca, token: agentToken}, codes.Unavailable, "", 0, "remote error: tls: certificate required"},
		{"e-untrusted-server", tlsClient{roots: pki.rogueCA, cert: &pki.client, token: agentToken}, codes.Unavailable, "x509: certificate signed by unknown authority", 0, "x509: certificate signed by unknown authority"},
	}
	for _, tc := range refused {
		t.Run("grpc/"+tc.name, func(t *testing.T) {
			err := tc.client.exportGRPC(ctx, grpcAddr, "grpc-"+tc.name)
			require.Error(t, err, "refused")
			st, _ := status.FromError(err)
			assert.Equal(t, tc.code, st.Code(), "%v", err)
			assert.Contains(t, st.Message(), tc.grpcText)
			t.Logf("refused: %v", err)
			if tc.tlsText != "" {
				// Under TLS 1.3 the server refuses a client's certificate
				// after the client's side of the handshake is done: gRPC
				// then reports whichever of the alert or the closed
				// connection it met first. A read after the handshake
				// gets the alert itself.
				err := tc.client.handshake(grpcAddr)
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.tlsText)
			}
		})
		t.Run("http/"+tc.name, func(t *testing.T) {
			code, err := tc.client.exportHTTP(ctx, httpAddr, "http-"+tc.name)
			assert.Equal(t, tc.status, code, "%v", err)
			if tc.tlsText != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.tlsText)
			}
			t.Logf("refused: status %d, %v", code, err)
		})
	}
	t.Run("grpc/h-plaintext", func(t *testing.T) {
		err := tlsClient{plaintext: true, token: agentToken}.exportGRPC(ctx, grpcAddr, "grpc-h-plaintext")
		assert.Equal(t, codes.Unavailable, status.Code(err), "gRPC in the clear to the TLS port: %v", err)
	})
	t.Run("http/h-plaintext", func(t *testing.T) {
		code, body, err := tlsClient{}.scrape(ctx, "http://"+httpAddr+"/v1/traces")
		assert.True(t, err != nil || code == http.StatusBadRequest, "plain HTTP to the TLS port: %d %v", code, err)
		assert.NotContains(t, body, "partialSuccess")
	})
	t.Run("grpc/f-authorised", func(t *testing.T) {
		require.NoError(t, authorised.exportGRPC(ctx, grpcAddr, "grpc-f-authorised"))
	})
	t.Run("http/f-authorised", func(t *testing.T) {
		code, err := authorised.exportHTTP(ctx, httpAddr, "http-f-authorised")
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, code)
	})

	// The Prometheus exporter: TLS with a client certificate only.
	promURL := fmt.Sprintf("127.0.0.1:%d/metrics", gw["prometheus"])
	t.Run("g-prometheus", func(t *testing.T) {
		code, body, err := tlsClient{}.scrape(ctx, "http://"+promURL)
		assert.True(t, err != nil || code == http.StatusBadRequest, "plain HTTP is refused: %d %v", code, err)
		assert.NotContains(t, body, "# TYPE")
		t.Logf("plain HTTP: %d %q %v", code, strings.TrimSpace(body), err)
		_, _, err = tlsClient{roots: pki.ca}.scrape(ctx, "https://"+promURL)
		require.Error(t, err, "HTTPS without a client certificate is refused")
		assert.Contains(t, err.Error(), "certificate required")
		_, _, err = tlsClient{roots: pki.rogueCA, cert: &pki.client}.scrape(ctx, "https://"+promURL)
		require.Error(t, err, "a scraper that does not trust the gateway's CA stops")
		code, _, err = tlsClient{roots: pki.ca, cert: &pki.client}.scrape(ctx, "https://"+promURL)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, code)
	})

	// The agent: simulated GPUs, and a local server's span on loopback,
	// both to the gateway over mutual TLS with the token.
	agent := tlsSpawn(t, group, "agent", bin, filepath.Join(root, "examples/tls/agent.yaml"), map[string]string{
		"GPUVIZ_HOST_NAME":        agentHost,
		"GPUVIZ_OTLP_GRPC_PORT":   fmt.Sprint(ag["grpc"]),
		"GPUVIZ_OTLP_HTTP_PORT":   fmt.Sprint(ag["http"]),
		"GPUVIZ_HEALTH_PORT":      fmt.Sprint(ag["health"]),
		"GPUVIZ_TELEMETRY_PORT":   fmt.Sprint(ag["telemetry"]),
		"GPUVIZ_GATEWAY_ENDPOINT": grpcAddr,
		"GPUVIZ_TLS_CA_FILE":      pki.caFile,
		"GPUVIZ_TLS_CERT_FILE":    pki.clientCert,
		"GPUVIZ_TLS_KEY_FILE":     pki.clientKey,
		"GPUVIZ_TOKEN_FILE":       agentTokenFile,
	}, "--set=receivers::gpuviz::backend=simulated", "--set=receivers::gpuviz::collection_interval=2s")
	require.NoError(t, procs.WaitReady(ctx, agent, procs.HTTPReady(fmt.Sprintf("http://127.0.0.1:%d/", ag["health"]))), "the agent starts")
	require.NoError(t, tlsClient{plaintext: true}.exportGRPC(ctx, fmt.Sprintf("127.0.0.1:%d", ag["grpc"]), "agent-local-server"),
		"a local server sends to the agent on loopback")
	var metrics string
	require.Eventually(t, func() bool {
		_, body, err := tlsClient{roots: pki.ca, cert: &pki.client}.scrape(ctx, "https://"+promURL)
		metrics = body
		// Power comes with every tick, energy with the ticks that end a
		// flush interval: a first batch may hold power alone.
		return err == nil && strings.Contains(body, fmt.Sprintf(`host_name=%q`, agentHost)) &&
			strings.Contains(body, "hw_power_watts") && strings.Contains(body, "hw_energy_joules_total")
	}, 30*time.Second, 500*time.Millisecond, "the agent's GPU metrics reach the gateway's Prometheus exporter")
	assert.Contains(t, metrics, `gpuviz_backend="simulated"`, "simulated GPUs say so")

	want := map[string]string{"grpc-f-authorised": "", "http-f-authorised": "", "agent-local-server": agentHost}
	require.Eventually(t, func() bool { return len(sink.names()) >= len(want) }, 30*time.Second, 200*time.Millisecond,
		"the authorised spans reach the trace backend")

	// The token file is read again when it changes: a rotated token is
	// taken without a restart, and the one it replaced is refused. The
	// Secret is updated as the kubelet does it: a new directory, the
	// ..data symlink swapped to it, the old directory removed.
	const rotated = "rotated-token-71d0"
	tlsSecretVolume(t, tokenVolume, "tokens", rotated+"  # after rotation\n")
	require.Eventually(t, func() bool {
		c := authorised
		c.token = rotated
		return c.exportGRPC(ctx, grpcAddr, "grpc-rotated-token") == nil
	}, 15*time.Second, 250*time.Millisecond, "the new token is accepted without a restart")
	err = authorised.exportGRPC(ctx, grpcAddr, "grpc-replaced-token")
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "the replaced token is refused: %v", err)
	want["grpc-rotated-token"] = ""
	require.Eventually(t, func() bool { return len(sink.names()) >= len(want) }, 30*time.Second, 200*time.Millisecond)
	time.Sleep(2 * time.Second) // batch timeout: anything refused but let through would be here by now
	assert.Equal(t, want, sink.names(), "exactly the authorised spans reached the backend, the agent's with its host.name")

	exited, err := gateway.Exited()
	assert.False(t, exited, "the gateway still runs (%v)", err)
	exited, err = agent.Exited()
	assert.False(t, exited, "the agent still runs (%v)", err)
	// The gateway logs no refused token; its telemetry (level detailed)
	// counts them by status.
	_, body, err := tlsClient{}.scrape(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", gw["telemetry"]))
	require.NoError(t, err)
	assert.Regexp(t, `rpc_server_call_duration_count\{[^}]*rpc_response_status_code="UNAUTHENTICATED"[^}]*\} [1-9]`, body)
	assert.Regexp(t, `http_server_request_duration_count\{[^}]*http_response_status_code="401"[^}]*\} [1-9]`, body)
	t.Logf("TestTLS: %v", time.Since(start).Round(time.Millisecond))
}

// tlsRefusalLines picks a log's lines about handshakes and authentication.
func tlsRefusalLines(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		low := strings.ToLower(l)
		if strings.Contains(low, "tls") || strings.Contains(low, "handshake") || strings.Contains(low, "auth") || strings.Contains(low, "token") || strings.Contains(low, "certificate") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
