// Package controlplane runs a Kubernetes control plane on loopback from local binaries: an
// etcd for the API server, kube-apiserver, kube-controller-manager and kube-scheduler. It is
// the control plane of `etcd-pilot-local` and of the end-to-end tests; no kubelet runs, the
// process nodes of internal/localcluster/node play that part.
package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Defaults of Config.
const (
	DefaultServiceClusterIPRange  = "10.96.0.0/16"
	DefaultNodeMonitorGracePeriod = 20 * time.Second
	DefaultStartTimeout           = 3 * time.Minute
	// stopGrace is how long a component may take to exit after SIGTERM before SIGKILL.
	stopGrace = 10 * time.Second
	// clusterName names the cluster, context and user in the kubeconfig.
	clusterName = "etcd-pilot-local"
)

// Config configures Start.
type Config struct {
	// Dir holds everything the control plane writes: Dir/kubeconfig, the component logs in
	// Dir/logs, and Dir/controlplane (etcd data, certificates, keys, the token file).
	// Required; created if missing. Every Start begins with an empty store: the etcd data of
	// an earlier run is deleted. The API server's generated serving certificate is reused.
	Dir string
	// KubeBinDir holds kube-apiserver, kube-controller-manager and kube-scheduler. Required.
	KubeBinDir string
	// EtcdBinDir holds the etcd binary of the API server's store. Required.
	EtcdBinDir string
	// ServiceClusterIPRange is the range Service cluster IPs come from. They are only written
	// into Service objects; nothing routes to them. Default DefaultServiceClusterIPRange.
	ServiceClusterIPRange string
	// NodeMonitorGracePeriod is how long a node may go without renewing its lease before the
	// controller-manager marks it NotReady. Default DefaultNodeMonitorGracePeriod.
	NodeMonitorGracePeriod time.Duration
	// StartTimeout bounds Start. Default DefaultStartTimeout.
	StartTimeout time.Duration
	// Address is where the API server listens and what it advertises; the kubeconfig names
	// it. Empty: 127.0.0.1, with no endpoint for the kubernetes Service (the process nodes
	// reach the API server directly). Another address (the real-node lane's bridge) gets the
	// Service's endpoint, so pods reach the API server through it as in any cluster.
	Address string
	// Progress, if set, is called with a short message as each component becomes ready.
	Progress func(msg string)
}

// ControlPlane is a running control plane. Stop it when done, also after a failed test.
type ControlPlane struct {
	// Kubeconfig is the path of the admin kubeconfig (user in group system:masters).
	Kubeconfig string
	// RESTConfig connects to the API server as that admin.
	RESTConfig *rest.Config
	// Dir is Config.Dir.
	Dir string

	procs  []*Process // in start order
	failed chan error // receives the first unexpected exit of a component

	mu       sync.Mutex // guards procs against RestartAPIServer
	apiURL   string
	apiToken string
}

// Start starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler, in that order,
// each waited for before the next, and returns when the API server is ready and the
// controller-manager has created the default ServiceAccount (so pods can be created). On
// error, every process it started is stopped again.
func Start(ctx context.Context, cfg Config) (cp *ControlPlane, err error) {
	if cfg.Dir == "" || cfg.KubeBinDir == "" || cfg.EtcdBinDir == "" {
		return nil, errors.New("controlplane: Dir, KubeBinDir and EtcdBinDir are required")
	}
	if cfg.ServiceClusterIPRange == "" {
		cfg.ServiceClusterIPRange = DefaultServiceClusterIPRange
	}
	if cfg.NodeMonitorGracePeriod == 0 {
		cfg.NodeMonitorGracePeriod = DefaultNodeMonitorGracePeriod
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve %s: %w", cfg.Dir, err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()

	cp = &ControlPlane{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), failed: make(chan error, 1)}
	defer func() {
		if err != nil {
			cp.Stop()
			cp = nil
		}
	}()
	own := filepath.Join(dir, "controlplane")
	logs := filepath.Join(dir, "logs")
	certDir := filepath.Join(own, "certs")
	for _, d := range []string{own, logs, certDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return cp, fmt.Errorf("failed to create %s: %w", d, err)
		}
	}

	etcdData := filepath.Join(own, "etcd")
	if err := os.RemoveAll(etcdData); err != nil {
		return cp, fmt.Errorf("failed to delete the store of an earlier run: %w", err)
	}
	ports, err := FreePorts(3)
	if err != nil {
		return cp, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]

	// etcd. fsync is off: this store lives as long as the local cluster, and fsync is what a
	// small machine waits on most.
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	etcd, err := cp.start("etcd", filepath.Join(cfg.EtcdBinDir, "etcd"), []string{
		"--name=controlplane",
		"--data-dir=" + etcdData,
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=controlplane=" + peerURL,
		"--unsafe-no-fsync",
		"--log-level=warn",
	}, logs)
	if err != nil {
		return cp, err
	}
	if err := waitHTTP(ctx, etcd, etcdURL+"/health", nil); err != nil {
		return cp, err
	}
	cfg.Progress("etcd ready")

	// Credentials: an admin token, and the service-account signing key pair.
	token, err := randomHex(24)
	if err != nil {
		return cp, err
	}
	tokenFile := filepath.Join(own, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return cp, fmt.Errorf("failed to write the token file: %w", err)
	}
	saKey, saPub := filepath.Join(own, "sa.key"), filepath.Join(own, "sa.pub")
	if err := writeKeyPair(saKey, saPub); err != nil {
		return cp, err
	}

	address, reconciler := cfg.Address, "lease"
	if address == "" {
		// The endpoint reconciler refuses a loopback address; nothing on the process nodes
		// reaches the API server through the kubernetes Service anyway.
		address, reconciler = "127.0.0.1", "none"
	}
	apiURL := fmt.Sprintf("https://%s:%d", address, apiPort)
	api, err := cp.start("kube-apiserver", filepath.Join(cfg.KubeBinDir, "kube-apiserver"), []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + address,
		"--advertise-address=" + address,
		"--endpoint-reconciler-type=" + reconciler,
		// Nodes register their names, which only the cluster's DNS could resolve: logs, exec
		// and port-forward go to their addresses.
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + certDir,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=Node,RBAC",
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + cfg.ServiceClusterIPRange,
		"--allow-privileged=true",
		"--profiling=false",
	}, logs)
	if err != nil {
		return cp, err
	}
	// The serving certificate does not exist before the API server generates it, so readiness
	// is checked without verification; the kubeconfig then pins the generated certificate.
	if err := waitHTTP(ctx, api, apiURL+"/readyz", http.Header{"Authorization": {"Bearer " + token}}); err != nil {
		return cp, err
	}
	// apiserver.crt holds the serving certificate and the CA that signed it; clients and the
	// controller-manager's root CA (published to every namespace) need the CA alone.
	caFile := filepath.Join(own, "ca.crt")
	ca, err := extractCA(filepath.Join(certDir, "apiserver.crt"), caFile)
	if err != nil {
		return cp, err
	}
	cp.RESTConfig = &rest.Config{
		Host:            apiURL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		QPS:             50,
		Burst:           100,
	}
	if err := writeKubeconfig(cp.Kubeconfig, apiURL, ca, token); err != nil {
		return cp, err
	}
	cp.apiURL, cp.apiToken = apiURL, token
	cfg.Progress("kube-apiserver ready")

	// The controller-manager and the scheduler serve nothing (secure port 0): nobody scrapes
	// them here, and it saves two ports and their certificates.
	kcm, err := cp.start("kube-controller-manager", filepath.Join(cfg.KubeBinDir, "kube-controller-manager"), []string{
		"--kubeconfig=" + cp.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--service-account-private-key-file=" + saKey,
		"--root-ca-file=" + caFile,
		"--use-service-account-credentials=true",
		"--controllers=*",
		"--leader-elect=false",
		"--cluster-name=" + clusterName,
		"--service-cluster-ip-range=" + cfg.ServiceClusterIPRange,
		"--node-monitor-grace-period=" + cfg.NodeMonitorGracePeriod.String(),
		"--node-monitor-period=2s",
		"--profiling=false",
		// Each controller has its own service account (and token request): the default
		// client rate limit (20/s) makes start-up wait on the throttle.
		"--kube-api-qps=200",
		"--kube-api-burst=400",
	}, logs)
	if err != nil {
		return cp, err
	}
	if _, err := cp.start("kube-scheduler", filepath.Join(cfg.KubeBinDir, "kube-scheduler"), []string{
		"--kubeconfig=" + cp.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--leader-elect=false",
		"--profiling=false",
	}, logs); err != nil {
		return cp, err
	}

	// The controller-manager's service-account controller creates each namespace's default
	// ServiceAccount; pods cannot be admitted in a namespace before it exists.
	client, err := kubernetes.NewForConfig(cp.RESTConfig)
	if err != nil {
		return cp, fmt.Errorf("failed to create a client: %w", err)
	}
	if err := poll(ctx, kcm, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, nil
	}); err != nil {
		return cp, fmt.Errorf("failed waiting for the default ServiceAccount: %w", err)
	}
	cfg.Progress("kube-controller-manager and kube-scheduler started")

	for _, p := range cp.procs {
		go cp.watch(p)
	}
	return cp, nil
}

// Failed receives an error when a component exits while the control plane is not being
// stopped; the control plane is then broken and should be stopped.
func (cp *ControlPlane) Failed() <-chan error { return cp.failed }

// Stop stops the components in reverse start order: SIGTERM, then SIGKILL after a grace
// period. It returns when every process has exited, and may be called more than once.
func (cp *ControlPlane) Stop() {
	procs := cp.Processes()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop(stopGrace)
	}
}

// Processes returns the running components in start order.
func (cp *ControlPlane) Processes() []*Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.procs)
}

// RestartAPIServer stops kube-apiserver (SIGTERM, as a rolling restart of a real control
// plane does) and starts it again with the same flags, its log appended to, and returns once
// it is ready again: a fault for the operator and every client of the API server (watches
// break, requests fail for a few seconds). The store (etcd) and the other components keep
// running.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	i := slices.IndexFunc(cp.procs, func(p *Process) bool { return p.Name == "kube-apiserver" })
	if i < 0 || cp.apiURL == "" {
		return errors.New("controlplane: no kube-apiserver to restart")
	}
	old := cp.procs[i]
	old.Stop(stopGrace)
	p, err := StartProcess(old.Name, old.cmd.Path, old.cmd.Args[1:], nil, old.LogPath, false)
	if err != nil {
		return err
	}
	cp.procs[i] = p
	go cp.watch(p)
	ctx, cancel := context.WithTimeout(ctx, DefaultStartTimeout)
	defer cancel()
	return waitHTTP(ctx, p, cp.apiURL+"/readyz", http.Header{"Authorization": {"Bearer " + cp.apiToken}})
}

func (cp *ControlPlane) start(name, bin string, args []string, logs string) (*Process, error) {
	p, err := StartProcess(name, bin, args, nil, filepath.Join(logs, name+".log"), true)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	return p, nil
}

func (cp *ControlPlane) watch(p *Process) {
	<-p.Done()
	if p.Stopping() {
		return
	}
	select {
	case cp.failed <- p.ExitError():
	default:
	}
}

// waitHTTP polls url until it answers 200, p exits, or ctx ends.
func waitHTTP(ctx context.Context, p *Process, url string, header http.Header) error {
	hc := &http.Client{
		Timeout: 2 * time.Second,
		// Loopback only, and the certificate may not exist yet; see Start.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	err := poll(ctx, p, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("failed waiting for %s to be ready: %w", p.Name, err)
	}
	return nil
}

// poll calls cond every 200ms until it returns true or an error, p exits, or ctx ends.
func poll(ctx context.Context, p *Process, cond func(context.Context) (bool, error)) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := cond(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-p.Done():
			return p.ExitError()
		case <-ctx.Done():
			return fmt.Errorf("%w; last lines of %s:\n%s", ctx.Err(), p.LogPath, TailFile(p.LogPath, 15))
		case <-t.C:
		}
	}
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("failed to generate a token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// writeKeyPair writes a new RSA private key (PKCS#1) and its public key (PKIX), the
// service-account token signing pair.
func writeKeyPair(keyPath, pubPath string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("failed to generate the service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("failed to encode the service-account public key: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return fmt.Errorf("failed to write the service-account key: %w", err)
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return fmt.Errorf("failed to write the service-account public key: %w", err)
	}
	return nil
}

// extractCA writes the CA certificates of the PEM bundle at bundlePath to caPath and returns
// them.
func extractCA(bundlePath, caPath string) ([]byte, error) {
	data, err := os.ReadFile(bundlePath)
	if err != nil {
		return nil, fmt.Errorf("failed to read the API server's certificate: %w", err)
	}
	var ca []byte
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("failed to parse the API server's certificate: %w", err)
		}
		if cert.IsCA {
			ca = append(ca, pem.EncodeToMemory(block)...)
		}
	}
	if len(ca) == 0 {
		return nil, fmt.Errorf("no CA certificate in %s", bundlePath)
	}
	if err := os.WriteFile(caPath, ca, 0o644); err != nil {
		return nil, fmt.Errorf("failed to write the CA certificate: %w", err)
	}
	return ca, nil
}

func writeKubeconfig(path, server string, ca []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[clusterName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: "admin", Namespace: metav1.NamespaceDefault}
	cfg.CurrentContext = clusterName
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("failed to write the kubeconfig: %w", err)
	}
	return nil
}
