package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestCrashingContainerBacksOff(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startNode(t, ns)
	createPod(t, shellPod(ns, "crasher", ns, "echo crashing; exit 3"))

	sawBackoff := false
	p := waitPod(t, ns, "crasher", 30*time.Second, func(p *corev1.Pod) (bool, string) {
		if len(p.Status.ContainerStatuses) == 0 {
			return false, "no container status"
		}
		s := p.Status.ContainerStatuses[0]
		if w := s.State.Waiting; w != nil && w.Reason == reasonCrashLoopBackOff {
			sawBackoff = true
			if last := s.LastTerminationState.Terminated; last == nil || last.ExitCode != 3 {
				t.Errorf("backing off with last termination %+v, want exit 3", last)
			}
			if s.Ready || podCondition(p, corev1.PodReady) {
				t.Error("pod backing off is Ready")
			}
		}
		return sawBackoff && s.RestartCount >= 3, "want CrashLoopBackOff seen and 3 restarts"
	})
	if p.Status.Phase != corev1.PodRunning {
		t.Errorf("phase = %s, want Running (restarting under Always)", p.Status.Phase)
	}
}

func TestRestartPolicies(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	n := startNode(t, ns)
	tests := []struct {
		name   string
		policy corev1.RestartPolicy
		script string
		phase  corev1.PodPhase
		code   int32
	}{
		{"onfailure-success", corev1.RestartPolicyOnFailure, "exit 0", corev1.PodSucceeded, 0},
		{"never-failure", corev1.RestartPolicyNever, "exit 4", corev1.PodFailed, 4},
		{"onfailure-retries", corev1.RestartPolicyOnFailure, "if [ -f /srv/data/again ]; then exit 0; fi; touch /srv/data/again; exit 1", corev1.PodSucceeded, 0},
	}
	for _, tt := range tests {
		pod := shellPod(ns, tt.name, ns, tt.script)
		pod.Spec.RestartPolicy = tt.policy
		pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/srv/data"}}
		createPod(t, pod)
	}
	for _, tt := range tests {
		p := waitPod(t, ns, tt.name, 30*time.Second, func(p *corev1.Pod) (bool, string) {
			return p.Status.Phase == tt.phase, "want phase " + string(tt.phase)
		})
		s := p.Status.ContainerStatuses[0]
		if s.State.Terminated == nil || s.State.Terminated.ExitCode != tt.code {
			t.Errorf("%s: state = %+v, want terminated with %d", tt.name, s.State, tt.code)
		}
		if c, _ := findCondition(p.Status.Conditions, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != "PodCompleted" {
			t.Errorf("%s: Ready = %+v, want False PodCompleted", tt.name, c)
		}
	}
	// The retrying pod ran twice; the others once.
	if s := waitPod(t, ns, "onfailure-retries", time.Second, isTerminal).Status.ContainerStatuses[0]; s.RestartCount != 1 {
		t.Errorf("onfailure-retries restarted %d times, want 1", s.RestartCount)
	}
	if n.KillPod(ns, "never-failure") == nil {
		t.Error("KillPod of a finished pod succeeded")
	}
}

func isTerminal(p *corev1.Pod) (bool, string) {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, "want a terminal phase"
}

// TestExecProbes runs exec probes in the container's view: readiness waits for a file the
// container writes into its emptyDir, and liveness fails (and restarts the container) when
// the test removes the file it checks.
func TestExecProbes(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	n := startNode(t, ns)
	pod := shellPod(ns, "probed", ns, "touch /srv/data/live; sleep 0.3; touch /srv/data/ready; exec sleep 3600")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(1))
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/srv/data"}}
	c.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{shell, "-c", "test -f /srv/data/ready"}}},
		PeriodSeconds: 1, FailureThreshold: 1, TimeoutSeconds: 5,
	}
	c.LivenessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{shell, "-c", "test -f /srv/data/live"}}},
		PeriodSeconds: 1, FailureThreshold: 2, TimeoutSeconds: 5,
	}
	created := createPod(t, pod)

	p := waitPod(t, ns, "probed", 30*time.Second, isReady)
	if s := p.Status.ContainerStatuses[0]; !s.Ready || !ptr.Deref(s.Started, false) || s.RestartCount != 0 {
		t.Fatalf("container status = %+v, want ready, started, no restart", s)
	}

	// Break liveness from the host side of the emptyDir.
	live := filepath.Join(n.dir, "pods", string(created.UID), "volumes", "data", "live")
	if err := os.Remove(live); err != nil {
		t.Fatal(err)
	}
	p = waitPod(t, ns, "probed", 30*time.Second, func(p *corev1.Pod) (bool, string) {
		s := p.Status.ContainerStatuses[0]
		return s.RestartCount == 1 && s.Ready, "want ready again after one restart"
	})
	if last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 128+15 {
		t.Errorf("last termination = %+v, want exit 143 (SIGTERM of the liveness kill)", last)
	}
}

// TestEnvVolumesAndInitContainers checks the container's environment ($(VAR) expansion,
// downward API, configMap and secret refs), args expansion, working dir, ConfigMap and Secret
// volumes, and an init container handing a file to the main one through an emptyDir.
func TestEnvVolumesAndInitContainers(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	n := startNode(t, ns, func(c *Config) { c.APIServer = "127.0.0.1:6443" })
	ctx := context.Background()
	if _, err := clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data:       map[string]string{"a": "alpha", "b": "beta"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := clientset.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sec"},
		Data:       map[string][]byte{"token": []byte("s3cret")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := clientset.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "runner"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	script := `echo "name=$POD_NAME ns=$POD_NAMESPACE ip=$POD_IP node=$NODE uid=$POD_UID"
echo "greeting=$GREETING"
echo "from=$FROM_CM/$FROM_SECRET"
echo "arg=$1"
echo "api=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"
echo "pwd=$(pwd)"
echo "cfg=$(cat /etc/cfg/renamed) files=$(ls /etc/cfg | tr '\n' ' ')"
echo "secret=$(cat /etc/sec/token)"
echo "init=$(cat /srv/data/init.txt)"
echo "projected=$(ls /var/run/secrets/api | tr '\n' ' ')ns=$(cat /var/run/secrets/api/namespace) b=$(cat /var/run/secrets/api/b) token=$([ -s /var/run/secrets/api/token ] && echo yes)"`
	pod := shellPod(ns, "envy", ns, script)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
			Items:                []corev1.KeyToPath{{Key: "a", Path: "renamed"}},
		}}},
		{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec"}}},
		{Name: "api", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(3600))}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: []corev1.KeyToPath{{Key: "b", Path: "b"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		}}}},
	}
	pod.Spec.ServiceAccountName = "runner"
	pod.Spec.AutomountServiceAccountToken = ptr.To(false)
	pod.Spec.InitContainers = []corev1.Container{{
		Name:         "init",
		Image:        busyboxImage,
		Command:      []string{shell, "-c", "echo from-init-$(POD_NAME) > /srv/data/init.txt"},
		Env:          []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/srv/data"}},
	}}
	c := &pod.Spec.Containers[0]
	c.Command = append(c.Command, "argv0", "$(POD_NAME)-x")
	c.WorkingDir = "/srv/data"
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	c.Env = []corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: field("metadata.name")},
		{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
		{Name: "POD_IP", ValueFrom: field("status.podIP")},
		{Name: "NODE", ValueFrom: field("spec.nodeName")},
		{Name: "POD_UID", ValueFrom: field("metadata.uid")},
		{Name: "GREETING", Value: "hello $(POD_NAME) $$(POD_NAME) $(LATER) $(NOPE)"},
		{Name: "LATER", Value: "later"},
		{Name: "FROM_CM", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "b"}}},
		{Name: "FROM_SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "token"}}},
	}
	c.VolumeMounts = []corev1.VolumeMount{
		{Name: "data", MountPath: "/srv/data"},
		{Name: "cfg", MountPath: "/etc/cfg"},
		{Name: "sec", MountPath: "/etc/sec"},
		{Name: "api", MountPath: "/var/run/secrets/api"},
	}
	created := createPod(t, pod)

	p := waitPod(t, ns, "envy", 30*time.Second, func(p *corev1.Pod) (bool, string) {
		return p.Status.Phase == corev1.PodSucceeded, "want Succeeded"
	})
	if !podCondition(p, corev1.PodInitialized) {
		t.Error("Initialized is not True")
	}
	if s := p.Status.InitContainerStatuses; len(s) != 1 || s[0].State.Terminated == nil || s[0].State.Terminated.ExitCode != 0 {
		t.Errorf("init container statuses = %+v", s)
	}
	want := strings.Join([]string{
		fmt.Sprintf("name=envy ns=%s ip=%s node=%s uid=%s", ns, p.Status.PodIP, ns, created.UID),
		"greeting=hello envy $(POD_NAME) $(LATER) $(NOPE)",
		"from=beta/s3cret",
		"arg=envy-x",
		"api=127.0.0.1:6443",
		"pwd=/srv/data",
		"cfg=alpha files=renamed ",
		"secret=s3cret",
		"init=from-init-envy",
		"projected=b namespace token ns=" + ns + " b=beta token=yes",
	}, "\n") + "\n"
	if got := readLog(n, ns, "envy", "main"); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
	if !strings.HasPrefix(p.Status.PodIP, "127.77.") || p.Status.HostIP != "127.0.0.1" {
		t.Errorf("podIP %s hostIP %s", p.Status.PodIP, p.Status.HostIP)
	}
}

// TestCommandFromAnEmptyDir runs the shape of a wrapper that an init container installs: the
// init container copies a program out of its image into an emptyDir, and the main container
// runs it from there while its own image's /usr/local/bin stays visible (the wrapper execs a
// program of the image). A bind of the image folder at the command's directory would be
// hidden by the emptyDir mounted there.
func TestCommandFromAnEmptyDir(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	root := t.TempDir()
	tool, app := filepath.Join(root, "tool"), filepath.Join(root, "app")
	files := map[string]string{
		filepath.Join(tool, "wrapper"): "#!/bin/sh\necho \"wrapper $0 $*\"\nexec /usr/local/bin/hello \"$@\"\n",
		filepath.Join(app, "hello"):    "#!/bin/sh\necho \"hello $* from the image; /usr/local/bin holds $(ls /usr/local/bin | tr '\\n' ' ')\"\n",
	}
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/bin/sh", filepath.Join(tool, "sh")); err != nil {
		t.Fatal(err)
	}
	const toolImage, appImage = "local/tool:1", "local/app:1"
	n := startNode(t, ns, func(c *Config) {
		c.Images = func(image string) (string, error) {
			switch image {
			case toolImage:
				return tool, nil
			case appImage:
				return app, nil
			}
			return resolveImage(image)
		}
	})
	guard := []corev1.VolumeMount{{Name: "guard", MountPath: "/guard"}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wrapped"},
		Spec: corev1.PodSpec{
			NodeName:                      ns,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			Volumes:                       []corev1.Volume{{Name: "guard", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			InitContainers: []corev1.Container{{
				Name:         "install",
				Image:        toolImage,
				Command:      []string{shell, "-c", "cp /usr/local/bin/wrapper /guard/wrapper"},
				VolumeMounts: guard,
			}},
			Containers: []corev1.Container{{
				Name:         "main",
				Image:        appImage,
				Command:      []string{"/guard/wrapper", "arg"},
				VolumeMounts: guard,
			}},
		},
	}
	createPod(t, pod)
	p := waitPod(t, ns, "wrapped", 30*time.Second, func(p *corev1.Pod) (bool, string) {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, "want Succeeded"
	})
	log := readLog(n, ns, "wrapped", "main")
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("phase %s; containers %s; main's log:\n%s\ninstall's log:\n%s", p.Status.Phase, containersString(p), log, readLog(n, ns, "wrapped", "install"))
	}
	want := "wrapper /guard/wrapper arg\nhello arg from the image; /usr/local/bin holds hello \n"
	if log != want {
		t.Errorf("log:\n%s\nwant:\n%s", log, want)
	}
}

func TestGracefulDeletion(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	n := startNode(t, ns)
	ctx := context.Background()
	loop := "echo started; while :; do sleep 0.1; done"
	polite := shellPod(ns, "polite", ns, "trap 'echo got TERM; exit 0' TERM; "+loop)
	polite.Spec.TerminationGracePeriodSeconds = ptr.To(int64(30))
	polite.Spec.Hostname, polite.Spec.Subdomain = "polite", "peers"
	stubborn := shellPod(ns, "stubborn", ns, "trap '' TERM; "+loop)
	for _, p := range []*corev1.Pod{polite, stubborn} {
		createPod(t, p)
	}
	for _, name := range []string{"polite", "stubborn"} {
		waitPod(t, ns, name, 30*time.Second, isRunning)
		eventually(t, 10*time.Second, func() (bool, string) {
			log := readLog(n, ns, name, "main")
			return strings.HasPrefix(log, "started\n"), fmt.Sprintf("%s log %q", name, log)
		})
	}
	ip := waitPod(t, ns, "polite", time.Second, isRunning).Status.PodIP
	for _, name := range []string{"polite", "polite.peers." + ns + ".svc", "polite.peers." + ns + ".svc.cluster.local"} {
		if got := n.names.resolve(name); got != ip {
			t.Errorf("%s resolves to %q, want the pod IP %s", name, got, ip)
		}
	}

	// The polite pod ends on SIGTERM, well within its 30s.
	start := time.Now()
	if err := clientset.CoreV1().Pods(ns).Delete(ctx, "polite", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, ns, "polite", 10*time.Second)
	if log := readLog(n, ns, "polite", "main"); log != "started\ngot TERM\n" {
		t.Errorf("polite log = %q", log)
	}
	if got := n.names.resolve("polite"); got != "" {
		t.Errorf("names of the deleted pod still resolve to %s", got)
	}
	t.Logf("polite pod gone %s after the delete", time.Since(start))

	// The stubborn one ignores SIGTERM and gets SIGKILL after its 1s grace period.
	start = time.Now()
	if err := clientset.CoreV1().Pods(ns).Delete(ctx, "stubborn", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(1))}); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, ns, "stubborn", 10*time.Second)
	if took := time.Since(start); took < time.Second {
		t.Errorf("stubborn pod gone after %s, before its grace period", took)
	}
}

func TestKillPodRestartsTheContainer(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	n := startNode(t, ns)
	createPod(t, shellPod(ns, "victim", ns, "sleep 3600 & wait"))
	before := waitPod(t, ns, "victim", 30*time.Second, isRunning)
	id := before.Status.ContainerStatuses[0].ContainerID

	if err := n.KillPod(ns, "victim"); err != nil {
		t.Fatal(err)
	}
	after := waitPod(t, ns, "victim", 30*time.Second, func(p *corev1.Pod) (bool, string) {
		s := p.Status.ContainerStatuses[0]
		return s.RestartCount == 1 && s.State.Running != nil, "want running after one restart"
	})
	s := after.Status.ContainerStatuses[0]
	if s.ContainerID == id || processAlive(id) {
		t.Errorf("container %s was not replaced (now %s)", id, s.ContainerID)
	}
	if last := s.LastTerminationState.Terminated; last == nil || last.ExitCode != 137 || last.Reason != reasonError {
		t.Errorf("last termination = %+v, want exit 137 Error", last)
	}
	if err := n.KillPod(ns, "nobody"); err == nil {
		t.Error("KillPod of an unknown pod succeeded")
	}
}

func TestUnknownImage(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startNode(t, ns)
	pod := shellPod(ns, "nope", ns, "exit 0")
	pod.Spec.Containers[0].Image = "example.com/not-here:1"
	createPod(t, pod)
	p := waitPod(t, ns, "nope", 30*time.Second, func(p *corev1.Pod) (bool, string) {
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting == nil {
			return false, "no waiting container"
		}
		return p.Status.ContainerStatuses[0].State.Waiting.Reason == reasonErrImagePull, "want ErrImagePull"
	})
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "example.com/not-here:1") {
		t.Errorf("message %q does not name the image", msg)
	}
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("phase = %s, want Pending", p.Status.Phase)
	}
}

// TestEtcdPod runs etcd as the chart does ($(POD_IP) listeners, data on a provisioned
// PersistentVolume at /var/lib/etcd, TCP startup, HTTP liveness and readiness probes on named
// ports), waits for it to be Ready, kills it and checks that it comes back on its data, and
// deletes the pod keeping the volume.
func TestEtcdPod(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	ctx := context.Background()
	// The chart's probe periods, sped up as the local cluster does.
	n := startNode(t, ns, func(c *Config) { c.MaxProbePeriod = time.Second })
	pvc := createClaim(t, ns, "data-etcd-0", ns)
	pv := waitVolume(t, volumeName(pvc))
	bindClaim(t, pvc, pv)

	const peer, client, metrics = 2380, 2379, 2381
	suffix := "etcd-peer." + ns + ".svc"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "etcd-0"},
		Spec: corev1.PodSpec{
			NodeName:                      ns,
			Hostname:                      "etcd-0",
			Subdomain:                     "etcd-peer",
			TerminationGracePeriodSeconds: ptr.To(int64(10)),
			Containers: []corev1.Container{{
				Name:    "etcd",
				Image:   etcdImage,
				Command: []string{"/usr/local/bin/etcd"},
				Args: []string{
					"--name=$(POD_NAME)",
					"--data-dir=/var/lib/etcd/data",
					fmt.Sprintf("--listen-peer-urls=http://$(POD_IP):%d", peer),
					fmt.Sprintf("--listen-client-urls=http://$(POD_IP):%d", client),
					fmt.Sprintf("--listen-metrics-urls=http://$(POD_IP):%d", metrics),
					fmt.Sprintf("--advertise-client-urls=http://$(POD_NAME).%s:%d", suffix, client),
					fmt.Sprintf("--initial-advertise-peer-urls=http://$(POD_NAME).%s:%d", suffix, peer),
					fmt.Sprintf("--initial-cluster=etcd-0=http://etcd-0.%s:%d", suffix, peer),
					"--initial-cluster-state=new",
					"--initial-cluster-token=" + ns,
				},
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				},
				Ports: []corev1.ContainerPort{
					{Name: "client", ContainerPort: client},
					{Name: "peer", ContainerPort: peer},
					{Name: "metrics", ContainerPort: metrics},
				},
				StartupProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("client")}},
					PeriodSeconds: 5, TimeoutSeconds: 5, FailureThreshold: 60,
				},
				LivenessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromString("metrics")}},
					PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 6,
				},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("metrics")}},
					PeriodSeconds: 5, TimeoutSeconds: 5, FailureThreshold: 3,
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name},
			}}},
		},
	}
	start := time.Now()
	createPod(t, pod)
	p := waitPod(t, ns, "etcd-0", 60*time.Second, isReady)
	t.Logf("etcd pod Ready %s after its creation", time.Since(start))

	ip := p.Status.PodIP
	if !strings.HasPrefix(ip, "127.77.") || len(p.Status.PodIPs) != 1 || p.Status.PodIPs[0].IP != ip {
		t.Errorf("podIP %q podIPs %v", ip, p.Status.PodIPs)
	}
	for _, name := range []string{"etcd-0", "etcd-0." + suffix, "etcd-0." + suffix + ".cluster.local"} {
		if got := n.names.resolve(name); got != ip {
			t.Errorf("%s resolves to %q, want %s", name, got, ip)
		}
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		if !podCondition(p, ct) {
			t.Errorf("condition %s is not True", ct)
		}
	}
	if p.Status.Phase != corev1.PodRunning || p.Status.StartTime == nil {
		t.Errorf("phase %s startTime %v", p.Status.Phase, p.Status.StartTime)
	}
	member := filepath.Join(pv.Spec.HostPath.Path, "data", "member")
	if _, err := os.Stat(member); err != nil {
		t.Fatalf("etcd data is not on the persistent volume: %v", err)
	}

	// Killed, etcd restarts at once on the same data and becomes Ready again.
	if err := n.KillPod(ns, "etcd-0"); err != nil {
		t.Fatal(err)
	}
	waitPod(t, ns, "etcd-0", 60*time.Second, func(p *corev1.Pod) (bool, string) {
		return p.Status.ContainerStatuses[0].RestartCount == 1 && podCondition(p, corev1.PodReady), "want Ready after one restart"
	})
	if log := readLog(n, ns, "etcd-0", "etcd"); !strings.Contains(log, "restarting local member") {
		t.Errorf("the restarted etcd did not start from its data; log tail:\n%s", tail(log, 2000))
	}

	// Deleted, etcd stops gracefully; the volume keeps the data.
	if err := clientset.CoreV1().Pods(ns).Delete(ctx, "etcd-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, ns, "etcd-0", 20*time.Second)
	if _, err := os.Stat(member); err != nil {
		t.Errorf("the volume lost etcd's data with the pod: %v", err)
	}
	if got := n.names.resolve("etcd-0"); got != "" {
		t.Errorf("etcd-0 still resolves to %s", got)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
