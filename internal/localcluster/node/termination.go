package node

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet's limits on termination messages (kubecontainer.MaxContainerTerminationMessage*
// and MaxPodTerminationMessageLogLength).
const (
	// maxTerminationMessageBytes is how much of the end of a termination-log file is kept.
	maxTerminationMessageBytes = 4 * 1024
	// maxTerminationLogLines and maxTerminationLogBytes bound a message taken from the log.
	maxTerminationLogLines = 80
	maxTerminationLogBytes = 2 * 1024
	// maxPodTerminationMessageBytes is shared evenly by the containers of a pod.
	maxPodTerminationMessageBytes = 12 * 1024
)

// terminationLogTarget is where a container's termination-log file appears in its view, ""
// when the container has no terminationMessagePath. A relative path counts from /, as the
// kubelet makes it absolute on Linux.
func terminationLogTarget(c *corev1.Container) string {
	if c.TerminationMessagePath == "" {
		return ""
	}
	return filepath.Clean("/" + c.TerminationMessagePath)
}

// newTerminationLog creates a fresh, empty termination-log file for one run of container
// under podDir (containers/<name>/, a random name per run, as the kubelet does) that any user
// may write, and returns its path.
func newTerminationLog(podDir, container string) (string, error) {
	dir := filepath.Join(podDir, "containers", container)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("failed to create folder %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "termination-log-")
	if err != nil {
		return "", fmt.Errorf("failed to create a termination-log file in %s: %w", dir, err)
	}
	path := f.Name()
	f.Close()
	// CreateTemp makes the file 0600; the kubelet's is 0666 whatever the umask.
	if err := os.Chmod(path, 0o666); err != nil {
		return "", fmt.Errorf("failed to set the mode of termination-log file %s: %w", path, err)
	}
	return path, nil
}

// readTail reads at most limit bytes from the end of the file at path, none of them before
// offset from (the file's start when from is 0).
func readTail(path string, from, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	start := max(fi.Size()-limit, from, 0)
	if start >= fi.Size() {
		return nil, nil
	}
	return io.ReadAll(io.NewSectionReader(f, start, fi.Size()-start))
}

// lastLines is the end of b holding its last n lines; a final newline ends the last line
// rather than starting another.
func lastLines(b []byte, n int) []byte {
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if b[i] != '\n' {
			continue
		}
		if n--; n == 0 {
			return b[i+1:]
		}
	}
	return b
}

// lastBytes is the last n bytes of b.
func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// terminationMessage is the message the kubelet reports for a container run that exited with
// code under policy: the last maxTerminationMessageBytes of the file the run wrote at its
// terminationMessagePath (file as read, fileErr the error reading it, a missing file being
// an empty one); or, under FallbackToLogsOnError when the file is empty and the run failed,
// the last maxTerminationLogLines lines, at most maxTerminationLogBytes, of what the run wrote
// to its log (which runLog reads, at least its last maxTerminationLogBytes; it is only called
// then). Bytes that are not UTF-8 are replaced (see validUTF8).
func terminationMessage(policy corev1.TerminationMessagePolicy, code int32, file []byte, fileErr error, runLog func() ([]byte, error)) string {
	fallback := policy == corev1.TerminationMessageFallbackToLogsOnError && code != 0
	switch {
	case fileErr != nil && !errors.Is(fileErr, os.ErrNotExist):
		return fmt.Sprintf("Error on reading termination log: %v", fileErr)
	case fileErr == nil && len(file) > 0:
		return validUTF8(lastBytes(file, maxTerminationMessageBytes))
	case !fallback:
		return ""
	}
	log, err := runLog()
	if err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	return validUTF8(lastBytes(lastLines(log, maxTerminationLogLines), maxTerminationLogBytes))
}

// validUTF8 replaces each byte of b that is not part of a UTF-8 sequence with U+FFFD, as the
// API server's JSON does: the status the node compares with the one it reads back must hold
// the same string, or the node would patch it on every sync. A cut through a character (the
// tail of a file) or a binary file shows as replacement characters.
func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return string([]rune(string(b)))
}

// limitTerminationMessages cuts the termination messages in statuses (the current and last
// states of every container of a pod with containers containers) to an even share of
// maxPodTerminationMessageBytes, as the kubelet's status manager does, at a character
// boundary. It copies each terminated state it changes.
func limitTerminationMessages(statuses []corev1.ContainerStatus, containers int) {
	limit := maxPodTerminationMessageBytes
	if containers > 0 {
		limit /= containers
	}
	cut := func(t **corev1.ContainerStateTerminated) {
		if *t == nil || len((*t).Message) <= limit {
			return
		}
		c := **t
		n := limit
		for n > 0 && !utf8.RuneStart(c.Message[n]) {
			n--
		}
		c.Message = strings.Clone(c.Message[:n])
		*t = &c
	}
	for i := range statuses {
		cut(&statuses[i].State.Terminated)
		cut(&statuses[i].LastTerminationState.Terminated)
	}
}

// readTerminationMessage reads what a finished run of c (process p, exit code) left for its
// termination message: its termination-log file and, when needed, its part of the log.
func readTerminationMessage(c *corev1.Container, p *process, code int32) string {
	var file []byte
	var err error = os.ErrNotExist
	if p.termLog != "" {
		file, err = readTail(p.termLog, 0, maxTerminationMessageBytes)
	}
	return terminationMessage(c.TerminationMessagePolicy, code, file, err, func() ([]byte, error) {
		return readTail(p.logPath, p.logStart, maxTerminationLogBytes)
	})
}

// dropFile removes a file of the node's that is no longer needed, if it exists.
func dropFile(path string) error {
	if path == "" {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
