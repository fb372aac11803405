package controllers_test

import "github.com/etcd-pilot/etcd-pilot/charts"

// The manager of these tests renders the charts of spec.chart.source in sandboxes that are
// this test binary (/proc/self/exe, as the operator's binary is in production): it serves
// them before TestMain starts an API server.
func init() { charts.ServeIfSandbox() }
