package hub

// ErrorCode is a stable, machine-readable class of hub error.
type ErrorCode string

const (
	// ErrUnauthorized: the Hub answered 401 (private or gated repository
	// without a token, or a token it refused).
	ErrUnauthorized ErrorCode = "hub_unauthorized"
	// ErrForbidden: 403 (a gated repository whose terms the token's user
	// has not accepted, or a token without read access).
	ErrForbidden ErrorCode = "hub_forbidden"
	// ErrNotFound: 404 for the repository, revision or file.
	ErrNotFound ErrorCode = "hub_not_found"
	// ErrNoGGUF: no file to pick (none, or none for the quantization asked).
	ErrNoGGUF ErrorCode = "hub_no_gguf"
	// ErrChecksum: the downloaded bytes are not what the Hub published
	// (SHA-256 or size); the file was deleted.
	ErrChecksum ErrorCode = "hub_checksum_mismatch"
	// ErrNoChecksum: the Hub published no SHA-256 for the file, so it
	// cannot be verified and is not used.
	ErrNoChecksum ErrorCode = "hub_no_checksum"
	// ErrOffline: offline (HF_HUB_OFFLINE, or the Hub unreachable) and the
	// cache does not hold the file.
	ErrOffline ErrorCode = "hub_offline_not_cached"
	// ErrProtocol: an answer that is not what a Hub sends.
	ErrProtocol ErrorCode = "hub_protocol"
	// ErrIO: the network or the cache directory failed.
	ErrIO ErrorCode = "hub_io"
)

// Error is every error this package returns.
type Error struct {
	Code ErrorCode
	// Ref is the model asked for ("" before it is known).
	Ref string
	Msg string
	Err error
}

func (e *Error) Error() string {
	s := ""
	if e.Ref != "" {
		s = e.Ref + ": "
	}
	s += e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s + " [" + string(e.Code) + "]"
}

func (e *Error) Unwrap() error { return e.Err }
