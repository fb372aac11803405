package membership

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// FuzzDecideRecords runs the planner (and the gate after it) on a cluster whose stored records
// are fuzzed: the intent annotation (read as the controller reads it: an unreadable one
// becomes op "unreadable") and the founders annotation of the membership ConfigMap (a
// comma-separated "name=peerURL" list), around a cluster shaped by a few more fuzzed
// numbers. Whatever the records hold, the planner must not panic, must return a step the
// gate then checks, and a step that clears a record it cannot read rather than act on it.
func FuzzDecideRecords(f *testing.F) {
	add, _ := json.Marshal(membershipIntent{Op: intentAdd, Member: mdName(3), PeerURL: mdPeerURL(mdName(3)), Reason: reasonScaleOut, StartedAt: mdT0})
	rm, _ := json.Marshal(membershipIntent{Op: intentRemove, Member: mdName(2), ID: mdID(2), PeerURL: mdPeerURL(mdName(2)), Reason: reasonScaleIn, StartedAt: mdT0})
	repl, _ := json.Marshal(membershipIntent{Op: intentReplace, Member: mdName(1), ID: mdID(1), PeerURL: mdPeerURL(mdName(1)), ClaimUID: "uid-1", StartedAt: mdT0})
	founders := "etc-0=http://etc-0.etc.ns.svc:2380,etc-1=http://etc-1.etc.ns.svc:2380,etc-2=http://etc-2.etc.ns.svc:2380"
	for _, s := range []struct {
		intent, founders     string
		desired, sts, shape  uint8
		bootstrapped, noEtcd bool
	}{
		{string(add), "", 4, 3, 0, true, false},
		{string(rm), "", 2, 3, 0, true, false},
		{string(repl), "", 3, 3, 1, true, false},
		{"", founders, 3, 1, 0, false, false},
		{"", founders, 3, 3, 0, false, true},
		{`{"op":"replace","member":"etc-1","id":"zz"}`, "", 3, 3, 0, true, false},
		{`{"op":"add","member":"etc-99999999999"}`, "", 3, 3, 0, true, false},
		{`{"op":"remove","member":"etc--1","id":"ffffffffffffffff"}`, ",=,==", 3, 3, 2, true, false},
		{"null", "", 0, 0, 3, true, false},
		{`{"op":"add","member":"etc-3","peerURL":""}`, "etc-0", 5, 4, 4, true, false},
	} {
		f.Add(s.intent, s.founders, s.desired, s.sts, s.shape, s.bootstrapped, s.noEtcd)
	}
	f.Fuzz(func(t *testing.T, intent, foundersRec string, desired, sts, shape uint8, bootstrapped, noEtcd bool) {
		n := int32(shape%5) + 1
		fx := cluster3(n).want(int32(desired%9) + 1).stsReplicas(int32(sts % 9))
		switch shape / 5 % 6 {
		case 1:
			fx.down(n - 1)
		case 2:
			fx.learner(n, shape%2 == 0, uint64(shape))
		case 3:
			fx.noPod(0)
		case 4:
			fx.removeMember(n - 1)
		case 5:
			fx.ephemeral()
		}
		fx.notBootstrap, fx.noEtcd = !bootstrapped, noEtcd
		if intent != "" {
			in := &membershipIntent{}
			if err := json.Unmarshal([]byte(intent), in); err != nil {
				in = &membershipIntent{Op: "unreadable", Reason: err.Error()}
			}
			fx.intent = in
		}
		o := fx.obs()
		if foundersRec != "" {
			o.FoundingList = strings.Split(foundersRec, ",")
			o.Founders = int32(len(o.FoundingList))
		}
		step := Decide(o)
		if o.Intent != nil {
			known := o.Intent.Op == intentAdd || o.Intent.Op == intentRemove || o.Intent.Op == intentReplace
			_, named := plan.Ordinal(o.StatefulSet, o.Intent.Member)
			// Before the cluster first formed, starting the founders is not about the intent.
			bootstrap := step.Kind == actScaleStatefulSet && step.Reason == reasonBootstrapping
			if (!known || !named) && step.Kind != actClearIntent && step.Kind != actWait && step.Kind != actNone && !bootstrap {
				t.Fatalf("intent %q (op %q, member %q) that names no change was acted on: %+v", intent, o.Intent.Op, o.Intent.Member, step)
			}
		}
		if step.Kind == actRecordIntent && step.Intent == nil {
			t.Fatalf("RecordIntent without an intent: %+v", step)
		}
		plan.Gate(step, o.Evidence())
		InitialCluster(o)
	})
}
