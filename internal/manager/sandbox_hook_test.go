package manager_test

import "github.com/etcd-pilot/etcd-pilot/charts"

// The managers of these tests render the charts of spec.chart.source in sandboxes that are
// this test binary (/proc/self/exe).
func init() { charts.ServeIfSandbox() }
