package storage

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// cluster is three members on 1Gi claims of class "local", etc-0 leading, spec asking 2Gi.
func cluster(edits ...func(*Observation)) Observation {
	tmpl := resource.MustParse("1Gi")
	o := Observation{Want: resource.MustParse("2Gi"), Template: &tmpl, Expandable: map[string]bool{"local": true}, Now: now}
	for k, name := range []string{"etc-0", "etc-1", "etc-2"} {
		o.Claims = append(o.Claims, Claim{Member: name, Requested: resource.MustParse("1Gi"), Capacity: resource.MustParse("1Gi"),
			Class: "local", Bound: true, MemberID: uint64(0x100 + k), Voter: true, Leader: k == 0, Healthy: true})
	}
	for _, e := range edits {
		e(&o)
	}
	return o
}

func grown(k int, capacity string) func(*Observation) {
	return func(o *Observation) {
		o.Claims[k].Requested = resource.MustParse("2Gi")
		o.Claims[k].Capacity = resource.MustParse(capacity)
	}
}

func all(capacity string) func(*Observation) {
	return func(o *Observation) {
		for k := range o.Claims {
			grown(k, capacity)(o)
		}
	}
}

func pending(k int, since time.Duration) func(*Observation) {
	return func(o *Observation) {
		o.Claims[k].FileSystemResizePending, o.Claims[k].PendingSince = true, now.Add(-since)
	}
}

func TestDecide(t *testing.T) {
	for _, tt := range []struct {
		name   string
		o      Observation
		kind   plan.Kind
		member string
		reason string
		in     string
	}{
		{"nothing to grow", cluster(func(o *Observation) { o.Want = resource.MustParse("1Gi") }), plan.None, "", v1alpha1.ReasonReconciled, ""},
		{"1024Mi is 1Gi", cluster(func(o *Observation) { o.Want = resource.MustParse("1024Mi") }), plan.None, "", v1alpha1.ReasonReconciled, ""},
		{"claims larger than the spec (grown by hand) are left alone", cluster(all("4Gi"), func(o *Observation) {
			o.Want = resource.MustParse("1Gi")
		}), plan.None, "", v1alpha1.ReasonReconciled, ""},
		{"ephemeral", cluster(func(o *Observation) { o.Ephemeral = true }), plan.None, "", v1alpha1.ReasonReconciled, ""},
		{"no StatefulSet", cluster(func(o *Observation) { o.Template = nil }), plan.None, "", v1alpha1.ReasonReconciled, ""},
		{"the first claim grows first", cluster(), plan.ExpandClaim, "etc-0", v1alpha1.ReasonExpandingVolumes, "from 1Gi to 2Gi (3 of 3"},
		{"then the next, while the first resizes", cluster(grown(0, "1Gi")), plan.ExpandClaim, "etc-1", v1alpha1.ReasonExpandingVolumes, "(2 of 3"},
		{"a claim being deleted is skipped", cluster(func(o *Observation) { o.Claims[0].Deleting = true }), plan.ExpandClaim, "etc-1", v1alpha1.ReasonExpandingVolumes, ""},
		{"waits while volumes resize", cluster(all("1Gi")), plan.Wait, "", v1alpha1.ReasonExpandingVolumes, "etc-0, etc-1, etc-2 to 2Gi"},
		{"waits while a file system grows online", cluster(all("2Gi"), grown(1, "1Gi"), pending(1, time.Minute)), plan.Wait, "", v1alpha1.ReasonExpandingVolumes, "etc-1 (file system)"},
		{"a file system that waits too long restarts its member", cluster(all("2Gi"), grown(1, "1Gi"), pending(1, 3*time.Minute)), plan.DeletePod, "etc-1", v1alpha1.ReasonExpandingVolumes, "only offline"},
		{"an unhealthy member is not restarted for it", cluster(all("2Gi"), grown(1, "1Gi"), pending(1, 3*time.Minute), func(o *Observation) { o.Claims[1].Healthy = false }),
			plan.Wait, "", v1alpha1.ReasonExpandingVolumes, "etc-1 (file system)"},
		{"the leader hands over first", cluster(all("2Gi"), grown(0, "1Gi"), pending(0, 3*time.Minute)), plan.MoveLeader, "etc-0", v1alpha1.ReasonExpandingVolumes, "moving leadership to etc-1"},
		{"followers restart before the leader", cluster(all("1Gi"), pending(0, 3*time.Minute), pending(1, 3*time.Minute), pending(2, 3*time.Minute)),
			plan.DeletePod, "etc-1", v1alpha1.ReasonExpandingVolumes, "restarting it"},
		{"the leader waits for the followers' file systems", cluster(all("1Gi"), grown(1, "1Gi"), grown(2, "2Gi"), pending(0, 3*time.Minute), pending(1, time.Minute)),
			plan.Wait, "", v1alpha1.ReasonExpandingVolumes, "restarts for its file system last"},
		{"a lone member restarts", cluster(grown(0, "1Gi"), pending(0, 3*time.Minute), func(o *Observation) { o.Claims = o.Claims[:1] }),
			plan.DeletePod, "etc-0", v1alpha1.ReasonExpandingVolumes, ""},
		{"no restart while another voter is unhealthy", cluster(all("2Gi"), grown(0, "1Gi"), pending(0, 3*time.Minute), func(o *Observation) {
			o.Claims[2].Healthy = false
		}), plan.Wait, "", v1alpha1.ReasonExpandingVolumes, "it restarts once etc-2 is healthy"},
		{"every claim grown: the StatefulSet is re-created", cluster(all("2Gi")), plan.RecreateStatefulSet, "", v1alpha1.ReasonExpandingVolumes, "asks 2Gi instead of 1Gi"},
		{"not while a member pod is not settled", cluster(all("2Gi"), func(o *Observation) { o.Unsettled = "etc-1 is being deleted" }),
			plan.Wait, "", v1alpha1.ReasonExpandingVolumes, "once every member pod runs: etc-1 is being deleted"},
		{"a member restarted since the resize was asked for is not restarted again", cluster(all("2Gi"), grown(1, "1Gi"), pending(1, 3*time.Minute), func(o *Observation) {
			o.Claims[1].PodCreated = now.Add(-time.Minute)
		}), plan.Wait, "", v1alpha1.ReasonExpandingVolumes, "etc-1 (file system)"},
		{"a deleting member is not healthy: no second restart", cluster(all("1Gi"), pending(1, 3*time.Minute), pending(2, 3*time.Minute), func(o *Observation) {
			o.Claims[0].Healthy = false
		}), plan.Wait, "", v1alpha1.ReasonExpandingVolumes, "once etc-0 is healthy"},
		{"a capacity above the request counts", cluster(all("3Gi")), plan.RecreateStatefulSet, "", v1alpha1.ReasonExpandingVolumes, ""},
		{"a claim not bound yet asking the size counts (it is provisioned so)", cluster(all("2Gi"), func(o *Observation) {
			o.Claims[2].Capacity, o.Claims[2].Bound = resource.Quantity{}, false
		}), plan.RecreateStatefulSet, "", v1alpha1.ReasonExpandingVolumes, ""},
		{"a settled cluster whose claims are not bound yet", cluster(func(o *Observation) {
			o.Want = resource.MustParse("1Gi")
			for k := range o.Claims {
				o.Claims[k].Capacity, o.Claims[k].Bound = resource.Quantity{}, false
			}
		}), plan.None, "", v1alpha1.ReasonReconciled, ""},
		{"a claim not bound yet asking less waits to be bound (the API server resizes only bound claims)", cluster(grown(1, "2Gi"), grown(2, "2Gi"), func(o *Observation) {
			o.Claims[0].Capacity, o.Claims[0].Bound = resource.Quantity{}, false
		}), plan.Wait, "", v1alpha1.ReasonExpandingVolumes, "etc-0 are not bound"},
		{"bound claims grow before one that is not bound is waited for", cluster(func(o *Observation) { o.Claims[0].Bound = false }),
			plan.ExpandClaim, "etc-1", v1alpha1.ReasonExpandingVolumes, ""},
		{"done once the template has it", cluster(all("2Gi"), func(o *Observation) { q := resource.MustParse("2Gi"); o.Template = &q }), plan.None, "", v1alpha1.ReasonReconciled, ""},
		{"a class that does not allow expansion stalls", cluster(func(o *Observation) { o.Expandable["local"] = false }), plan.Wait, "", v1alpha1.ReasonVolumeExpansionNotAllowed,
			`StorageClass "local" of the claims of etc-0, etc-1, etc-2 does not allow`},
		{"a class that could not be read: the API server decides", cluster(func(o *Observation) { o.Expandable = nil }), plan.ExpandClaim, "etc-0", v1alpha1.ReasonExpandingVolumes, ""},
		{"an infeasible resize stalls", cluster(grown(0, "1Gi"), func(o *Observation) { o.Claims[0].Infeasible = "ControllerResizeInfeasible" }), plan.Wait, "",
			v1alpha1.ReasonVolumeExpansionFailed, "etc-0 (ControllerResizeInfeasible)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := Decide(tt.o)
			if s.Kind != tt.kind || s.Member != tt.member || s.Reason != tt.reason || !strings.Contains(s.Message, tt.in) {
				t.Fatalf("got %s %q %s: %s; want %s %q %s containing %q", s.Kind, s.Member, s.Reason, s.Message, tt.kind, tt.member, tt.reason, tt.in)
			}
			if s.Kind == plan.ExpandClaim && s.Size != "2Gi" {
				t.Fatalf("size %q", s.Size)
			}
			if _, ok := v1alpha1.ReasonEffects[s.Reason]; !ok && s.Kind != plan.None {
				t.Fatalf("reason %s has no declared effect", s.Reason)
			}
		})
	}
}

// TestSimulateExpansion runs the planner against a small model of the storage and the
// StatefulSet, with the operator crashing (its step lost) at random passes, until it settles:
// every claim and the template end at the new size, each claim grown once, no member restarted
// while the storage grows file systems online.
func TestSimulateExpansion(t *testing.T) {
	for seed := range 50 {
		o := cluster()
		restarts, recreated := 0, 0
		for pass := 0; ; pass++ {
			if pass > 200 {
				t.Fatalf("seed %d: no end after 200 passes: %+v", seed, o)
			}
			s := Decide(o)
			crash := (seed+pass)%7 == 3
			if !crash {
				switch s.Kind {
				case plan.ExpandClaim:
					for k := range o.Claims {
						if o.Claims[k].Member == s.Member {
							if o.Claims[k].Requested.Cmp(o.Want) >= 0 {
								t.Fatalf("seed %d: %s grown twice", seed, s.Member)
							}
							o.Claims[k].Requested = resource.MustParse(s.Size)
						}
					}
				case plan.RecreateStatefulSet:
					q := o.Want.DeepCopy()
					o.Template = &q
					recreated++
				case plan.DeletePod, plan.MoveLeader:
					restarts++
				case plan.None:
					if recreated == 0 || restarts != 0 {
						t.Fatalf("seed %d: ended with %d re-creations, %d restarts", seed, recreated, restarts)
					}
					for _, c := range o.Claims {
						if c.Capacity.Cmp(o.Want) < 0 {
							t.Fatalf("seed %d: ended with %s at %s", seed, c.Member, c.Capacity.String())
						}
					}
					goto next
				}
			}
			// The storage: a claim asking more grows a pass or two later.
			for k := range o.Claims {
				if c := &o.Claims[k]; c.Capacity.Cmp(c.Requested) < 0 && (seed+pass+k)%2 == 0 {
					c.Capacity = c.Requested.DeepCopy()
				}
			}
			o.Now = o.Now.Add(time.Second)
		}
	next:
	}
}

// TestSimulateOfflineExpansion: a storage that grows file systems only when the volume is
// mounted again. Every member is restarted exactly once, followers first, with at most one
// hand-over of leadership, and never two members down at once (a restarted member is
// unhealthy until its next pass).
func TestSimulateOfflineExpansion(t *testing.T) {
	for seed := range 30 {
		o := cluster()
		restarts, moves := map[string]int{}, 0
		down := ""
		for pass := 0; ; pass++ {
			if pass > 500 {
				t.Fatalf("seed %d: no end after 500 passes", seed)
			}
			s := Decide(o)
			crash := (seed+pass)%5 == 2
			if !crash {
				switch s.Kind {
				case plan.ExpandClaim:
					for k := range o.Claims {
						if o.Claims[k].Member == s.Member {
							o.Claims[k].Requested = resource.MustParse(s.Size)
						}
					}
				case plan.MoveLeader:
					moves++
					for k := range o.Claims {
						o.Claims[k].Leader = o.Claims[k].MemberID == s.Target
					}
				case plan.DeletePod:
					if down != "" {
						t.Fatalf("seed %d: restarting %s while %s is down", seed, s.Member, down)
					}
					for k := range o.Claims {
						if c := &o.Claims[k]; c.Member == s.Member {
							if c.Leader {
								t.Fatalf("seed %d: restarting the leader %s", seed, c.Member)
							}
							restarts[c.Member]++
							c.Healthy, down, c.PodCreated = false, c.Member, o.Now
						}
					}
				case plan.RecreateStatefulSet:
					q := o.Want.DeepCopy()
					o.Template = &q
				case plan.None:
					for _, c := range o.Claims {
						if restarts[c.Member] != 1 || c.Capacity.Cmp(o.Want) < 0 {
							t.Fatalf("seed %d: ended with %s restarted %d times at %s", seed, c.Member, restarts[c.Member], c.Capacity.String())
						}
					}
					if moves != 1 {
						t.Fatalf("seed %d: leadership moved %d times, want once (the leader restarts too)", seed, moves)
					}
					goto next
				}
			}
			// The storage: the volume grows, then its file system waits for a remount; a
			// restarted member comes back (and mounts it) a pass later.
			for k := range o.Claims {
				c := &o.Claims[k]
				switch {
				case c.Member == down && pass%2 == 0:
					c.Healthy, down = true, ""
					if c.FileSystemResizePending {
						c.FileSystemResizePending, c.Capacity = false, c.Requested.DeepCopy()
					}
				case c.Requested.Cmp(o.Want) >= 0 && !c.FileSystemResizePending && c.Capacity.Cmp(c.Requested) < 0 && restarts[c.Member] == 0:
					c.FileSystemResizePending, c.PendingSince = true, o.Now
				}
			}
			o.Now = o.Now.Add(20 * time.Second)
		}
	next:
	}
}

// BenchmarkDecide is the planner's cost for a 7-member cluster in the middle of an
// expansion: it runs once per pass, so it must stay far below a pass.
func BenchmarkDecide(b *testing.B) {
	o := cluster(all("1Gi"))
	for k := 3; k < 7; k++ {
		c := o.Claims[0]
		c.Member, c.MemberID, c.Leader = fmt.Sprintf("etc-%d", k), uint64(0x100+k), false
		o.Claims = append(o.Claims, c)
	}
	b.ReportAllocs()
	for b.Loop() {
		if s := Decide(o); s.Kind != plan.Wait {
			b.Fatalf("step %s", s.Kind)
		}
	}
}
