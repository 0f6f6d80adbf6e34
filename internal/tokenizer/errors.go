package tokenizer

import "fmt"

// Code is a stable, machine-readable error code. Callers branch on it with
// errors.Is against the sentinel values below; the message is for humans.
type Code string

const (
	CodeUnknownModel   Code = "tokenizer_unknown_model"
	CodeUnknownPre     Code = "tokenizer_unknown_pretokenizer"
	CodeMissingKey     Code = "tokenizer_missing_key"
	CodeBadMetadata    Code = "tokenizer_bad_metadata"
	CodeDuplicateToken Code = "tokenizer_duplicate_token"
)

// Error is every error this package returns.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return "tokenizer: " + e.Msg + " [" + string(e.Code) + "]" }

// Is makes errors.Is(err, ErrUnknownModel) true for any Error with that code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrUnknownModel   = &Error{Code: CodeUnknownModel}
	ErrUnknownPre     = &Error{Code: CodeUnknownPre}
	ErrMissingKey     = &Error{Code: CodeMissingKey}
	ErrBadMetadata    = &Error{Code: CodeBadMetadata}
	ErrDuplicateToken = &Error{Code: CodeDuplicateToken}
)

func errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}
