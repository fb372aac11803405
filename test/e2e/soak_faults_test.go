package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// soakFault is one kind of fault the injector picks, with its weight.
type soakFault struct {
	kind   string
	weight int
	inject func(s *soak, c *soakCluster)
}

// soakFaults are the faults of the soak. Each takes what it disrupts out, excuses in the
// cluster's sampler the members it takes down for as long as it does, brings them back, and
// returns; the soak then waits until every cluster settles as etcd reports it.
var soakFaults = []soakFault{
	{"kill-member", 4, (*soak).killMember},
	{"stall-member", 2, (*soak).stallMember},
	{"wipe-member", 2, (*soak).wipeMember},
	{"node-stop", 1, (*soak).stopNode},
	{"operator-kill", 1, (*soak).killOperator},
	{"operator-handover", 1, (*soak).handOverOperator},
	{"apiserver-restart", 1, (*soak).restartAPIServer},
	{"scale-out-in", 1, (*soak).scaleOutIn},
	{"kill-between-steps", 1, (*soak).killBetweenSteps},
	{"pause-resume", 1, (*soak).pauseResume},
	{"upgrade", 1, (*soak).upgradeCluster},
}

// inject draws one fault and its cluster from the seed and carries it out.
func (s *soak) inject() {
	total := 0
	for _, f := range soakFaults {
		total += f.weight
	}
	pick := s.rng.Intn(total)
	c := s.clusters[s.rng.Intn(len(s.clusters))]
	for _, f := range soakFaults {
		if pick -= f.weight; pick < 0 {
			kind := f.kind
			if kind == "upgrade" && (c.version == "" || c.version == soakVersions[len(soakVersions)-1]) {
				kind = "kill-member" // upgradeCluster kills a member instead
			}
			start := time.Now()
			f.inject(s, c)
			s.mu.Lock()
			s.faults[kind]++
			s.mu.Unlock()
			s.t.Logf("soak: %s done in %s", kind, time.Since(start).Round(100*time.Millisecond))
			return
		}
	}
}

// member draws a member name from the seed.
func (s *soak) member() string { return fmt.Sprintf("etcd-%d", s.rng.Intn(soakMembers)) }

// killMember kills a member's processes; the kubelet restarts the container.
func (s *soak) killMember(c *soakCluster) {
	m := s.member()
	s.note(c.id, "kill-member", m)
	c.sampler.allowDown(m)
	if out, err := local(s.t, "kill-pod", c.ns+"/"+m); err != nil {
		s.fail(c, "kill-pod %s: %v %s", m, err, out)
	}
	s.waitBack(c, m)
}

// waitBack waits until the cluster has settled, then ends the excuse for the names.
func (s *soak) waitBack(c *soakCluster, names ...string) {
	if err := s.settle(c, soakMembers); err != nil {
		s.fail(c, "did not settle after %v were taken down: %v", names, err)
	}
	c.sampler.endDown(names...)
	s.note(c.id, "back", strings.Join(names, " "))
}

// stallMember stops a member's etcd process with SIGSTOP for 2 to 5 s and continues it: it
// emulates a disk that stops answering (every write and fsync blocks; so do the member's
// heartbeats and client answers, which a real stalled disk would leave running: this is
// the harsher case of the two). The process is found by its command line (the member name
// and the namespace in its advertised URLs).
func (s *soak) stallMember(c *soakCluster) {
	m := s.member()
	stall := time.Duration(2000+s.rng.Intn(3000)) * time.Millisecond
	pid, err := memberPid(c.ns, m)
	if err != nil {
		s.note(c.id, "stall-member", fmt.Sprintf("%s skipped: %v", m, err))
		return
	}
	s.note(c.id, "stall-member", fmt.Sprintf("%s (pid %d) for %s", m, pid, stall))
	c.sampler.allowDown(m)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		c.sampler.endDown(m)
		s.note(c.id, "stall-member", fmt.Sprintf("%s skipped: SIGSTOP: %v", m, err))
		return
	}
	time.Sleep(stall) // the fault's own length
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		s.fail(c, "SIGCONT %s: %v", m, err)
	}
	s.waitBack(c, m)
}

// memberPid finds the etcd process of member in ns.
func memberPid(ns, member string) (int, error) {
	entries, _ := os.ReadDir("/proc")
	want := member + ".etcd." + ns + ".svc"
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "etcd" {
			continue
		}
		if strings.Contains(string(b), "--name="+member+"\x00") && strings.Contains(string(b), want) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no etcd process of %s/%s found", ns, member)
}

// wipeMember empties a member's data directory and kills it: the operator must replace it
// (remove the old member, add a learner, promote it) without ever serving from the empty one.
func (s *soak) wipeMember(c *soakCluster) {
	m := s.member()
	s.note(c.id, "wipe-member", m)
	c.sampler.allowDown(m)
	wipeInPlace(s.t, c.ns, m)
	s.waitBack(c, m)
}

// stopNode stops a node for 3 to 8 s and starts it again: one member of every cluster with
// a member there goes down with it.
func (s *soak) stopNode(_ *soakCluster) {
	node := fmt.Sprintf("local-node-%d", 1+s.rng.Intn(3))
	stop := time.Duration(3000+s.rng.Intn(5000)) * time.Millisecond
	taken := map[*soakCluster][]string{}
	for _, c := range s.clusters {
		pods := &corev1.PodList{}
		if err := k8s.List(context.Background(), pods, client.InNamespace(c.ns)); err != nil {
			s.fail(c, "list pods: %v", err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == node && memberPod.MatchString(p.Name) {
				taken[c] = append(taken[c], p.Name)
			}
		}
		c.sampler.allowDown(taken[c]...)
	}
	s.note(-1, "node-stop", fmt.Sprintf("%s for %s", node, stop))
	s.stoppedNode = node
	if out, err := local(s.t, "node", "stop", node); err != nil {
		s.fail(nil, "node stop %s: %v %s", node, err, out)
	}
	time.Sleep(stop) // the fault's own length
	if out, err := local(s.t, "node", "start", node); err != nil {
		s.fail(nil, "node start %s: %v %s", node, err, out)
	}
	s.stoppedNode = ""
	for _, c := range s.clusters {
		s.waitBack(c, taken[c]...)
	}
}

// killOperator stops every operator pod and starts the operator again.
func (s *soak) killOperator(_ *soakCluster) {
	s.note(-1, "operator-kill", "")
	restartOperator(s.t, "")
}

// restartAPIServer restarts kube-apiserver: the operator's watches and requests fail until
// it is back.
func (s *soak) restartAPIServer(_ *soakCluster) {
	s.note(-1, "apiserver-restart", "")
	if out, err := local(s.t, "apiserver", "restart"); err != nil {
		s.fail(nil, "apiserver restart: %v %s", err, out)
	}
	s.note(-1, "apiserver-restart", "ready again")
}

// handOverOperator kills the pod holding the operator's leader Lease; a replica must take
// over: the other one, or the killed pod's restarted container if it wins the Lease first
// (both wait out the Lease's duration, since a killed leader does not release it).
func (s *soak) handOverOperator(_ *soakCluster) {
	// Right after an operator kill or hand-over no replica holds the Lease yet: wait for one.
	var leader string
	var before int
	end := time.Now().Add(time.Minute)
	for {
		var err error
		leader, before, err = operatorLeader()
		if err == nil {
			break
		}
		if time.Now().After(end) {
			s.fail(nil, "no single operator leader for a minute before the hand-over: %v", err)
			return
		}
		time.Sleep(250 * time.Millisecond) // poll interval; the loop ends after a minute
	}
	s.note(-1, "operator-handover", "kill the leader "+leader)
	if out, err := local(s.t, "kill-pod", operatorNamespace+"/"+leader); err != nil {
		s.fail(nil, "kill-pod %s: %v %s", leader, err, out)
	}
	end = time.Now().Add(2 * time.Minute)
	for {
		now, after, err := operatorLeader()
		switch {
		case err == nil && now != leader:
			s.note(-1, "operator-handover", "new leader "+now)
			return
		case err == nil && after > before:
			s.note(-1, "operator-handover", "the killed pod's restarted container took the Lease back: "+now)
			return
		}
		if time.Now().After(end) {
			s.fail(nil, "no operator replica acquired the leader Lease within 2 minutes of killing the leader %s (%v)", leader, err)
			return
		}
		time.Sleep(250 * time.Millisecond) // poll interval; the loop ends after 2 minutes
	}
}

// scaleOutIn scales a cluster to 4 members and back to 3.
func (s *soak) scaleOutIn(c *soakCluster) {
	s.note(c.id, "scale-out-in", "3 -> 4 -> 3")
	scaleTo(s.t, c.ns, soakMembers+1)
	if err := s.settle(c, soakMembers+1); err != nil {
		s.fail(c, "did not settle at 4 members: %v", err)
	}
	scaleTo(s.t, c.ns, soakMembers)
}

// soakSteps are the membership steps after which killBetweenSteps makes the operator exit.
var soakSteps = []string{"RecordIntent", "AddLearner", "ScaleStatefulSet", "PromoteLearner", "RemoveMember", "DeletePVC", "ClearIntent"}

// killBetweenSteps scales a cluster out and in with the operator exiting right after every
// step of one kind (drawn from the seed).
func (s *soak) killBetweenSteps(c *soakCluster) {
	step := soakSteps[s.rng.Intn(len(soakSteps))]
	s.note(c.id, "kill-between-steps", "operator exits after every "+step+"; scale 3 -> 4 -> 3")
	s.operatorFault = true
	restartOperator(s.t, step)
	scaleTo(s.t, c.ns, soakMembers+1)
	scaleTo(s.t, c.ns, soakMembers)
	restartOperator(s.t, "")
	s.operatorFault = false
}

// pauseResume pauses a cluster, kills a member while it is paused (the kubelet restarts it;
// the operator must not act), and resumes it.
func (s *soak) pauseResume(c *soakCluster) {
	m := s.member()
	s.note(c.id, "pause-resume", "pause, kill "+m+", resume")
	setPaused(s, c, true)
	c.sampler.allowDown(m)
	if out, err := local(s.t, "kill-pod", c.ns+"/"+m); err != nil {
		s.fail(c, "kill-pod %s: %v %s", m, err, out)
	}
	s.waitBack(c, m)
	setPaused(s, c, false)
}

func setPaused(s *soak, c *soakCluster, paused bool) {
	cl := getCluster(s.t, c.ns)
	patch := client.MergeFrom(cl.DeepCopy())
	cl.Spec.Paused = paused
	if err := k8s.Patch(context.Background(), cl, patch); err != nil {
		s.fail(c, "set paused %v: %v", paused, err)
	}
}

// upgradeCluster moves a cluster to the next version (long soaks only: a cluster created at
// 3.5.35 goes to 3.6.16, then 3.7.3; never down). Short soaks and clusters at the last
// version kill a member instead, so the draws stay the same.
func (s *soak) upgradeCluster(c *soakCluster) {
	next := ""
	for i, v := range soakVersions[:len(soakVersions)-1] {
		if c.version == v {
			next = soakVersions[i+1]
		}
	}
	if next == "" {
		s.killMember(c)
		return
	}
	s.note(c.id, "upgrade", c.version+" -> "+next)
	if err := setVersion(s.t, c.ns, next); err != nil {
		s.fail(c, "set version %s: %v", next, err)
	}
	c.version = next // settle now waits until etcd reports every member on it
	if err := s.settle(c, soakMembers); err != nil {
		s.fail(c, "did not settle on %s: %v", next, err)
	}
}
