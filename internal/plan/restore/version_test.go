package restore

import (
	"strings"
	"testing"
)

// TestVersionPairProblem: etcd restores a snapshot into the same minor version or the next
// one; an unknown version of the snapshot is no problem, a version that is not a release is.
func TestVersionPairProblem(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		want     string // a part of the problem; "" for none
	}{
		{"", "3.5.17", ""},
		{"3.5.17", "3.5.17", ""},
		{"3.5.9", "3.5.17", ""},
		{"3.5.17", "3.6.4", ""},
		{"3.4.30", "3.6.4", "restore into 3.4 and upgrade step by step"},
		{"3.6.4", "3.5.17", "cannot be restored into etcd 3.5.17"},
		{"main", "3.6.4", "is not a release version"},
	} {
		got := VersionPairProblem(tc.from, tc.to)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("VersionPairProblem(%q, %q) = %q, want %q", tc.from, tc.to, got, tc.want)
		}
	}
}
