package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// volume is a pod volume as the node holds it: a host folder (or file).
type volume struct {
	path     string
	readOnly bool // mounted read-only whatever the volumeMount says
}

// prepareVolumes makes every volume of pod ready on the host and returns them by name:
// emptyDir folders under the pod's folder, PVCs' persistent volume folders, hostPath paths,
// and Secret, ConfigMap, downward API and projected volumes written as files.
func (w *podWorker) prepareVolumes(ctx context.Context, pod *corev1.Pod) (map[string]volume, error) {
	vols := map[string]volume{}
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(w.podDir, "volumes", v.Name)
		var vol volume
		var err error
		switch src := v.VolumeSource; {
		case src.EmptyDir != nil:
			vol, err = volume{path: dir}, mkdirShared(dir)
		case src.HostPath != nil:
			vol, err = hostPathVolume(src.HostPath)
		case src.PersistentVolumeClaim != nil:
			vol, err = w.claimVolume(ctx, pod.Namespace, src.PersistentVolumeClaim)
		case src.Secret != nil:
			vol = volume{path: dir, readOnly: true}
			err = w.writeFiles(dir, func(files map[string]file) error {
				return w.secretFiles(ctx, pod.Namespace, src.Secret.SecretName, src.Secret.Items, src.Secret.Optional, src.Secret.DefaultMode, files)
			})
		case src.ConfigMap != nil:
			vol = volume{path: dir, readOnly: true}
			err = w.writeFiles(dir, func(files map[string]file) error {
				return w.configMapFiles(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, src.ConfigMap.DefaultMode, files)
			})
		case src.DownwardAPI != nil:
			vol = volume{path: dir, readOnly: true}
			err = w.writeFiles(dir, func(files map[string]file) error {
				return downwardFiles(pod, src.DownwardAPI.Items, src.DownwardAPI.DefaultMode, files)
			})
		case src.Projected != nil:
			vol = volume{path: dir, readOnly: true}
			err = w.writeFiles(dir, func(files map[string]file) error {
				return w.projectedFiles(ctx, pod, src.Projected, files)
			})
		default:
			err = errors.New("the process node does not support this volume type")
		}
		if err != nil {
			return nil, fmt.Errorf("failed to prepare volume %q: %w", v.Name, err)
		}
		vols[v.Name] = vol
	}
	return vols, nil
}

// mkdirShared creates an emptyDir-like folder that any user may write, as the kubelet does.
func mkdirShared(dir string) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("failed to create folder %s: %w", dir, err)
	}
	return os.Chmod(dir, 0o777)
}

func hostPathVolume(h *corev1.HostPathVolumeSource) (volume, error) {
	t := corev1.HostPathUnset
	if h.Type != nil {
		t = *h.Type
	}
	switch t {
	case corev1.HostPathDirectoryOrCreate:
		if err := os.MkdirAll(h.Path, 0o755); err != nil {
			return volume{}, fmt.Errorf("failed to create host path %s: %w", h.Path, err)
		}
	case corev1.HostPathFileOrCreate:
		if err := os.MkdirAll(filepath.Dir(h.Path), 0o755); err != nil {
			return volume{}, fmt.Errorf("failed to create the folder of host path %s: %w", h.Path, err)
		}
		f, err := os.OpenFile(h.Path, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return volume{}, fmt.Errorf("failed to create host path %s: %w", h.Path, err)
		}
		f.Close()
	case corev1.HostPathUnset:
	default:
		if _, err := os.Stat(h.Path); err != nil {
			return volume{}, fmt.Errorf("host path %s: %w", h.Path, err)
		}
	}
	return volume{path: h.Path}, nil
}

// claimVolume finds the folder of the persistent volume bound to a claim.
func (w *podWorker) claimVolume(ctx context.Context, namespace string, src *corev1.PersistentVolumeClaimVolumeSource) (volume, error) {
	pvc, err := w.n.cfg.Client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, src.ClaimName, metav1.GetOptions{})
	if err != nil {
		return volume{}, fmt.Errorf("failed to get persistentvolumeclaim %s: %w", src.ClaimName, err)
	}
	if pvc.DeletionTimestamp != nil {
		return volume{}, fmt.Errorf("persistentvolumeclaim %s is being deleted", src.ClaimName)
	}
	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		return volume{}, fmt.Errorf("persistentvolumeclaim %s is not bound yet", src.ClaimName)
	}
	pv, err := w.n.cfg.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return volume{}, fmt.Errorf("failed to get persistentvolume %s: %w", pvc.Spec.VolumeName, err)
	}
	var dir string
	switch {
	case pv.Spec.HostPath != nil:
		dir = pv.Spec.HostPath.Path
	case pv.Spec.Local != nil:
		dir = pv.Spec.Local.Path
	default:
		return volume{}, fmt.Errorf("persistentvolume %s is neither hostPath nor local, which is all the process node can mount", pv.Name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return volume{}, fmt.Errorf("failed to create the folder of persistentvolume %s: %w", pv.Name, err)
	}
	return volume{path: dir, readOnly: src.ReadOnly}, nil
}

// file is a file of a Secret, ConfigMap, downward API or projected volume.
type file struct {
	data []byte
	mode os.FileMode
}

// writeFiles collects files with fill and writes them into dir, replacing what was there.
func (w *podWorker) writeFiles(dir string, fill func(map[string]file) error) error {
	files := map[string]file{}
	if err := fill(files); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("failed to clear folder %s: %w", dir, err)
	}
	if err := writeAtomic(dir, files); err != nil {
		return err
	}
	w.mu.Lock()
	if w.volumeHashes == nil {
		w.volumeHashes = map[string]string{}
	}
	w.volumeHashes[dir] = hashFiles(files)
	w.mu.Unlock()
	return nil
}

// refreshInterval is how often a running pod's Secret and ConfigMap volumes are read again
// (the kubelet does it about every minute; the process node is quicker, so tests of
// certificate renewal do not wait).
const refreshInterval = 2 * time.Second

// refreshVolumes writes the current content of the pod's Secret and ConfigMap volumes into
// their folders when it changed, as the kubelet does for a running pod: the files change
// under the running containers, atomically (a new timestamped folder, then one rename of the
// ..data link). It returns when to look again.
func (w *podWorker) refreshVolumes(ctx context.Context, pod *corev1.Pod) time.Duration {
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(w.podDir, "volumes", v.Name)
		var fill func(map[string]file) error
		switch src := v.VolumeSource; {
		case src.Secret != nil:
			fill = func(files map[string]file) error {
				return w.secretFiles(ctx, pod.Namespace, src.Secret.SecretName, src.Secret.Items, src.Secret.Optional, src.Secret.DefaultMode, files)
			}
		case src.ConfigMap != nil:
			fill = func(files map[string]file) error {
				return w.configMapFiles(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, src.ConfigMap.DefaultMode, files)
			}
		default:
			continue
		}
		files := map[string]file{}
		if err := fill(files); err != nil {
			// A Secret deleted or unreadable for now: the kubelet keeps the last content too.
			continue
		}
		h := hashFiles(files)
		w.mu.Lock()
		same := w.volumeHashes[dir] == h
		w.mu.Unlock()
		if same {
			continue
		}
		if err := writeAtomic(dir, files); err != nil {
			w.log.Error(err, "Failed to refresh a volume", "volume", v.Name)
			continue
		}
		w.mu.Lock()
		w.volumeHashes[dir] = h
		w.mu.Unlock()
		w.log.Info("Refreshed a volume", "volume", v.Name)
	}
	return refreshInterval
}

// writeAtomic writes files into dir the way the kubelet's atomic writer does: into a new
// folder ..<timestamp>, then the link ..data is switched to it with one rename, and every
// top-level name is a link through ..data. A reader sees the old files or the new ones,
// never a mix; dir itself stays (a bind mount of it keeps working).
func writeAtomic(dir string, files map[string]file) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("failed to create folder %s: %w", dir, err)
	}
	ts, err := os.MkdirTemp(dir, "..data-")
	if err != nil {
		return fmt.Errorf("failed to create a folder in %s: %w", dir, err)
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return err
	}
	top := map[string]bool{}
	for name, f := range files {
		p := filepath.Join(ts, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("failed to create the folder of file %s: %w", p, err)
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return fmt.Errorf("failed to write file %s: %w", p, err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			return fmt.Errorf("failed to set the mode of file %s: %w", p, err)
		}
		top[strings.SplitN(filepath.ToSlash(name), "/", 2)[0]] = true
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return fmt.Errorf("failed to link %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return fmt.Errorf("failed to switch %s/..data: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		n := e.Name()
		switch {
		case n == "..data" || n == filepath.Base(ts):
		case strings.HasPrefix(n, ".."):
			_ = os.RemoveAll(filepath.Join(dir, n)) // an earlier generation
		case !top[n]:
			_ = os.Remove(filepath.Join(dir, n)) // a key that is gone
		}
	}
	for n := range top {
		link := filepath.Join(dir, n)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", n), link); err != nil {
			return fmt.Errorf("failed to link %s: %w", link, err)
		}
	}
	return nil
}

// hashFiles is a digest of files' names, modes and contents.
func hashFiles(files map[string]file) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00", n, files[n].mode, len(files[n].data))
		h.Write(files[n].data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// fileMode picks an item's mode, else the volume's default mode, else 0644.
func fileMode(item, def *int32) os.FileMode {
	switch {
	case item != nil:
		return os.FileMode(*item)
	case def != nil:
		return os.FileMode(*def)
	default:
		return 0o644
	}
}

// keyFiles adds data's keys to files: every key as a file of its name, or only the items'
// keys at the items' paths.
func keyFiles(kind, name string, data map[string][]byte, items []corev1.KeyToPath, optional bool, defaultMode *int32, files map[string]file) error {
	if len(items) == 0 {
		for k, v := range data {
			files[k] = file{data: v, mode: fileMode(nil, defaultMode)}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return fmt.Errorf("%s %s has no key %q", kind, name, it.Key)
		}
		p, err := cleanRelative(it.Path)
		if err != nil {
			return err
		}
		files[p] = file{data: v, mode: fileMode(it.Mode, defaultMode)}
	}
	return nil
}

func (w *podWorker) secretFiles(ctx context.Context, namespace, name string, items []corev1.KeyToPath, optional *bool, defaultMode *int32, files map[string]file) error {
	s, err := w.n.cfg.Client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && ptr.Deref(optional, false) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to get secret %s: %w", name, err)
	}
	return keyFiles("secret", name, s.Data, items, ptr.Deref(optional, false), defaultMode, files)
}

func (w *podWorker) configMapFiles(ctx context.Context, namespace, name string, items []corev1.KeyToPath, optional *bool, defaultMode *int32, files map[string]file) error {
	cm, err := w.n.cfg.Client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && ptr.Deref(optional, false) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to get configmap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles("configmap", name, data, items, ptr.Deref(optional, false), defaultMode, files)
}

// downwardFiles writes the pod fields a downward API volume asks for.
func downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, defaultMode *int32, files map[string]file) error {
	for _, it := range items {
		if it.FieldRef == nil {
			return fmt.Errorf("downward API file %s: only fieldRef is supported", it.Path)
		}
		v, err := podField(pod, it.FieldRef.FieldPath, pod.Status.PodIP)
		if err != nil {
			return err
		}
		p, err := cleanRelative(it.Path)
		if err != nil {
			return err
		}
		files[p] = file{data: []byte(v), mode: fileMode(it.Mode, defaultMode)}
	}
	return nil
}

// projectedFiles writes a projected volume's sources; service account tokens come from the
// TokenRequest API and are not refreshed.
func (w *podWorker) projectedFiles(ctx context.Context, pod *corev1.Pod, p *corev1.ProjectedVolumeSource, files map[string]file) error {
	for _, src := range p.Sources {
		var err error
		switch {
		case src.Secret != nil:
			err = w.secretFiles(ctx, pod.Namespace, src.Secret.Name, src.Secret.Items, src.Secret.Optional, p.DefaultMode, files)
		case src.ConfigMap != nil:
			err = w.configMapFiles(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, p.DefaultMode, files)
		case src.DownwardAPI != nil:
			err = downwardFiles(pod, src.DownwardAPI.Items, p.DefaultMode, files)
		case src.ServiceAccountToken != nil:
			err = w.tokenFile(ctx, pod, src.ServiceAccountToken, p.DefaultMode, files)
		default:
			err = errors.New("the process node does not support this projected volume source")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (w *podWorker) tokenFile(ctx context.Context, pod *corev1.Pod, t *corev1.ServiceAccountTokenProjection, defaultMode *int32, files map[string]file) error {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: t.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if t.Audience != "" {
		req.Spec.Audiences = []string{t.Audience}
	}
	tok, err := w.n.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("failed to get a token of service account %s: %w", sa, err)
	}
	p, err := cleanRelative(t.Path)
	if err != nil {
		return err
	}
	files[p] = file{data: []byte(tok.Status.Token), mode: fileMode(nil, defaultMode)}
	return nil
}

// cleanRelative checks that p is a relative path that stays inside its folder.
func cleanRelative(p string) (string, error) {
	c := path.Clean(p)
	if p == "" || path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("path %q must be relative and stay inside its volume", p)
	}
	return c, nil
}

// volumeBinds turns a container's volume mounts into the shim's bind mounts, parents before
// children. subPathExpr is expanded with lookup, the container's environment.
func volumeBinds(mounts []corev1.VolumeMount, vols map[string]volume, lookup func(string) (string, bool)) ([]bindMount, error) {
	var binds []bindMount
	for _, m := range mounts {
		v, ok := vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %q names no volume of the pod", m.Name)
		}
		src := v.path
		sub := m.SubPath
		if m.SubPathExpr != "" {
			sub = expand(m.SubPathExpr, lookup)
		}
		if sub != "" {
			rel, err := cleanRelative(sub)
			if err != nil {
				return nil, fmt.Errorf("volume mount %q: %w", m.Name, err)
			}
			src = filepath.Join(src, rel)
			if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
				if err := os.MkdirAll(src, 0o755); err != nil {
					return nil, fmt.Errorf("failed to create subpath %s: %w", src, err)
				}
			}
		}
		if !filepath.IsAbs(m.MountPath) {
			return nil, fmt.Errorf("volume mount %q: mount path %q is not absolute", m.Name, m.MountPath)
		}
		binds = append(binds, bindMount{Source: src, Target: filepath.Clean(m.MountPath), ReadOnly: m.ReadOnly || v.readOnly})
	}
	sort.SliceStable(binds, func(i, j int) bool {
		return strings.Count(binds[i].Target, "/") < strings.Count(binds[j].Target, "/")
	})
	return binds, nil
}
