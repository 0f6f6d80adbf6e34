package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"

	"sluice/internal/gguf"
	"sluice/internal/hub"
	"sluice/internal/router/node"
)

// hfUsage is -hf's help: llama-server's flag, the same form.
const hfUsage = "Hugging Face model as llama-server's -hf takes it: ORG/REPO[:QUANT] (same as --model hf://ORG/REPO[:QUANT]); downloaded once into the Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub), verified against the Hub's SHA-256; HF_TOKEN for private or gated repositories, HF_HUB_OFFLINE=1 to use the cache only, HF_ENDPOINT for a mirror"

// modelUsage is --model's help in every command that loads a model.
const modelUsage = "GGUF model: a file path, or hf://ORG/REPO[:QUANT | /FILE.gguf] to fetch it from Hugging Face (see -hf); empty serves the built-in default model (synthetic random weights, no download)"

// modelSpec is what --model and -hf name together: -hf is --model with
// an implied hf:// (one of them at most).
func modelSpec(model, hf string) (string, error) {
	switch {
	case hf != "" && model != "":
		return "", fmt.Errorf("give --model or -hf, not both")
	case hf != "":
		return hub.Scheme + hf, nil
	}
	return model, nil
}

// hubFetch is how a model spec reaches the Hub; tests may replace the
// environment through the process environment (HF_ENDPOINT, HF_HUB_CACHE).
func hubFetch(log *slog.Logger, spec string, progress io.Writer) (string, error) {
	ref, err := hub.Parse(spec)
	if err != nil {
		return "", err
	}
	c := &hub.Client{Env: hub.FromEnv(), Progress: progress, Log: log, UserAgent: "sluice/" + moduleVersion()}
	if log != nil {
		log.Info("fetching the model from Hugging Face", "model", ref.String(), "endpoint", c.Endpoint, "cache", c.Cache, "offline", c.Offline, "token", c.Token != "")
	}
	res, err := c.Fetch(context.Background(), ref)
	if err != nil {
		return "", err
	}
	if log != nil {
		log.Info("model from Hugging Face", "model", ref.String(), "file", res.File, "commit", res.Commit, "sha256", res.SHA256,
			"bytes", res.Size, "downloaded", res.Downloaded, "offline", res.Offline, "path", res.Path)
	}
	return res.Path, nil
}

// loadModel resolves a Hub spec to a file in the cache (downloading and
// verifying it when needed) and loads the model; a plain path is loaded
// as it is. log may be nil (progress still goes to stderr).
func loadModel(log *slog.Logger, model, hf string, mem gguf.Memory) (*node.Model, error) {
	spec, err := modelSpec(model, hf)
	if err != nil {
		return nil, err
	}
	if hub.IsSpec(spec) {
		if spec, err = hubFetch(log, spec, os.Stderr); err != nil {
			return nil, err
		}
	}
	return node.LoadModel(spec, mem)
}

// localModel is the file a --model value names: a hf:// spec resolved
// through the Hugging Face cache (fetched and verified when missing, as
// sluice serve does), a path as it is. The tools that read a model file
// (generate, inspect, tokenize) take what serve takes: a model fetched
// with serve -hf was "no such file" to them.
func localModel(model string) (string, error) {
	if !hub.IsSpec(model) {
		return model, nil
	}
	return hubFetch(nil, model, os.Stderr)
}

// moduleVersion is the main module's version for the User-Agent.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}
