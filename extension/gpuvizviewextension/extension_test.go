package gpuvizviewextension

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/gpuviz/gpuviz/internal/view"
)

func startView(t *testing.T) (*viewExtension, string) {
	t.Helper()
	cfg := createDefaultConfig()
	cfg.NetAddr.Endpoint = "127.0.0.1:0"
	cfg.TraceURLTemplate = "http://127.0.0.1:16686/trace/{trace_id}"
	ext, err := NewFactory().Create(context.Background(), extensiontest.NewNopSettings(typ), cfg)
	require.NoError(t, err)
	require.NoError(t, ext.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, ext.Shutdown(context.Background())) })
	e := ext.(*viewExtension)
	return e, "http://" + e.addr
}

func get(t *testing.T, method, url string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

func TestServesPageAndAPI(t *testing.T) {
	e, base := startView(t)
	var _ view.Registrar = e

	code, h, body := get(t, http.MethodGet, base+"/")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, h.Get("Content-Type"), "text/html")
	assert.Contains(t, string(body), "<html")
	index, err := assets().Open("index.html")
	require.NoError(t, err)
	want, _ := io.ReadAll(index)
	assert.Equal(t, string(want), string(body), "/ is the embedded index.html")

	entries, err := fsReadDir("assets")
	require.NoError(t, err)
	require.NotEmpty(t, entries, "web/dist/assets holds the page's code")
	for _, name := range entries {
		code, _, _ := get(t, http.MethodGet, base+"/assets/"+name)
		assert.Equal(t, http.StatusOK, code, name)
	}

	// No source yet: the view says so.
	code, _, body = get(t, http.MethodGet, base+"/api/v1/view")
	assert.Equal(t, http.StatusNotFound, code, string(body))
	assert.Contains(t, string(body), `"error"`)

	src, release := e.RegisterSource("gpuviz/edge")
	g := src.GPU("host-a", "GPU-1")
	g.SetSimulated(true)
	code, _, body = get(t, http.MethodGet, base+"/api/v1/sources")
	require.Equal(t, http.StatusOK, code)
	var sources struct {
		Sources []struct {
			ID        string `json:"id"`
			Simulated bool   `json:"simulated"`
			GPUs      int    `json:"gpus"`
		} `json:"sources"`
		TraceURL string `json:"trace_url_template"`
	}
	require.NoError(t, json.Unmarshal(body, &sources))
	require.Len(t, sources.Sources, 1)
	assert.Equal(t, "gpuviz/edge", sources.Sources[0].ID)
	assert.True(t, sources.Sources[0].Simulated)
	assert.Equal(t, 1, sources.Sources[0].GPUs)
	assert.Equal(t, "http://127.0.0.1:16686/trace/{trace_id}", sources.TraceURL)

	code, _, body = get(t, http.MethodGet, base+"/api/v1/view?source=gpuviz/edge")
	require.Equal(t, http.StatusOK, code, string(body))
	assert.True(t, json.Valid(body))

	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		for _, p := range []string{"/", "/api/v1/view", "/api/v1/sources"} {
			code, h, _ := get(t, m, base+p)
			assert.Equal(t, http.StatusMethodNotAllowed, code, m+" "+p)
			assert.Equal(t, "GET, HEAD", h.Get("Allow"))
		}
	}
	code, _, _ = get(t, http.MethodGet, base+"/api/v2/nothing")
	assert.Equal(t, http.StatusNotFound, code)
	code, _, _ = get(t, http.MethodGet, base+"/nothing.html")
	assert.Equal(t, http.StatusNotFound, code)

	release()
	code, _, body = get(t, http.MethodGet, base+"/api/v1/sources")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(body), `"sources":[]`)
}

func TestStartFailsOnATakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	cfg := createDefaultConfig()
	cfg.NetAddr.Endpoint = ln.Addr().String()
	ext, err := NewFactory().Create(context.Background(), extensiontest.NewNopSettings(typ), cfg)
	require.NoError(t, err)
	err = ext.Start(context.Background(), componenttest.NewNopHost())
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "address already in use"), err.Error())
	require.NoError(t, ext.Shutdown(context.Background()))
}

func fsReadDir(dir string) ([]string, error) {
	entries, err := fs.ReadDir(assets(), dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
