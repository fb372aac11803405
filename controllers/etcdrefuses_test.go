package controllers

import (
	"context"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// The errors etcd's client returns for a membership change are told apart: only the leader's
// "unhealthy cluster" (it has not been in touch with its voters long enough) is a short wait.
func TestEtcdRefusesForNow(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		// As the client returns it: the gRPC status converted to etcd's error, wrapped by
		// internal/etcd and by the step.
		{fmt.Errorf("failed to AddLearner (ReplaceMember): %w", fmt.Errorf("failed to add etcd learner [https://x:2380]: %w", rpctypes.Error(rpctypes.ErrGRPCUnhealthy))), true},
		// Only its text (an error flattened to a string on the way).
		{fmt.Errorf("failed: %s", rpctypes.ErrUnhealthy.Error()), true},
		{rpctypes.Error(rpctypes.ErrGRPCMemberNotFound), false},
		{rpctypes.Error(rpctypes.ErrGRPCTooManyLearners), false},
		{fmt.Errorf("failed to add etcd learner: %w", context.DeadlineExceeded), false},
	} {
		if got := etcdRefusesForNow(tc.err); got != tc.want {
			t.Errorf("etcdRefusesForNow(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
