// Package testenv is the shared envtest harness of the repository's envtest suites: a real
// kube-apiserver and etcd (controller-runtime's envtest) with the etcd-pilot CRDs installed,
// a scheme and an uncached client, and a fresh namespace per test.
//
// Start it once per test package, from TestMain, and fail loudly when it cannot start:
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) {
//		var err error
//		env, err = testenv.Start()
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		if err := env.Stop(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//		}
//		os.Exit(code)
//	}
//
// and give each test its own namespace with env.Namespace(t).
//
// The control-plane binaries come from $KUBEBUILDER_ASSETS, or else from <repo>/bin/envtest,
// which `make envtest-assets` (hack/envtest-assets.sh) builds from source.
package testenv
