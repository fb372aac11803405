package backup

import (
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// TestClaimPathStaysUnderTheRoot: whatever an object stored before admission refused ".."
// holds as its path, the snapshot's file is inside the claim's root.
func TestClaimPathStaysUnderTheRoot(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"", "etcd/b1.db"},
		{"/", "etcd/b1.db"},
		{"backups", "backups/b1.db"},
		{"/backups/daily/", "backups/daily/b1.db"},
		{"a/../../b", "b/b1.db"},
		{"../../../etc", "etc/b1.db"},
		{"..", "etcd/b1.db"},
		{"a/./b//c", "a/b/c/b1.db"},
	} {
		got := ClaimPath("etcd", &v1alpha1.PVCDestination{Path: tc.path}, "b1")
		if got != tc.want {
			t.Errorf("claimPath(path %q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}
