package engine

import (
	"errors"
	"fmt"
	"net/http"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/sample"
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
	// The output format's faults found while generating (400): the
	// schema compiled, but at run time it is too ambiguous (more parses
	// alive at once than grammar.MaxStacks) or asks for text the model's
	// vocabulary cannot spell. The request caused them: they are never
	// retried on another pair, never blamed on a worker.
	CodeGrammarAmbiguous = "grammar_ambiguous"
	CodeGrammarDeadEnd   = "grammar_dead_end"
	// CodeUnsupported (400): the worker cannot serve a parameter of the
	// request (an output format on a model with no vocabulary).
	CodeUnsupported = "unsupported_parameter"
)

// requestFaults are the codes of failures the request itself causes after
// admission; they cross the handoff with their code (wireError).
var requestFaults = map[string]bool{CodeGrammarAmbiguous: true, CodeGrammarDeadEnd: true, CodeUnsupported: true,
	// grammar.CompileSchema's codes, should a worker refuse a schema
	// the router compiled.
	"invalid_schema": true, "unsupported_schema": true, "schema_too_large": true, "schema_too_deep": true,
	"enum_too_large": true, "schema_recursion": true, "pattern_too_complex": true, "grammar_too_large": true}

// requestFault is the 400 for err when err is a fault of the request: a
// sampler's (sample.Error), one a peer reported (handoff.Error with the
// same code) or already an *Error; nil otherwise.
func requestFault(err error) *Error {
	var ee *Error
	if errors.As(err, &ee) && requestFaults[ee.Code] {
		return ee
	}
	var se *sample.Error
	if errors.As(err, &se) && requestFaults[se.Code] {
		return &Error{Code: se.Code, Status: http.StatusBadRequest, Message: se.Msg + " (response_format or the tool's parameters)"}
	}
	var he *handoff.Error
	if errors.As(err, &he) && requestFaults[string(he.Code)] {
		return &Error{Code: string(he.Code), Status: http.StatusBadRequest, Message: he.Msg}
	}
	return nil
}

// wireError is err as it must cross the handoff: a request fault as a
// handoff.Error with its own code (an *Error would reach the router as
// an internal failure of the peer); anything else as it is.
func wireError(err error) error {
	if rf := requestFault(err); rf != nil {
		return handoff.FromWire(rf.Code, rf.Message)
	}
	return err
}

// samplingFailure is the terminal error of a draw that failed.
func samplingFailure(err error) *Error {
	if rf := requestFault(err); rf != nil {
		return rf
	}
	return errf(CodeInternal, http.StatusInternalServerError, err, "sampling failed")
}

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
	if rf := requestFault(err); rf != nil {
		return rf
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
