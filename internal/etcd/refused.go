package etcd

import (
	"errors"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// AuthRefused reports whether etcd refused the operator as a user: none (no client
// certificate, so "user name is empty"), unknown, not allowed, or a token etcd does not take.
func AuthRefused(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []error{rpctypes.ErrUserEmpty, rpctypes.ErrUserNotFound, rpctypes.ErrPermissionDenied, rpctypes.ErrAuthFailed,
		rpctypes.ErrInvalidAuthToken, rpctypes.ErrAuthOldRevision} {
		if errors.Is(err, e) || strings.Contains(err.Error(), rpctypes.ErrorDesc(e)) {
			return true
		}
	}
	return false
}
