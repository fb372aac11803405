package render

import "errors"

// TLSError is a TLS setting the operator cannot use yet: a Secret the user provides that is
// missing or invalid, or a CA Secret that cannot be read. The message says what to fix.
type TLSError struct {
	Msg string
	// Waits is true when nothing is to fix: cert-manager has not issued a Secret yet. The
	// cluster is then Reconciling, not Stalled.
	Waits bool
}

func (e *TLSError) Error() string { return e.Msg }

// IsTLSError reports whether err is a TLSError.
func IsTLSError(err error) bool {
	var te *TLSError
	return errors.As(err, &te)
}
