package hostroutingexporter

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

type nopTraces struct {
	ptraceotlp.UnimplementedGRPCServer
}

func (*nopTraces) Export(context.Context, ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	return ptraceotlp.NewExportResponse(), nil
}

// TestTLSToResolvedReplicasNeedsTheServiceName: the dns resolver makes each
// replica an IP:port (a headless Service's A records), and the OTLP
// exporter verifies the replica's certificate against that IP. A gateway
// certificate naming the Service (cert-manager's dnsNames, as
// examples/tls/README.md issues it) is refused unless server_name_override
// names the Service.
func TestTLSToResolvedReplicasNeedsTheServiceName(t *testing.T) {
	const service = "gpuviz-gateway.gpuviz.svc.cluster.local"
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpuviz-gateway"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"gpuviz-gateway", "gpuviz-gateway.gpuviz.svc", service},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	pair, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	require.NoError(t, err)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(caFile, certPEM, 0o600))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}})))
	ptraceotlp.RegisterGRPCServer(srv, &nopTraces{})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	export := func(serverName string) error {
		cfg := NewFactory().CreateDefaultConfig().(*Config)
		cfg.Resolver.Static = configoptional.Some(StaticResolverConfig{Hostnames: []string{ln.Addr().String()}})
		cfg.Protocol.OTLP.ClientConfig.TLS.CAFile = caFile
		cfg.Protocol.OTLP.ClientConfig.TLS.ServerName = serverName
		cfg.Protocol.OTLP.TimeoutConfig.Timeout = 2 * time.Second
		cfg.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
		cfg.RetryConfig.Enabled = false
		e := startBoth(t, cfg)
		return e.traces.ConsumeTraces(context.Background(), hostTraces([]string{"gpu-node-1"}, 1))
	}
	err = export("")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "doesn't contain any IP SANs")
	assert.NoError(t, export(service))
}
