package orchestrator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/gguf"
	"github.com/arbiterlab/arbiter/internal/enginehttp"
)

// A preset whose engine keeps models (ollama) gets the spec's engine.model in every
// launch before the readiness generation: arbiter uploads the GGUF file as a blob and
// creates the model from it, with the spec's template and context. A random model is
// written once per experiment, so that every launch of every arm serves the same bytes.
// Unless the spec's env names one, each process launch keeps its models in a store of
// its own, removed with the launch: the user's own store is neither read nor changed.

// modelFile is the experiment's GGUF file and its digest, made once.
type modelFile struct {
	mu     sync.Mutex
	done   bool
	path   string
	digest string // sha256:HEX
	err    error
}

// modelFile returns the path and digest of the spec's model, writing a random model,
// or the file's model with its heads padded, into the experiment's log folder the first
// time it is asked for. The digest reads the whole file, which may take a minute for a
// large model: the writing and the digest stop when ctx ends, and a launch that gave up
// is not remembered, so that the next launch makes the file again.
func (e *experiment) modelFile(ctx context.Context) (string, string, error) {
	e.model.mu.Lock()
	defer e.model.mu.Unlock()
	if !e.model.done {
		path, digest, err := e.makeModelFile(ctx)
		if err != nil && ctx.Err() != nil {
			return "", "", err
		}
		e.model.done, e.model.path, e.model.digest, e.model.err = true, path, digest, err
	}
	return e.model.path, e.model.digest, e.model.err
}

func (e *experiment) makeModelFile(ctx context.Context) (string, string, error) {
	m := e.spec.Engine.Model
	path := m.File
	var err error
	switch {
	case m.Random != nil:
		path = filepath.Join(e.logDir, "models", modelFileName(m.Name)+".gguf")
		r := m.Random
		err = writeModel(ctx, path, gguf.TinyLlama{Layers: r.Layers, Width: r.Width, Context: r.Context, Seed: r.Seed}.Write)
	case m.HeadDim > 0:
		path = filepath.Join(e.logDir, "models", fmt.Sprintf("%s-hd%d.gguf", modelFileName(m.Name), m.HeadDim))
		var tr gguf.Trained
		if tr, err = gguf.ReadTrained(m.File); err == nil {
			tr.HeadDim = m.HeadDim
			err = writeModel(ctx, path, tr.Write)
		}
	}
	if err != nil {
		return "", "", fmt.Errorf("model %s: %w", m.Name, err)
	}
	digest, err := fileDigest(ctx, path)
	if err != nil {
		return "", "", fmt.Errorf("model %s: %w", m.Name, err)
	}
	return path, digest, nil
}

// modelFileName is a model name as a file name: tiny:latest → tiny_latest.
func modelFileName(name string) string {
	return strings.NewReplacer(":", "_", "/", "_").Replace(name)
}

// writeModel writes a model file to path through a temporary file, so that a launch
// never reads half of it. It stops when ctx ends, leaving no file.
func writeModel(ctx context.Context, path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".model-*.gguf")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(ctxWriter{ctx, f}); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// fileDigest is a file's sha256 as ollama names blobs: sha256:HEX. It stops when ctx
// ends.
func fileDigest(ctx context.Context, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, ctxReader{ctx, f}); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// ctxWriter writes to w until ctx ends.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// ctxReader reads r until ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// modelStore is the environment of a process launch that gets a model store of its own
// (OLLAMA_MODELS), and the folder to remove once the launch has ended; nil and "" when
// the launch uses the engine's store.
func (e *experiment) modelStore(launch string) ([]string, string) {
	m := e.spec.Engine.Model
	if m == nil || (m.File == "" && m.Random == nil) || e.spec.Preset().Models != arms.ModelsOllama || e.spec.Runtime.Kind != arms.RuntimeProcess {
		return nil, ""
	}
	if _, given := e.spec.Engine.Env["OLLAMA_MODELS"]; given {
		return nil, ""
	}
	dir := filepath.Join(e.logDir, launch+"-models")
	return []string{"OLLAMA_MODELS=" + dir}, dir
}

// prepareModel creates the spec's model at a ready engine that keeps models, and returns
// once the engine lists it.
func (e *experiment) prepareModel(ctx context.Context, base string, preset arms.Preset) error {
	m := e.spec.Engine.Model
	if m == nil || preset.Models != arms.ModelsOllama || (m.File == "" && m.Random == nil) {
		return nil
	}
	path, digest, err := e.modelFile(ctx)
	if err != nil {
		return err
	}
	// No timeout of its own: waitReady bounds the creation by the startup timeout.
	client := enginehttp.Client(0)
	base = strings.TrimRight(base, "/")
	if err := uploadBlob(ctx, client, base, path, digest); err != nil {
		return fmt.Errorf("model %s: %w", m.Name, err)
	}
	tmpl := m.Template
	if tmpl == "" {
		tmpl = arms.DefaultChatTemplate
	}
	stream := false
	req := map[string]any{"model": m.Name, "files": map[string]string{filepath.Base(path): digest}, "template": tmpl, "stream": &stream}
	if m.Context > 0 {
		req["parameters"] = map[string]any{"num_ctx": m.Context}
	}
	body, _ := json.Marshal(req)
	if err := post(ctx, client, base+"/api/create", "application/json", bytes.NewReader(body), http.StatusOK); err != nil {
		return fmt.Errorf("model %s: create: %w", m.Name, err)
	}
	return nil
}

// uploadBlob sends the model file to the engine's blob store, unless it has it.
func uploadBlob(ctx context.Context, client *http.Client, base, path, digest string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, base+"/api/blobs/"+digest, nil)
	if err != nil {
		return err
	}
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := post(ctx, client, base+"/api/blobs/"+digest, "application/octet-stream", f, http.StatusCreated); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	return nil
}

// post sends body and wants status back; the engine's own words when it answers otherwise.
func post(ctx context.Context, client *http.Client, url, contentType string, body io.Reader, want int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != want && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var status struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &status) == nil && status.Error != "" {
		return errors.New(status.Error)
	}
	return nil
}
