package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"sluice/internal/engine"
)

// apiError is an error answered in OpenAI's shape:
// {"error":{"message","type","code","param"}}. Code is stable and
// machine-readable; Message is a sentence the user can act on.
type apiError struct {
	Status  int
	Type    string
	Code    string
	Param   string
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// Stable error codes answered by the router itself. Engine errors keep the
// engine's code (e.g. kv_integrity_violation, handoff_failed).
const (
	CodeContextLength = "context_length_exceeded"
	CodeInvalidJSON   = "invalid_json"
	CodeInvalidParam  = "invalid_parameter"
	CodeMissingParam  = "missing_parameter"
	CodeUnsupported   = "unsupported_parameter"
	CodeMissingKey    = "missing_api_key"
	CodeInvalidKey    = "invalid_api_key"
	CodeBodyTooLarge  = "request_too_large"
	CodeOverloaded    = "overloaded"
	CodeTenantLimit   = "tenant_concurrency_limit"
	// CodeRateLimited (429): the tenant's rpm=/tpm= bucket is empty now;
	// Retry-After says when it will hold the request.
	CodeRateLimited = "rate_limited"
	// CodeRateTooSmall (400): the request alone needs more tokens than
	// the tenant's whole per-minute limit; no wait would admit it.
	CodeRateTooSmall = "rate_limit_too_small"
	CodeShuttingDown = "shutting_down"
	// CodeDraining (503): the server got SIGTERM and takes no new
	// generation request; retry on another instance.
	CodeDraining = "draining"
	// CodeDrainTimeout (503): the request was still running when
	// --drain-timeout ran out and the server cut it.
	CodeDrainTimeout    = "drain_timeout"
	CodeInternal        = "internal_error"
	CodeNotFound        = "not_found"
	CodeTemplate        = "chat_template_error"
	CodeTokenize        = "tokenization_failed"
	CodeMethodNotAllow  = "method_not_allowed"
	CodeUnknownModel    = "model_not_found"
	CodeEngineCancelled = "cancelled"
	// CodeClientGone (499, statusClientGone): the client went away
	// before the answer; counted in metrics and logs, never sent.
	CodeClientGone = "client_disconnected"
	// CodeKVCapacity (503) is the engine's: no free KV pages for the
	// request now. Distinct from CodeOverloaded (429, a concurrency limit).
	CodeKVCapacity = engine.CodeKVCapacity
	// CodeQueueTimeout (503) is the engine's: the request waited its
	// --queue-timeout in the queue without room.
	CodeQueueTimeout = engine.CodeQueueTimeout
)

// statusClientGone is the status metrics and logs give a request whose
// client went away (nginx's 499; nothing is sent).
const statusClientGone = 499

func typeForStatus(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable:
		return "overloaded_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func newErr(status int, code, param, format string, args ...any) *apiError {
	return &apiError{Status: status, Type: typeForStatus(status), Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
}

func badParam(param, format string, args ...any) *apiError {
	return newErr(http.StatusBadRequest, CodeInvalidParam, param, format, args...)
}

// fromEngine maps an engine failure onto the API, keeping its stable code.
// Anything that is not an *engine.Error is an internal error: its text is
// logged, not sent, since it may carry internals.
func fromEngine(err error) *apiError {
	var ee *engine.Error
	if errors.As(err, &ee) {
		status := ee.Status
		if status < 400 || status > 599 {
			status = http.StatusInternalServerError
		}
		code := ee.Code
		if code == "" {
			code = CodeInternal
		}
		return &apiError{Status: status, Type: typeForStatus(status), Code: code, Message: ee.Message}
	}
	return newErr(http.StatusInternalServerError, CodeInternal, "", "the server failed to complete the request")
}

type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    string  `json:"code"`
	Param   *string `json:"param"`
}

func (e *apiError) body() errorBody {
	f := errorFields{Message: e.Message, Type: e.Type, Code: e.Code}
	if e.Param != "" {
		p := e.Param
		f.Param = &p
	}
	return errorBody{Error: f}
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	if (e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable) && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(e.body())
}
