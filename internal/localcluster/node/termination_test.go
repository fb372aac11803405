package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTerminationMessage(t *testing.T) {
	const (
		file     = corev1.TerminationMessageReadFile
		fallback = corev1.TerminationMessageFallbackToLogsOnError
	)
	var (
		numbered   strings.Builder // 100 lines: "line 1" … "line 100"
		longLines  = strings.Repeat(strings.Repeat("x", 99)+"\n", 30)
		bigFile    = strings.Repeat("a", 100) + strings.Repeat("b", maxTerminationMessageBytes)
		errDenied  = &os.PathError{Op: "open", Path: "/node/pods/x/containers/c/termination-log-1", Err: os.ErrPermission}
		errMissing = &os.PathError{Op: "open", Path: "/node/pods/x/containers/c/termination-log-1", Err: os.ErrNotExist}
	)
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&numbered, "line %d\n", i)
	}
	last80 := numbered.String()[strings.Index(numbered.String(), "line 21\n"):]
	tests := []struct {
		name    string
		policy  corev1.TerminationMessagePolicy
		code    int32
		file    string
		fileErr error
		log     string
		logErr  error
		want    string
		readLog bool // whether the log may be read
	}{
		{name: "file", policy: file, file: "result: 42", want: "result: 42"},
		{name: "file of a failed run", policy: file, code: 1, file: "quorum lost\n", want: "quorum lost\n"},
		{name: "the end of a long file", policy: file, file: bigFile, want: strings.Repeat("b", maxTerminationMessageBytes)},
		{name: "empty file", policy: file, code: 1, log: "boom\n", want: ""},
		{name: "missing file", policy: file, code: 1, fileErr: errMissing, log: "boom\n", want: ""},
		{name: "unreadable file", policy: fallback, code: 1, fileErr: errDenied, log: "boom\n", want: "Error on reading termination log: " + errDenied.Error()},
		{name: "file wins over the log", policy: fallback, code: 2, file: "written", log: "logged\n", want: "written"},
		{name: "no fallback after success", policy: fallback, code: 0, log: "logged\n", want: ""},
		{name: "fallback", policy: fallback, code: 3, log: "one\ntwo\n", want: "one\ntwo\n", readLog: true},
		{name: "fallback for a missing file", policy: fallback, code: 137, fileErr: errMissing, log: "killed\n", want: "killed\n", readLog: true},
		{name: "fallback without a final newline", policy: fallback, code: 1, log: "one\ntwo", want: "one\ntwo", readLog: true},
		{name: "fallback to an empty log", policy: fallback, code: 1, want: "", readLog: true},
		{name: "last 80 lines", policy: fallback, code: 1, log: numbered.String(), want: last80, readLog: true},
		{name: "last 2048 bytes", policy: fallback, code: 1, log: longLines, want: longLines[len(longLines)-maxTerminationLogBytes:], readLog: true},
		{name: "unreadable log", policy: fallback, code: 1, logErr: errDenied, want: "Error on reading termination message from logs: " + errDenied.Error(), readLog: true},
		{name: "not UTF-8", policy: file, file: "caf\xc3\xa9 \xff\xfe!", want: "café \uFFFD\uFFFD!"},
		{name: "a character cut by the tail", policy: file, file: "\xc3\xa9" + strings.Repeat("é", maxTerminationMessageBytes/2-1) + "z", want: "\uFFFD" + strings.Repeat("é", maxTerminationMessageBytes/2-1) + "z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			read := false
			got := terminationMessage(tt.policy, tt.code, []byte(tt.file), tt.fileErr, func() ([]byte, error) {
				read = true
				return []byte(tt.log), tt.logErr
			})
			if got != tt.want {
				t.Errorf("message = %q (%d bytes), want %q (%d bytes)", got, len(got), tt.want, len(tt.want))
			}
			if read != tt.readLog {
				t.Errorf("log read = %v, want %v", read, tt.readLog)
			}
		})
	}
}

func TestLastLines(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 2, ""},
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\n", 5, "a\nb\n"},
		{"\n\n\n", 2, "\n\n"},
		{"a\n", 1, "a\n"},
	} {
		if got := string(lastLines([]byte(tt.in), tt.n)); got != tt.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

func TestReadTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("earlier run\nthis run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		from, limit int64
		want        string
	}{
		{0, 100, "earlier run\nthis run\n"},
		{0, 4, "run\n"},
		{12, 100, "this run\n"},
		{12, 4, "run\n"},
		{21, 100, ""},
	} {
		got, err := readTail(path, tt.from, tt.limit)
		if err != nil || string(got) != tt.want {
			t.Errorf("readTail(from %d, limit %d) = %q, %v; want %q", tt.from, tt.limit, got, err, tt.want)
		}
	}
	if _, err := readTail(filepath.Join(t.TempDir(), "missing"), 0, 10); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("readTail of a missing file: %v, want ErrNotExist", err)
	}
}

// TestDesiredStatusSharesTheMessageBudget checks the kubelet's 12 KiB budget of termination
// messages per pod, shared evenly by its containers, cut at a character boundary.
func TestDesiredStatusSharesTheMessageBudget(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		RestartPolicy:  corev1.RestartPolicyNever,
		InitContainers: []corev1.Container{{Name: "i"}},
		Containers:     []corev1.Container{{Name: "a"}, {Name: "b"}, {Name: "c"}},
	}}
	share := maxPodTerminationMessageBytes / 4
	long := "x" + strings.Repeat("é", maxTerminationMessageBytes/2-1) // 4095 bytes; é at share-1
	withMessage := func(name, msg string) corev1.ContainerStatus {
		s := exited(name, 0)
		s.State.Terminated.Message = msg
		return s
	}
	restarted := withMessage("c", "short")
	restarted.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Message: long}
	v := podView{
		sandboxReady: true, initialized: true,
		initStatuses: []corev1.ContainerStatus{withMessage("i", long)},
		statuses:     []corev1.ContainerStatus{withMessage("a", long), withMessage("b", "short"), restarted},
	}
	s := desiredStatus(pod, v, metav1.Now())
	wantLong := long[:share-1] // the é that crosses the share is left out whole
	for _, got := range []string{
		s.InitContainerStatuses[0].State.Terminated.Message,
		s.ContainerStatuses[0].State.Terminated.Message,
		s.ContainerStatuses[2].LastTerminationState.Terminated.Message,
	} {
		if got != wantLong {
			t.Errorf("message of %d bytes, want the first %d", len(got), len(wantLong))
		}
	}
	if got := s.ContainerStatuses[1].State.Terminated.Message; got != "short" {
		t.Errorf("short message = %q", got)
	}
	if v.statuses[0].State.Terminated.Message != long {
		t.Error("desiredStatus changed the view's status")
	}
}

// TestTerminationMessages runs containers that report through their termination-log file (or
// their log) and checks the messages in their statuses, and that each run's file is fresh,
// empty and writable.
func TestTerminationMessages(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	n := startNode(t, ns)
	const fallback = corev1.TerminationMessageFallbackToLogsOnError
	emptyDir := []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	dataMount := []corev1.VolumeMount{{Name: "data", MountPath: "/srv/data"}}
	// fresh fails the run unless its termination-log file is empty and writable.
	const fresh = `[ -s /dev/termination-log ] && exit 9; [ -w /dev/termination-log ] || exit 8; `
	tests := []struct {
		name     string
		policy   corev1.RestartPolicy
		msg      corev1.TerminationMessagePolicy
		path     string // terminationMessagePath, default /dev/termination-log
		script   string
		phase    corev1.PodPhase
		code     int32
		want     string
		restarts int32
		wantLast string // the message of the last termination, when restarts > 0
	}{
		{name: "succeeded", policy: corev1.RestartPolicyNever, script: fresh + "echo to the log; printf 'result: 42' > /dev/termination-log",
			phase: corev1.PodSucceeded, want: "result: 42"},
		{name: "failed", policy: corev1.RestartPolicyNever, msg: fallback, script: fresh + "echo not this; printf 'failed: quorum lost' > /dev/termination-log; exit 3",
			phase: corev1.PodFailed, code: 3, want: "failed: quorum lost"},
		{name: "from-the-log", policy: corev1.RestartPolicyNever, msg: fallback, script: fresh + "echo one; echo two >&2; exit 4",
			phase: corev1.PodFailed, code: 4, want: "one\ntwo\n"},
		{name: "not-from-the-log", policy: corev1.RestartPolicyNever, script: fresh + "echo one; exit 5",
			phase: corev1.PodFailed, code: 5, want: ""},
		{name: "in-a-volume", policy: corev1.RestartPolicyNever, path: "/srv/data/result", script: "printf kept > /srv/data/result",
			phase: corev1.PodSucceeded, want: "kept"},
		// Three runs: the first writes its file and fails, the second fails with a fresh empty
		// file (its message comes from its own part of the log), the third succeeds.
		{name: "restarted", policy: corev1.RestartPolicyOnFailure, msg: fallback, script: fresh + `n=$(( $(cat /srv/data/n 2>/dev/null || echo 0) + 1 )); echo $n > /srv/data/n; echo "run $n"
case $n in 1) printf first > /dev/termination-log; exit 1;; 2) exit 2;; esac
printf third > /dev/termination-log`,
			phase: corev1.PodSucceeded, want: "third", restarts: 2, wantLast: "run 2\n"},
	}
	for _, tt := range tests {
		pod := shellPod(ns, tt.name, ns, tt.script)
		pod.Spec.RestartPolicy = tt.policy
		pod.Spec.Volumes = emptyDir
		c := &pod.Spec.Containers[0]
		c.VolumeMounts = dataMount
		c.TerminationMessagePolicy = tt.msg
		c.TerminationMessagePath = tt.path
		createPod(t, pod)
	}
	for _, tt := range tests {
		p := waitPod(t, ns, tt.name, 30*time.Second, func(p *corev1.Pod) (bool, string) {
			return p.Status.Phase == tt.phase, "want phase " + string(tt.phase)
		})
		s := p.Status.ContainerStatuses[0]
		if term := s.State.Terminated; term == nil || term.ExitCode != tt.code || term.Message != tt.want {
			t.Errorf("%s: state = %+v, want exit %d with message %q", tt.name, s.State.Terminated, tt.code, tt.want)
		}
		if s.RestartCount != tt.restarts {
			t.Errorf("%s: %d restarts, want %d", tt.name, s.RestartCount, tt.restarts)
		}
		if last := s.LastTerminationState.Terminated; tt.restarts > 0 && (last == nil || last.Message != tt.wantLast) {
			t.Errorf("%s: last termination = %+v, want message %q", tt.name, last, tt.wantLast)
		}
		if tt.name == "succeeded" {
			// The run's file is on the node, under the pod's folder.
			files, err := filepath.Glob(filepath.Join(n.dir, "pods", string(p.UID), "containers", "main", "termination-log-*"))
			if err != nil || len(files) != 1 {
				t.Fatalf("termination-log files %v, %v; want one", files, err)
			}
			if b, err := os.ReadFile(files[0]); err != nil || string(b) != tt.want {
				t.Errorf("termination-log file holds %q, %v", b, err)
			}
		}
	}
	// The containers wrote into their own files, not into the mount point on the machine.
	if fi, err := os.Stat("/dev/termination-log"); err != nil || fi.Size() != 0 {
		t.Errorf("the machine's /dev/termination-log: %v (err %v), want an empty file", fi, err)
	}
}
