package render

import "github.com/etcd-pilot/etcd-pilot/charts"

// The sandboxes of these tests are this test binary (charts.Budget.Command).
func init() { charts.ServeIfSandbox() }
