package router

import (
	"encoding/json"
	"net/http"
)

// CodeModelLoading (503) answers every request while the server has bound
// its port and is still loading the model (LoadingHandler).
const CodeModelLoading = "model_loading"

// loadingRetryAfter is the Retry-After of a loading server, in seconds:
// loading takes seconds to minutes, so a client should not retry at once.
const loadingRetryAfter = "5"

// LoadingHandler answers while the process has bound its listeners and
// the model is not loaded yet, as llama-server answers "Loading model":
// /health and /ready are 503 {"status":"loading","reason":"model_loading"}
// (a probe sees a state, not a refused connection that looks like a dead
// process), every other path 503 model_loading in OpenAI's error shape.
// All carry Retry-After.
func LoadingHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", loadingRetryAfter)
		switch r.URL.Path {
		case "/health", "/ready":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"status": "loading", "reason": CodeModelLoading})
			return
		}
		writeError(w, newErr(http.StatusServiceUnavailable, CodeModelLoading, "", "the server is loading the model; retry in a few seconds"))
	})
}
