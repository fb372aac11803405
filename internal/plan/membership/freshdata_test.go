package membership

import "testing"

// TestFreshData (path 3 of issue 9): under emptyDir storage a container restart keeps the
// data and the stamp (no replacement), while a pod re-created after its member started holds
// nothing of it.
func TestFreshData(t *testing.T) {
	const id = 0xab
	tests := []struct {
		name                string
		stamp               string
		anyStamped, running bool
		restarts            int32
		ephemeral, fresh    bool
	}{
		{"claim stamped with the member", "ab", true, false, 3, false, false},
		{"claim stamped with another member", "cd", true, true, 0, false, true},
		{"first formation, nothing stamped yet", "", false, false, 2, false, false},
		{"unstamped claim whose pod runs the member", "", true, true, 0, false, false},
		{"re-created claim, its pod not started yet", "", true, false, 0, false, false},
		{"re-created claim, its pod failing", "", true, false, 2, false, true},
		{"emptyDir pod stamped, its container restarted", "ab", true, false, 5, true, false},
		{"emptyDir pod re-created, not running", "", true, false, 0, true, true},
		{"emptyDir pod unstamped but running the member", "", true, true, 0, true, false},
		{"emptyDir, first formation", "", false, false, 1, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FreshData(tt.stamp, id, tt.anyStamped, tt.running, tt.restarts, tt.ephemeral); got != tt.fresh {
				t.Fatalf("fresh = %v, want %v", got, tt.fresh)
			}
		})
	}
}
