package manager

import (
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

func gaugeFamily(name string, byController map[string]float64) *dto.MetricFamily {
	f := &dto.MetricFamily{Name: ptr.To(name)}
	for c, v := range byController {
		f.Metric = append(f.Metric, &dto.Metric{
			Label: []*dto.LabelPair{{Name: ptr.To("name"), Value: ptr.To(c)}, {Name: ptr.To("controller"), Value: ptr.To(c)}},
			Gauge: &dto.Gauge{Value: ptr.To(v)},
		})
	}
	return f
}

func TestStuckPasses(t *testing.T) {
	bounds := map[string]time.Duration{"etcdcluster": 15 * time.Minute, "etcdbackup": 75 * time.Minute}
	for _, tc := range []struct {
		name string
		fams []*dto.MetricFamily
		want string // in the error; "" for none
	}{
		{"no workqueue metrics", nil, ""},
		{"no pass in flight", []*dto.MetricFamily{gaugeFamily(longestRunningProcessor, map[string]float64{"etcdcluster": 0, "etcdbackup": 0})}, ""},
		{"passes within their bounds", []*dto.MetricFamily{gaugeFamily(longestRunningProcessor, map[string]float64{"etcdcluster": 60, "etcdbackup": 3600})}, ""},
		{"a cluster's pass past its bound", []*dto.MetricFamily{gaugeFamily(longestRunningProcessor, map[string]float64{"etcdcluster": 16 * 60, "etcdbackup": 0})},
			"the etcdcluster controller has had a pass running for 16m0s (bound 15m0s)"},
		{"a backup streaming for 70 minutes is not stuck", []*dto.MetricFamily{gaugeFamily(longestRunningProcessor, map[string]float64{"etcdbackup": 3600 + 10*60})}, ""},
		{"a controller without a bound is not watched", []*dto.MetricFamily{gaugeFamily(longestRunningProcessor, map[string]float64{"other": 1e6})}, ""},
		{"another gauge of the same labels", []*dto.MetricFamily{gaugeFamily("workqueue_unfinished_work_seconds", map[string]float64{"etcdcluster": 1e6})}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := stuck(longestPasses(tc.fams), bounds)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestStuckPassesReadsTheControllersQueue: the check reads what a controller's real queue
// (controller-runtime's priority queue, as its controllers use by default) reports of an item
// taken and not done, in the registry the manager serves: it fails while a pass runs past
// the bound and passes again once it is done.
func TestStuckPassesReadsTheControllersQueue(t *testing.T) {
	q := priorityqueue.New[string]("watchdog-test")
	defer q.ShutDown()
	check := stuckPasses(ctrlmetrics.Registry, map[string]time.Duration{"watchdog-test": time.Second})
	q.Add("ns/etcd")
	item, _ := q.Get()
	deadline := time.Now().Add(10 * time.Second)
	for check(nil) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the check still passes 10s into a pass bounded by 1s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := check(nil); !strings.Contains(err.Error(), "watchdog-test") {
		t.Fatalf("the check says %v", err)
	}
	q.Done(item)
	for check(nil) != nil {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatalf("the check still fails after the pass is done: %v", check(nil))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
