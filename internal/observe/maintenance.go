package observe

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
	"github.com/etcd-pilot/etcd-pilot/internal/plan/membership"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// Compactions remembers, per cluster (by UID), the revision the operator last compacted the
// keyspace to, and the members it defragmented since: etcd's status reports neither (see
// maintenance.Observation). Losing them (an operator restart) costs one compaction that
// changes nothing and one more defragmentation of each member over the quota threshold. The
// reconciler keeps one for the life of the process; the executor writes it (Set,
// Defragmented) after the steps it carries out, the observation reads it. The zero value is
// ready to use.
type Compactions struct {
	mu     sync.Mutex
	rev    map[types.UID]int64
	defrag map[types.UID]map[uint64]bool
}

// Get returns the revision cluster uid was last compacted to (0 when none is known).
func (c *Compactions) Get(uid types.UID) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rev[uid]
}

// Set records a compaction to rev; a newer one forgets the defragmentations before it.
func (c *Compactions) Set(uid types.UID, rev int64) {
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

// Defragmented records that member id was defragmented.
func (c *Compactions) Defragmented(uid types.UID, id uint64) {
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

// DefragmentedSince returns a copy of the members defragmented since the last compaction.
func (c *Compactions) DefragmentedSince(uid types.UID) map[uint64]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.defrag[uid])
}

// Maintenance builds the maintenance planner's view from this pass's etcd answers, the
// process's memory of compactions (compacted) and spec.maintenance. It asks etcd (through
// dial, each call bounded by timeout) for the alarm list only when a member reports an alarm.
func Maintenance(ctx context.Context, dial etcd.Dialer, timeout time.Duration, c *v1alpha1.EtcdCluster, t render.Topology, e *etcd.Observed, busy bool, now time.Time,
	defrag *plan.Defragmentation, defragWait string, compacted *Compactions) maintenance.Observation {
	o := maintenance.Observation{MaxLag: membership.LearnerMaxLag, Busy: busy, CompactedRevision: compacted.Get(c.UID),
		DefragmentedSinceCompaction: compacted.DefragmentedSince(c.UID), Defragmentation: defrag, DefragmentationWait: defragWait}
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
		if alarms, err := alarms(ctx, dial, timeout, t, e); err == nil {
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
func alarms(ctx context.Context, dial etcd.Dialer, timeout time.Duration, t render.Topology, e *etcd.Observed) ([]etcd.Alarm, error) {
	cl, err := dial(ctx, ClientURLs(e), t.TLS)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cl.Alarms(actx)
}
