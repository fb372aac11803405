package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// operatorCrashes counts the operator's exits that the local cluster restarted it after.
func operatorCrashes(t *testing.T) int {
	b, err := os.ReadFile(filepath.Join(dir, "logs", "local.log"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "exited; restarting")
}

// restartOperator restarts the operator with ETCD_PILOT_FAULT_AFTER set to after ("" for
// none): it then exits right after each such membership step, and is restarted.
func restartOperator(t *testing.T, after string) {
	t.Helper()
	if out, err := local(t, "operator", "stop"); err != nil {
		t.Fatalf("operator stop: %v %s", err, out)
	}
	args := []string{"operator", "start", "--clear-env"}
	if after != "" {
		args = []string{"operator", "start", "--env", "ETCD_PILOT_FAULT_AFTER=" + after}
	}
	if out, err := local(t, args...); err != nil {
		t.Fatalf("operator start: %v %s", err, out)
	}
}

// TestOperatorKilledBetweenStepsConverges kills the operator right after each step of a
// scale-out and of a scale-in (a fault point per step kind), while a client writes. Every
// change must still complete, with quorum held, at most one learner, and no acknowledged
// write lost.
func TestOperatorKilledBetweenStepsConverges(t *testing.T) {
	ns := namespace(t)
	createCluster(t, ns, 3)
	scaleTo(t, ns, 3)
	t.Cleanup(func() { restartOperator(t, "") })
	w := startWriter(t, ns, 4)
	s := startSampler(t, ns)
	rounds := []struct{ out, in string }{
		{"RecordIntent", "RecordIntent"},
		{"AddLearner", "RemoveMember"},
		{"ScaleStatefulSet", "ScaleStatefulSet"},
		{"PromoteLearner", "DeletePVC"},
		{"ClearIntent", "ClearIntent"},
	}
	for _, r := range rounds {
		for _, step := range []struct {
			fault string
			n     int32
		}{{r.out, 4}, {r.in, 3}} {
			crashes := operatorCrashes(t)
			restartOperator(t, step.fault)
			took := scaleTo(t, ns, step.n)
			if got := operatorCrashes(t) - crashes; got == 0 {
				t.Fatalf("scaling to %d never reached the fault point after %s", step.n, step.fault)
			} else {
				t.Logf("scaled to %d in %s with the operator killed %d times after %s", step.n, took.Round(100*time.Millisecond), got, step.fault)
			}
		}
	}
	restartOperator(t, "")
	s.finish(t)
	w.finish(t, ns, 3)
}
