package gguf

import "fmt"

// ErrorCode is a stable, machine-readable class of GGUF error.
type ErrorCode string

const (
	ErrTruncated       ErrorCode = "gguf_truncated"
	ErrBadMagic        ErrorCode = "gguf_bad_magic"
	ErrVersion         ErrorCode = "gguf_unsupported_version"
	ErrCount           ErrorCode = "gguf_absurd_count"
	ErrBadMetadata     ErrorCode = "gguf_bad_metadata"
	ErrDuplicate       ErrorCode = "gguf_duplicate"
	ErrTensorType      ErrorCode = "gguf_unsupported_tensor_type"
	ErrBadShape        ErrorCode = "gguf_bad_shape"
	ErrOutOfBounds     ErrorCode = "gguf_out_of_bounds"
	ErrBadAlignment    ErrorCode = "gguf_bad_alignment"
	ErrIO              ErrorCode = "gguf_io"
	ErrWriter          ErrorCode = "gguf_invalid_write"
	ErrMissingMetadata ErrorCode = "gguf_missing_metadata"
	ErrIsDirectory     ErrorCode = "gguf_is_directory"
)

// Error is every error this package returns. Offset is the byte position in
// the file the problem was found at, or -1.
type Error struct {
	Code   ErrorCode
	Offset int64
	Msg    string
	Err    error // underlying I/O error, if any
}

// Error is the message with its stable code last, in brackets, as the
// tokenizer's and the server's start-up errors give theirs.
func (e *Error) Error() string {
	s := "gguf: " + e.Msg
	if e.Offset >= 0 {
		s += fmt.Sprintf(" (at byte %d)", e.Offset)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s + " [" + string(e.Code) + "]"
}

func (e *Error) Unwrap() error { return e.Err }

func errf(code ErrorCode, off int64, format string, args ...any) *Error {
	return &Error{Code: code, Offset: off, Msg: fmt.Sprintf(format, args...)}
}
