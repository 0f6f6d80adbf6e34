package engine

import (
	"errors"
	"fmt"
	"net/http"

	"sluice/internal/kv"
)

// Stable error codes. The router maps them to OpenAI-shaped errors; tests
// and the incident matrix compare codes, never message text.
const (
	CodeContextLength = "context_length_exceeded"
	CodeOverloaded    = "overloaded"
	CodeQueueTimeout  = "queue_timeout"
	CodeKVCapacity    = "kv_capacity_exhausted"
	CodeIntegrity     = "kv_integrity_violation"
	CodeHandoff       = "handoff_failed"
	CodeCancelled     = "cancelled"
	CodeShutdown      = "shutting_down"
	CodeInvalid       = "invalid_request"
	CodeInternal      = "internal_error"
)

// StatusClientClosed is nginx's 499: the client went away; nobody reads it,
// but logs and metrics do.
const StatusClientClosed = 499

func errf(code string, status int, cause error, format string, args ...any) *Error {
	return &Error{Code: code, Status: status, Message: fmt.Sprintf(format, args...), Err: cause}
}

// asEngineError turns any failure into an *Error so every terminal event
// carries a stable code (I8): integrity violations from the pool keep their
// own code, everything else unknown becomes the fallback code.
func asEngineError(err error, fallback string, status int, what string) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var v *kv.Violation
	if errors.As(err, &v) {
		return errf(CodeIntegrity, http.StatusInternalServerError, err,
			"%s failed a KV integrity check (%s); the request was stopped and its pages quarantined", what, v.Kind)
	}
	if errors.Is(err, kv.ErrNoCapacity) {
		return errf(CodeKVCapacity, http.StatusServiceUnavailable, err,
			"%s ran out of KV cache pages; retry later or lower max_tokens", what)
	}
	return errf(fallback, status, err, "%s failed", what)
}
