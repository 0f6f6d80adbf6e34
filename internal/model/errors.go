package model

import "fmt"

// Code is a stable machine-readable error class of this package.
type Code string

const (
	CodeUnsupportedArch Code = "model_unsupported_arch"
	CodeBadMetadata     Code = "model_bad_metadata"
	CodeMissingTensor   Code = "model_missing_tensor"
	CodeBadShape        Code = "model_bad_shape"
	CodeUnsupportedType Code = "model_unsupported_type"
	CodeBadToken        Code = "model_bad_token"
	CodeBadPosition     Code = "model_bad_position"
	CodeKV              Code = "model_kv_failed"
)

// Error is a model failure: loading a file, or one sequence of a step.
type Error struct {
	Code Code
	Msg  string
	// Err is the cause, e.g. the KV view's *kv.Violation; errors.As finds it.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return "model: " + e.Msg + ": " + e.Err.Error()
	}
	return "model: " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

func errf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}
