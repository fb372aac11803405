package controllers

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/etcdproc"
)

// TestEtcdWakerWakesWhenEtcdShowsTheChange runs watches against a real etcd: a watch wakes
// the cluster as soon as a member it saw silent answers, or the leader reports another
// cluster version than the pass saw, and not when nothing changed (the watch ends by its
// deadline without an event) or when the silent member still does not answer. A cluster
// woken less than wakeWithin ago is not woken again, and a pass's watch replaces the last one.
func TestEtcdWakerWakesWhenEtcdShowsTheChange(t *testing.T) {
	up := etcdproc.Start(t, "127.0.41.8")
	l, err := net.Listen("tcp", "127.0.41.9:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	cl, err := etcd.Dial(context.Background(), []string{up}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := cl.Status(ctx, up)
	if err != nil || st.ClusterVersion == "" {
		t.Fatalf("status %+v, error %v: want the cluster version", st, err)
	}
	cv := st.ClusterVersion

	uid := 0
	newCluster := func() *v1alpha1.EtcdCluster {
		uid++
		return &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "etcd", UID: types.UID(rune('a' + uid))}}
	}
	// woke waits for the watch's whole life and reports how soon an event came (-1: none).
	woke := func(w *etcdWaker) time.Duration {
		start := time.Now()
		select {
		case ev := <-w.events:
			if ev.Object.GetName() != "etcd" || ev.Object.GetNamespace() != "ns" {
				t.Fatalf("woke %s/%s, want ns/etcd", ev.Object.GetNamespace(), ev.Object.GetName())
			}
			return time.Since(start)
		case <-time.After(wakeWithin + 300*time.Millisecond):
			return -1
		}
	}
	for _, tc := range []struct {
		name string
		ww   wakeWatch
		wake bool
	}{
		{"a silent member answers", wakeWatch{silent: []string{up}}, true},
		{"the cluster version rose", wakeWatch{versionURL: up, clusterVersion: "3.5.0"}, true},
		{"the cluster version is still the one seen", wakeWatch{versionURL: up, clusterVersion: cv}, false},
		{"the silent member still does not answer", wakeWatch{silent: []string{down}, versionURL: up, clusterVersion: cv}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newEtcdWaker(etcd.Dial)
			w.set(newCluster(), tc.ww, wakeWithin)
			d := woke(w)
			switch {
			case tc.wake && d < 0:
				t.Fatal("no wake within the watch's life")
			case tc.wake && d > wakeWithin:
				t.Fatalf("woke after %s, want before the requeue (%s)", d, wakeWithin)
			case !tc.wake && d >= 0:
				t.Fatalf("woke after %s with nothing changed", d)
			}
		})
	}

	t.Run("no watch beyond wakeWithin, nor without anything to watch", func(t *testing.T) {
		w := newEtcdWaker(etcd.Dial)
		w.set(newCluster(), wakeWatch{silent: []string{up}}, time.Second)
		w.set(newCluster(), wakeWatch{}, wakeWithin)
		if d := woke(w); d >= 0 {
			t.Fatalf("woke after %s", d)
		}
	})

	t.Run("no more than wakeMaxWatches at once", func(t *testing.T) {
		w := newEtcdWaker(etcd.Dial)
		for i := 0; i < wakeMaxWatches; i++ {
			w.set(newCluster(), wakeWatch{silent: []string{down}}, wakeWithin)
		}
		w.set(newCluster(), wakeWatch{silent: []string{up}}, wakeWithin)
		if d := woke(w); d >= 0 {
			t.Fatalf("a watch beyond the bound woke after %s", d)
		}
	})

	t.Run("woken at most once per wakeWithin, and a pass replaces the watch", func(t *testing.T) {
		w := newEtcdWaker(etcd.Dial)
		c := newCluster()
		w.set(c, wakeWatch{silent: []string{up}}, wakeWithin)
		if d := woke(w); d < 0 {
			t.Fatal("no first wake")
		}
		w.set(c, wakeWatch{silent: []string{up}}, wakeWithin)
		// The next pass (at once) gets no event before wakeWithin passed since the last.
		select {
		case <-w.events:
			t.Fatal("woken again within wakeWithin")
		case <-time.After(wakeWithin - 50*time.Millisecond):
		}
		w.set(c, wakeWatch{silent: []string{down}}, wakeWithin) // replaces the watch
		if d := woke(w); d >= 0 {
			t.Fatalf("the replaced watch woke after %s", d)
		}
		w.mu.Lock()
		n := len(w.watches)
		w.mu.Unlock()
		if n != 0 {
			t.Fatalf("%d watches left after their deadline", n)
		}
	})
}

// TestWakeWatchOf: the pass watches the listed members that did not answer while their pod's
// etcd container runs (not one whose pod is being deleted, does not run, or is gone, nor a
// learner that has not started), and the leader's cluster version while every member answers
// on a newer minor than it, not during a patch upgrade.
func TestWakeWatchOf(t *testing.T) {
	pod := func(name string, running, deleting bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		cs := corev1.ContainerStatus{Name: "etcd"}
		if running {
			cs.State.Running = &corev1.ContainerStateRunning{}
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		return p
	}
	obs := func(version string, silent []uint64, pods ...corev1.Pod) observe.Observation {
		o := &etcd.Observed{Cluster: etcd.Cluster{ClusterID: 7}, Status: map[uint64]etcd.MemberStatus{}, StatusErr: map[uint64]error{}}
		for i := uint64(1); i <= 3; i++ {
			name := "etcd-" + string(rune('0'+i-1))
			o.Cluster.Members = append(o.Cluster.Members, etcd.Member{ID: i, Name: name, ClientURLs: []string{"http://" + name}})
			if slices.Contains(silent, i) {
				o.StatusErr[i] = errors.New("connection refused")
				continue
			}
			o.Status[i] = etcd.MemberStatus{ID: i, Leader: 1, Version: version, ClusterVersion: "3.5.0"}
		}
		return observe.Observation{Etcd: o, Pods: &corev1.PodList{Items: pods}}
	}
	all := []corev1.Pod{pod("etcd-0", true, false), pod("etcd-1", true, false), pod("etcd-2", true, false)}
	for _, tc := range []struct {
		name       string
		o          observe.Observation
		silent     []string
		versionURL string
	}{
		{"settled", obs("3.5.35", nil, all...), nil, ""},
		{"every member on the new minor, the version not raised yet", obs("3.6.16", nil, all...), nil, "http://etcd-0"},
		{"a restarted member's container runs, etcd does not answer yet", obs("3.6.16", []uint64{3}, all...), []string{"http://etcd-2"}, ""},
		{"its pod is being deleted", obs("3.6.16", []uint64{3}, all[0], all[1], pod("etcd-2", true, true)), nil, ""},
		{"its container does not run", obs("3.6.16", []uint64{3}, all[0], all[1], pod("etcd-2", false, false)), nil, ""},
		{"its pod is gone", obs("3.6.16", []uint64{3}, all[0], all[1]), nil, ""},
		{"no etcd view", observe.Observation{Pods: &corev1.PodList{Items: all}}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ww := wakeWatchOf(tc.o, render.Topology{})
			if !slices.Equal(ww.silent, tc.silent) || ww.versionURL != tc.versionURL {
				t.Fatalf("silent %v, versionURL %q; want %v and %q", ww.silent, ww.versionURL, tc.silent, tc.versionURL)
			}
			if tc.versionURL != "" && ww.clusterVersion != "3.5.0" {
				t.Fatalf("clusterVersion %q, want the one seen (3.5.0)", ww.clusterVersion)
			}
		})
	}
	// A patch upgrade: the cluster version (3.6.0) is the members' minor already.
	o := obs("3.6.16", nil, all...)
	for id, st := range o.Etcd.Status {
		st.ClusterVersion = "3.6.0"
		o.Etcd.Status[id] = st
	}
	if ww := wakeWatchOf(o, render.Topology{}); !ww.empty() {
		t.Fatalf("watch %+v during a patch upgrade, want none", ww)
	}
	// A learner that has not started (no name, no client URL) is not watched.
	o = obs("3.5.35", nil, all...)
	o.Etcd.Cluster.Members = append(o.Etcd.Cluster.Members, etcd.Member{ID: 9, IsLearner: true})
	o.Etcd.StatusErr[9] = errors.New("member has not started yet")
	if ww := wakeWatchOf(o, render.Topology{}); !ww.empty() {
		t.Fatalf("watch %+v with an unstarted learner, want none", ww)
	}
}
