package controllers

import (
	"context"
	"maps"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/maintenance"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// compactions remembers, per cluster (by UID), the revision the operator last compacted the
// keyspace to, and the members it defragmented since: etcd's status reports neither (see
// maintenance.Observation). Losing them (an operator restart) costs one compaction that
// changes nothing and one more defragmentation of each member over the quota threshold.
type compactions struct {
	mu     sync.Mutex
	rev    map[types.UID]int64
	defrag map[types.UID]map[uint64]bool
}

func (c *compactions) get(uid types.UID) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rev[uid]
}

// set records a compaction to rev; a newer one forgets the defragmentations before it.
func (c *compactions) set(uid types.UID, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rev == nil {
		c.rev = map[types.UID]int64{}
	}
	if rev > c.rev[uid] {
		c.rev[uid] = rev
		delete(c.defrag, uid)
	}
}

// defragmented records that member id was defragmented.
func (c *compactions) defragmented(uid types.UID, id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.defrag == nil {
		c.defrag = map[types.UID]map[uint64]bool{}
	}
	if c.defrag[uid] == nil {
		c.defrag[uid] = map[uint64]bool{}
	}
	c.defrag[uid][id] = true
}

// defragmentedSince returns a copy of the members defragmented since the last compaction.
func (c *compactions) defragmentedSince(uid types.UID) map[uint64]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.defrag[uid])
}

// maintenanceObservation builds the maintenance planner's view from this pass's etcd answers
// and spec.maintenance. It asks etcd for the alarm list only when a member reports an alarm.
func (r *EtcdClusterReconciler) maintenanceObservation(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, e *etcd.Observed, busy bool, now time.Time,
	defrag *plan.Defragmentation, defragWait string) maintenance.Observation {
	o := maintenance.Observation{MaxLag: learnerMaxLag, Busy: busy, CompactedRevision: r.compacted.get(c.UID),
		DefragmentedSinceCompaction: r.compacted.defragmentedSince(c.UID), Defragmentation: defrag, DefragmentationWait: defragWait}
	leader := e.Leader()
	alarmed := false
	for _, m := range e.Cluster.Members {
		mm := maintenance.Member{Name: m.Name, ID: m.ID, Voter: !m.IsLearner, Leader: m.ID == leader}
		if st, ok := e.Status[m.ID]; ok {
			mm.Answering, mm.DBSize, mm.DBSizeInUse, mm.RaftIndex = true, st.DBSize, st.DBSizeInUse, st.RaftIndex
			if m.ID == leader {
				o.Revision = st.Revision
			}
			for _, er := range st.Errors {
				if strings.Contains(er, "alarm") {
					alarmed = true
				}
			}
		}
		o.Members = append(o.Members, mm)
	}
	if alarmed {
		if alarms, err := r.alarms(ctx, t, e); err == nil {
			for _, a := range alarms {
				o.Alarms = append(o.Alarms, maintenance.Alarm{MemberID: a.MemberID, Type: a.Type})
			}
		}
	}
	if q := c.Spec.Etcd.QuotaBackendBytes; q != nil {
		o.QuotaBytes = q.Value()
	}
	d := c.Spec.Maintenance.Defragmentation
	o.Policy = maintenance.Policy{Enabled: !d.Disabled, Ratio: float64(d.FragmentedPercent) / 100, QuotaRatio: float64(d.QuotaPercent) / 100, Due: true}
	if d.MinFragmentedSize != nil {
		o.Policy.MinFragmentedBytes = d.MinFragmentedSize.Value()
	}
	if d.Schedule != "" {
		o.Policy.Due = false
		if s, err := backupplan.ParseSchedule(d.Schedule, d.TimeZone); err == nil {
			window := time.Hour
			if d.Window != nil {
				window = d.Window.Duration
			}
			_, o.Policy.Due = s.Due(now.Add(-window), now)
		}
	}
	return o
}

// alarms asks the answering members for the cluster's alarm list.
func (r *EtcdClusterReconciler) alarms(ctx context.Context, t render.Topology, e *etcd.Observed) ([]etcd.Alarm, error) {
	cl, err := r.DialEtcd(ctx, clientURLs(e), t.TLS)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	actx, cancel := context.WithTimeout(ctx, r.EtcdTimeout)
	defer cancel()
	return cl.Alarms(actx)
}

// maintenanceStep asks the maintenance planner when membership and the rollout have nothing
// to do (a) or only wait, and an alarm needs handling. While a recorded defragmentation
// stands (defrag), the planner is asked whatever a is, and its AdvanceLog (the entries that
// let the member's applied index show whether it is done) goes first: until the record
// ends, the safety gate refuses every step that takes another voter down.
func (r *EtcdClusterReconciler) maintenanceStep(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, e *etcd.Observed, a plan.Step, now time.Time,
	defrag *plan.Defragmentation, defragWait string) plan.Step {
	if e == nil || (a.Kind != plan.None && a.Kind != plan.Wait && defrag == nil) {
		return a
	}
	mo := r.maintenanceObservation(ctx, c, t, e, a.Kind != plan.None, now, defrag, defragWait)
	m := maintenance.Decide(mo)
	switch {
	case defrag != nil && m.Kind == plan.AdvanceLog:
		return m
	case a.Kind != plan.None && a.Kind != plan.Wait:
		return a
	case m.Kind == plan.None || (a.Kind == plan.Wait && len(mo.Alarms) == 0):
		return a
	}
	return m
}
